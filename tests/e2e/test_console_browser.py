"""The console in a real browser: Debian's headless Chromium, driven by Selenium through Debian's chromedriver (no
browser or driver download; every host but 127.0.0.1 fails to resolve). It signs in, opens every page, follows a
job from the list to its artifacts and a delivery, runs a replay and a rearm, checks what the pages show against
the API, checks that no script from hostile content ran and that the browser reported no Content-Security-Policy
violation, and saves a screenshot of each page (into SETTLEKIT_CONSOLE_SCREENSHOTS when set, as docs/console/
was made; otherwise into a temporary folder).

Skipped when Chromium, chromedriver or Selenium is missing, unless SETTLEKIT_REQUIRE_BROWSER is set (CI)."""

from __future__ import annotations

import os
import shutil
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import quote

import pytest

from settlekit.store.db import connect
from support.api import TENANT_A, client, key_for, seed_tenant
from support.console import HOSTILE_JOB_ID, PROBE_CONSUMER, dead_consumer, make_console_app, seed_hostile
from support.http_server import serve

REQUIRE_BROWSER = os.environ.get("SETTLEKIT_REQUIRE_BROWSER", "").strip().lower() in ("1", "true", "yes", "on")
WAIT = 20.0  # hang guard of each wait for the page


def _missing(what: str) -> None:
    if REQUIRE_BROWSER:
        pytest.fail(f"SETTLEKIT_REQUIRE_BROWSER is set but {what} is missing", pytrace=False)
    pytest.skip(f"{what} is missing: the console's browser test is skipped")


@pytest.fixture(scope="module")
def driver() -> Iterator[Any]:
    browser = shutil.which("chromium") or shutil.which("chromium-browser")
    chromedriver = shutil.which("chromedriver")
    if browser is None or chromedriver is None:
        _missing("chromium or chromedriver (apt-get install chromium chromium-driver)")
    try:
        from selenium import webdriver
        from selenium.webdriver.chrome.service import Service
    except ImportError:
        _missing("selenium")
    options = webdriver.ChromeOptions()
    options.binary_location = str(browser)
    for arg in ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage", "--no-first-run",
                "--disable-extensions", "--disable-background-networking", "--window-size=1200,900",
                "--host-resolver-rules=MAP * ~NOTFOUND, EXCLUDE 127.0.0.1"):
        options.add_argument(arg)
    options.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    chrome = webdriver.Chrome(service=Service(executable_path=str(chromedriver)), options=options)
    try:
        yield chrome
    finally:
        chrome.quit()


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Any]]:
    db = connect(f"sqlite:///{tmp_path_factory.mktemp('console') / 'console.db'}")
    db.migrate()
    try:
        app = make_console_app(db, operator_tenant=TENANT_A)
        key = key_for(db, TENANT_A)
        api = client(app, key)
        seeded = seed_tenant(db, api)
        seed_hostile(api)
        assert api.post("/v1/finance/closes/2026-01").status_code == 201
        dead_consumer(db)
        with serve(app) as url:
            yield {"url": url, "key": key, "api": api, "seeded": seeded}
    finally:
        db.close()


def _wait(condition: Any, what: str) -> Any:
    deadline = time.monotonic() + WAIT
    while True:
        found = condition()
        if found:
            return found
        assert time.monotonic() < deadline, f"hang guard: {what}"
        time.sleep(0.05)


class Pages:
    def __init__(self, driver: Any, base: str, shots: Path):
        self.driver = driver
        self.base = base
        self.shots = shots

    def open(self, path: str) -> None:
        self.driver.get(f"{self.base}{path}")
        _wait(lambda: self.driver.execute_script("return document.readyState") == "complete", path)

    def text(self, css: str = "main") -> str:
        from selenium.webdriver.common.by import By

        return str(self.driver.find_element(By.CSS_SELECTOR, css).text)

    def click(self, css: str) -> None:
        """Click a link or a form's button and wait for the page it leads to (the old page gone, the new loaded)."""
        from selenium.common.exceptions import StaleElementReferenceException
        from selenium.webdriver.common.by import By

        old = self.driver.find_element(By.TAG_NAME, "html")
        self.driver.find_element(By.CSS_SELECTOR, css).click()

        def left() -> bool:
            try:
                old.tag_name  # noqa: B018 - raises once the page it belongs to is gone
            except StaleElementReferenceException:
                return True
            return False

        _wait(left, f"the page after {css}")
        _wait(lambda: self.driver.execute_script("return document.readyState") == "complete", css)

    def shot(self, name: str, width: int = 1200) -> None:
        height = int(self.driver.execute_script("return document.documentElement.scrollHeight"))
        self.driver.set_window_size(width, min(max(height + 140, 500), 2200))
        self.driver.save_screenshot(str(self.shots / f"{name}.png"))
        self.driver.set_window_size(1200, 900)

    def no_script_ran(self) -> None:
        assert self.driver.execute_script("return window.__pwned === undefined") is True


