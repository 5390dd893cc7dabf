"""/docs (Swagger UI) and /redoc render in a real browser with no network: headless Chromium loads the pages from
an API on a loopback port, every other host name fails to resolve, and the rendered DOM must list the API's
operations. A control page that loads Swagger UI from a CDN stays blank under the same rules, so the check means
something even on a machine with internet access.

Skipped when Chromium is not installed, unless SETTLEKIT_REQUIRE_BROWSER is set (CI sets it: `.ci/run` installs
Debian's chromium with `.ci/install-chromium`, as `make test` does where it needs no password), which turns a
missing browser into a failure."""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import pytest
from fastapi import FastAPI

from settlekit.store.db import connect
from support.api import make_app

REQUIRE_BROWSER = os.environ.get("SETTLEKIT_REQUIRE_BROWSER", "").strip().lower() in ("1", "true", "yes", "on")
BROWSERS = ("chromium", "chromium-browser", "google-chrome")


def _browser() -> str:
    for name in BROWSERS:
        found = shutil.which(name)
        if found:
            return found
    if REQUIRE_BROWSER:
        pytest.fail("SETTLEKIT_REQUIRE_BROWSER is set but no Chromium is installed (apt-get install chromium)",
                    pytrace=False)
    pytest.skip("Chromium is not installed (apt-get install chromium); the browser check of /docs is skipped")


@contextmanager
def _serve(app: Any) -> Iterator[str]:
    """Run `app` with uvicorn on a free loopback port; yields its base URL."""
    import uvicorn

    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=0, log_level="warning", lifespan="off"))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    try:
        deadline = time.monotonic() + 30
        while not server.started:
            assert time.monotonic() < deadline and thread.is_alive(), "uvicorn did not start"
            time.sleep(0.02)
        port = server.servers[0].sockets[0].getsockname()[1]
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        thread.join(10)


def _rendered_dom(browser: str, url: str) -> str:
    """The DOM of `url` after its scripts ran, in headless Chromium that can reach 127.0.0.1 only."""
    with tempfile.TemporaryDirectory(prefix="sk-chromium-") as profile:
        done = subprocess.run(
            [browser, "--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
             "--no-first-run", "--disable-extensions", "--disable-background-networking",
             f"--user-data-dir={profile}",
             "--host-resolver-rules=MAP * ~NOTFOUND, EXCLUDE 127.0.0.1",  # no network but the API
             "--virtual-time-budget=15000", "--dump-dom", url],
            capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    return done.stdout


@pytest.fixture(scope="module")
def browser() -> str:
    return _browser()


@pytest.fixture(scope="module")
def api_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    db = connect(f"sqlite:///{tmp_path_factory.mktemp('docs') / 'docs.db'}")
    db.migrate()
    try:
        with _serve(make_app(db)) as url:
            yield url
    finally:
        db.close()


def test_swagger_ui_renders_the_operations_offline(browser: str, api_url: str) -> None:
    dom = _rendered_dom(browser, f"{api_url}/docs")
    assert 'id="swagger-ui"' in dom
    # Swagger UI rendered the OpenAPI document: an operation block per operation, with its path
    assert 'id="operations-jobs-append_events_v1_jobs__job_id__events_post"' in dom, dom[:2000]
    assert 'data-path="/v1/jobs/{job_id}/events"' in dom
    assert "Append events to a job stream" in dom
    assert "cdn.jsdelivr.net" not in dom


def test_redoc_renders_the_operations_offline(browser: str, api_url: str) -> None:
    dom = _rendered_dom(browser, f"{api_url}/redoc")
    assert "Append events to a job stream" in dom, dom[:2000]
    assert "operation/append_events_v1_jobs__job_id__events_post" in dom
    assert "cdn.jsdelivr.net" not in dom


def test_a_cdn_page_stays_blank_under_the_same_rules(browser: str) -> None:
    control = FastAPI(title="control")  # FastAPI's own /docs: Swagger UI from a CDN

    @control.get("/ping", summary="Ping the control app")
    def ping() -> dict[str, str]:
        return {}

    with _serve(control) as url:
        dom = _rendered_dom(browser, f"{url}/docs")
        assert "cdn.jsdelivr.net" in dom and "Ping the control app" not in dom