def test_console_in_chromium(driver: Any, site: dict[str, Any], tmp_path: Path) -> None:
    shots = Path(os.environ.get("SETTLEKIT_CONSOLE_SCREENSHOTS") or tmp_path)
    shots.mkdir(parents=True, exist_ok=True)
    api = site["api"]
    seeded = site["seeded"]
    page = Pages(driver, site["url"], shots)

    page.open("/console/jobs")
    assert driver.current_url.endswith("/console/login")
    page.shot("sign-in")
    driver.find_element("id", "api_key").send_keys(site["key"])
    page.click("form.stack button")
    assert driver.current_url.endswith("/console/")
    assert "Events appended (this tenant)" in page.text()
    # the overview's script runs under the CSP and refreshes the panel
    driver.execute_script("document.getElementById('overview-panel').dispatchEvent(new Event('console-refresh'))")
    _wait(lambda: driver.execute_script(
        "return document.getElementById('overview-panel').getAttribute('data-refreshed')"), "overview refresh")
    page.shot("overview")

    page.open("/console/jobs")
    listed = {j["jobId"] for j in api.get("/v1/jobs").json()["jobs"]}
    rows = driver.find_elements("css selector", "#jobs a.job-link")
    assert len(rows) == len(listed)
    page.no_script_ran()
    page.shot("jobs")
    page.shot("jobs-phone", width=390)

    driver.find_element("link text", seeded.job_id).click()
    _wait(lambda: "Timeline" in page.text(), "job page")
    events = api.get(f"/v1/jobs/{seeded.job_id}/events").json()["events"]
    assert page.text("#verified") == "verifies"
    assert len(driver.find_elements("css selector", "#timeline tbody tr")) == len(events)
    artifacts = api.get(f"/v1/jobs/{seeded.job_id}/artifacts").json()["artifacts"]
    assert len(driver.find_elements("css selector", "#artifacts a.artifact-link")) == len(artifacts)
    page.shot("job")
    page.click("#artifacts .delivery a")
    assert "Attempt log" in page.text()
    page.shot("delivery")

    page.open(f"/console/job?id={quote(HOSTILE_JOB_ID, safe='')}")
    assert HOSTILE_JOB_ID in page.text("h1")  # shown as text, not run
    page.no_script_ran()
    page.shot("job-hostile")

    page.open("/console/deliveries")
    assert "dst_a" in page.text("#destinations")
    page.shot("deliveries")
    page.click("#destinations a.destination-link")
    page.shot("destination")
    page.click("#replay")  # the last hour, as the form proposes
    assert "Replay started" in page.text("#outcome"), page.text()
    replay_ids = {r["replayId"] for r in api.get("/v1/destinations/dst_a/replays").json()["replays"]}
    assert any(replay_id in page.text("#result") for replay_id in replay_ids)
    assert "/console/destination?id=dst_a" in driver.current_url  # redirected (303) to the page: a reload is a GET
    driver.refresh()
    _wait(lambda: driver.execute_script("return document.readyState") == "complete", "reload")
    assert not driver.find_elements("id", "outcome")  # the message was shown once
    assert {r["replayId"] for r in api.get("/v1/destinations/dst_a/replays").json()["replays"]} == replay_ids

    page.open("/console/dispatcher")
    assert PROBE_CONSUMER in page.text()
    page.no_script_ran()
    page.shot("dispatcher")
    page.click("button.rearm")
    assert "Consumer rearmed" in page.text("#outcome")
    assert api.get(f"/v1/ops/consumers/{PROBE_CONSUMER}").json()["storedStatus"] != "dead"

    page.open("/console/ledger")
    balances = api.get("/v1/ledger/balances").json()["balances"]
    assert all(account in page.text("#balances") for account in balances)
    page.shot("ledger")
    page.open("/console/ledger/account?id=acct_cash")
    page.shot("account")
    page.open("/console/finance")
    root = api.get("/v1/finance/closes/2026-01").json()["merkleLog"]["rootHash"]
    assert root[:24] in page.text("#closes")
    page.shot("finance")
    page.open("/console/finance/close?month=2026-01")
    assert root in page.text("#root")
    page.shot("close")
    page.open(f"/console/finance/proof?month=2026-01&job={quote(seeded.job_id)}")
    page.shot("proof")

    violations = [e["message"] for e in driver.get_log("browser") if "Content Security Policy" in e["message"]]
    assert violations == []
    page.no_script_ran()

    page.click("header form button")
    assert driver.current_url.endswith("/console/login")
