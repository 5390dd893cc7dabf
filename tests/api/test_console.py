"""The operator console (`/console`) in-process, on both backends: sign-in and its cookie, every page and action
against what the JSON routes answer, scopes, CSRF and Origin checks, hostile content rendered inert, and another
tenant's key seeing nothing of tenant A."""

from __future__ import annotations

import html
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any
from urllib.parse import quote

import pytest

from conftest import backend_database
from settlekit.api.auth import create_api_key, revoke_api_key
from settlekit.console.web import Console
from settlekit.store import streams
from settlekit.store.db import Database
from support.api import TENANT_A, TENANT_B, TestClient, client, delivery_row_id, key_for, seed_tenant, tenant_rows
from support.console import (
    HOSTILE_JOB_ID,
    LONG,
    ORIGIN,
    PROBE_CONSUMER,
    csrf_of,
    dead_consumer,
    make_console_app,
    post,
    seed_hostile,
    sign_in,
)

OPERATOR = "system"
RAW_MARKUP = ("<script>window.__pwned", "<img src=x onerror", "<img/src=x/onerror")


@dataclass
class Env:
    db: Database
    app: Any
    key_a: str
    key_b: str
    key_read: str
    key_operator: str
    api_a: TestClient
    job_id: str
    destination_id: str
    delivery_id: str  # as the console shows it to the tenant
    artifact_id: str


@pytest.fixture(scope="module", params=["sqlite", "postgres"])
def env(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Env]:
    with backend_database(request, tmp_path_factory, request.param) as db:
        app = make_console_app(db)
        key_a = key_for(db, TENANT_A)
        api_a = client(app, key_a)
        seeded = seed_tenant(db, api_a)
        seed_hostile(api_a)
        r = api_a.post("/v1/destinations/dst_a/disable", json={"reason": "<script>window.__pwned=6</script>"})
        assert r.status_code == 200, r.text
        assert api_a.post("/v1/destinations/dst_a/enable", json={}).status_code == 200
        assert api_a.post("/v1/finance/closes/2026-01").status_code == 201
        dead_consumer(db)
        yield Env(db, app, key_a, key_for(db, TENANT_B), create_api_key(db, TENANT_A, ["jobs:read"])[1],
                  key_for(db, OPERATOR), api_a, seeded.job_id, seeded.destination_id, seeded.delivery_id,
                  seeded.artifact_id)


@pytest.fixture(scope="module")
def signed_a(env: Env) -> tuple[TestClient, str]:
    return sign_in(env.app, env.key_a)


def pages(env: Env) -> list[str]:
    job = quote(env.job_id, safe="")
    return ["/console/", "/console/overview/panel", "/console/jobs", f"/console/jobs?q={quote('job_')}",
            "/console/jobs?status=SETTLED", f"/console/job?id={job}",
            f"/console/job?id={quote(HOSTILE_JOB_ID, safe='')}", "/console/deliveries",
            f"/console/destination?id={env.destination_id}", f"/console/delivery?id={env.delivery_id}",
            "/console/ledger", "/console/ledger?asOf=2026-01-05T10:01:00Z", "/console/ledger?party=pty_platform",
            "/console/ledger/account?id=acct_cash", "/console/finance", "/console/finance/close?month=2026-01",
            f"/console/finance/proof?month=2026-01&job={job}"]


def assert_inert(text: str) -> None:
    for raw in RAW_MARKUP:
        assert raw not in text, raw
    assert "javascript:alert" not in text or 'href="javascript:' not in text


def test_sign_in_sets_a_signed_http_only_strict_cookie(env: Env) -> None:
    browser = TestClient(env.app, base_url=ORIGIN)
    assert browser.get("/console", follow_redirects=False).headers["location"] == "/console/"
    assert browser.get("/console/jobs", follow_redirects=False).headers["location"] == "/console/login"
    form = browser.get("/console/login")
    assert form.headers["content-security-policy"].startswith("default-src 'self'")
    r = browser.post("/console/login", data={"csrf": csrf_of(form.text), "api_key": env.key_a},
                     headers={"origin": ORIGIN}, follow_redirects=False)
    assert r.status_code == 303
    cookie = r.headers["set-cookie"]
    assert cookie.startswith("sk_console=") and "HttpOnly" in cookie and "SameSite=strict" in cookie
    assert "Path=/console" in cookie and "Max-Age=28800" in cookie and "Secure" not in cookie
    assert env.key_a.split("_", 2)[2] not in cookie  # the key's secret never goes into the cookie
    assert browser.get("/console/jobs").status_code == 200
    # a tampered cookie is no session
    browser.cookies.set("sk_console", cookie.split(";")[0].split("=", 1)[1][:-2] + "xx", path="/console")
    assert browser.get("/console/jobs", follow_redirects=False).status_code == 303


def test_the_cookie_is_secure_over_tls(env: Env) -> None:
    browser = TestClient(env.app, base_url="https://testserver")
    form = browser.get("/console/login")
    assert "Secure" in form.headers["set-cookie"]
    r = browser.post("/console/login", data={"csrf": csrf_of(form.text), "api_key": env.key_a},
                     headers={"origin": "https://testserver"}, follow_redirects=False)
    assert r.status_code == 303 and "Secure" in r.headers["set-cookie"]


def test_sign_in_refusals(env: Env) -> None:
    browser = TestClient(env.app, base_url=ORIGIN)
    token = csrf_of(browser.get("/console/login").text)
    bad = browser.post("/console/login", data={"csrf": token, "api_key": "sk_0000000000000000_nope"},
                       headers={"origin": ORIGIN})
    assert bad.status_code == 401 and "not valid" in bad.text and "set-cookie" not in {
        k.lower() for k in bad.headers if bad.headers[k].startswith("sk_console=")}
    assert browser.post("/console/login", data={"api_key": env.key_a}, headers={"origin": ORIGIN}).status_code == 403
    assert browser.post("/console/login", data={"csrf": token, "api_key": env.key_a},
                        headers={"origin": "http://evil.example"}).status_code == 403
    assert browser.post("/console/login", data={"csrf": token, "api_key": env.key_a}).status_code == 403


def test_every_page_renders_with_a_strict_csp_and_inert_hostile_content(env: Env,
                                                                        signed_a: tuple[TestClient, str]) -> None:
    browser, _ = signed_a
    for page in pages(env):
        r = browser.get(page)
        assert r.status_code == 200, (page, r.text[:500])
        csp = r.headers["content-security-policy"]
        assert "script-src 'self'" in csp and "unsafe-inline" not in csp and "frame-ancestors 'none'" in csp
        assert r.headers["x-content-type-options"] == "nosniff"
        assert_inert(r.text)
    hostile = browser.get(f"/console/job?id={quote(HOSTILE_JOB_ID, safe='')}").text
    assert "&lt;script&gt;window.__pwned=1&lt;/script&gt;" in hostile and "\u202e" in hostile
    assert LONG[:100] in hostile
    listing = browser.get("/console/jobs").text
    assert f'href="/console/job?id={quote(HOSTILE_JOB_ID)}"' in listing  # percent-encoded: one query value


def test_job_page_matches_the_api(env: Env, signed_a: tuple[TestClient, str]) -> None:
    browser, _ = signed_a
    page = browser.get(f"/console/job?id={env.job_id}").text
    assert 'id="verified">verifies' in page and page.count('class="ok">verified') == len(
        env.api_a.get(f"/v1/jobs/{env.job_id}/events").json()["events"])
    for entry in env.api_a.get(f"/v1/jobs/{env.job_id}/ledger/entries").json()["entries"]:
        assert entry["entry"]["id"][:28] in page
    for art in env.api_a.get(f"/v1/jobs/{env.job_id}/artifacts").json()["artifacts"]:
        assert html.escape(art["artifactId"][:40]) in page
    assert 'class="delivery"' in page and "dst_a" in page
    export = browser.get(f"/console/job/export?id={env.job_id}")
    assert export.json() == env.api_a.get(f"/v1/jobs/{env.job_id}/export").json()
    assert "attachment" in export.headers["content-disposition"]
    artifact = browser.get(f"/console/artifact?id={quote(env.artifact_id, safe='')}")
    assert artifact.json() == env.api_a.get(f"/v1/artifacts/{quote(env.artifact_id, safe='')}").json()


def test_jobs_search_and_keyset_pages(env: Env, signed_a: tuple[TestClient, str]) -> None:
    browser, _ = signed_a
    found = browser.get("/console/jobs?q=job_settle").text
    assert env.job_id in found and "window.__pwned" not in found
    assert env.job_id not in browser.get("/console/jobs?q=job_zzz").text
    page = streams.job_prefix_page(env.db, TENANT_A, "job_", after=None, limit=1)
    assert len(page.jobs) == 1 and page.more
    rest = streams.job_prefix_page(env.db, TENANT_A, "job_", after=page.last_seen, limit=10)
    assert {j.job_id for j in page.jobs + rest.jobs} == {env.job_id, HOSTILE_JOB_ID} and not rest.more
    settled = browser.get("/console/jobs?status=SETTLED").text
    assert env.job_id in settled and "window.__pwned" not in settled


def test_finance_pages_and_downloads_match_the_api(env: Env, signed_a: tuple[TestClient, str]) -> None:
    browser, _ = signed_a
    close = env.api_a.get("/v1/finance/closes/2026-01").json()
    assert close["merkleLog"]["rootHash"][:24] in browser.get("/console/finance").text
    assert close["merkleLog"]["rootHash"] in browser.get("/console/finance/close?month=2026-01").text
    journal = browser.get("/console/finance/journal.csv?month=2026-01")
    assert journal.content == env.api_a.get("/v1/finance/closes/2026-01/journal.csv").content
    proof = browser.get(f"/console/finance/proof?month=2026-01&job={env.job_id}").text
    api_proof = env.api_a.get(f"/v1/finance/closes/2026-01/proofs/{env.job_id}").json()
    assert api_proof["auditPath"] == [] or api_proof["auditPath"][0] in proof
    assert browser.get("/console/finance/close?month=2026-13").status_code == 400
    balances = env.api_a.get("/v1/ledger/balances").json()["balances"]
    ledger = browser.get("/console/ledger").text
    assert all(account in ledger for account in balances)


def test_actions_need_the_csrf_token_and_this_origin(env: Env, signed_a: tuple[TestClient, str]) -> None:
    browser, csrf = signed_a
    before = tenant_rows(env.db, TENANT_A)
    for token, origin in ((None, ORIGIN), ("forged", ORIGIN), (csrf, "http://evil.example"), (csrf, None)):
        r = post(browser, "/console/destination/requeue", token, origin, id=env.destination_id)
        assert r.status_code == 403, (token, origin, r.text[:300])
        r = post(browser, "/console/destination/disable", token, origin, id=env.destination_id)
        assert r.status_code == 403
    assert tenant_rows(env.db, TENANT_A) == before
    other, other_csrf = sign_in(env.app, env.key_a)
    assert other_csrf != csrf
    assert post(other, "/console/destination/disable", csrf, id=env.destination_id).status_code == 403


def act(browser: TestClient, path: str, csrf: str, landing: str, **fields: str) -> str:
    """Post an action: it answers 303 to `landing` (post/redirect/get), whose page shows the outcome once."""
    r = post(browser, path, csrf, **fields)
    assert r.status_code == 303 and r.headers["location"] == landing, (path, r.status_code, r.text[:500])
    page = browser.get(landing)
    assert page.status_code == 200 and 'id="outcome"' in page.text, page.text[:500]
    return html.unescape(page.text)


def test_destination_actions(env: Env, signed_a: tuple[TestClient, str]) -> None:
    browser, csrf = signed_a
    landing = f"/console/destination?id={env.destination_id}"
    page = act(browser, "/console/destination/replay", csrf, landing, id=env.destination_id,
               since="2026-01-01T00:00:00", until="2026-01-02T00:00:00")
    assert "Replay started" in page
    replays = env.api_a.get(f"/v1/destinations/{env.destination_id}/replays").json()["replays"]
    assert replays[0]["replayId"] in page
    # reloading the page it landed on shows the page alone and repeats nothing
    again = browser.get(landing).text
    assert 'id="outcome"' not in again and "Replay started" not in again
    assert env.api_a.get(f"/v1/destinations/{env.destination_id}/replays").json()["replays"] == replays
    assert '"requeued"' in act(browser, "/console/destination/requeue", csrf, landing, id=env.destination_id)
    act(browser, "/console/destination/disable", csrf, landing, id=env.destination_id, reason="maintenance")
    assert env.api_a.get(f"/v1/destinations/{env.destination_id}").json()["status"] == "disabled"
    act(browser, "/console/destination/enable", csrf, landing, id=env.destination_id)
    assert env.api_a.get(f"/v1/destinations/{env.destination_id}").json()["status"] == "active"
    before = env.api_a.get(f"/v1/destinations/{env.destination_id}").json()["secretRef"]
    page = act(browser, "/console/destination/rotate-secret", csrf, landing, id=env.destination_id)
    assert 'id="new-secret">whsec_' in page
    secret = page.split('id="new-secret">', 1)[1].split("<", 1)[0]
    assert secret not in browser.get(landing).text  # shown once
    after = env.api_a.get(f"/v1/destinations/{env.destination_id}").json()
    assert after["secretRef"] != before and after["previousSecretRef"] == before
    page = act(browser, "/console/destination/test", csrf, landing, id=env.destination_id)
    assert '"ok": false' in page  # nothing listens on the destination's port
    r = post(browser, "/console/delivery/requeue", csrf, id=str(env.delivery_id))
    assert r.status_code in (303, 409)
    if r.status_code == 303:
        assert r.headers["location"] == f"/console/delivery?id={env.delivery_id}"


def test_scopes_follow_the_api_routes(env: Env) -> None:
    reader, csrf = sign_in(env.app, env.key_read)
    assert reader.get("/console/jobs").status_code == 200
    assert "Deliveries</a>" not in reader.get("/console/jobs").text
    for page in ("/console/deliveries", f"/console/destination?id={env.destination_id}",
                 f"/console/delivery?id={env.delivery_id}", "/console/dispatcher"):
        r = reader.get(page)
        assert r.status_code == 403 and "SCOPE_REQUIRED" in r.text, page
    assert post(reader, "/console/destination/requeue", csrf, id=env.destination_id).status_code == 403
    job_page = reader.get(f"/console/job?id={env.job_id}").text
    assert "needs the ops scope" in job_page
    tenant_admin, _ = sign_in(env.app, env.key_a)
    assert "OPERATOR_TENANT_REQUIRED" in tenant_admin.get("/console/dispatcher").text


def test_dispatcher_rearm_and_skip(env: Env) -> None:
    operator, csrf = sign_in(env.app, env.key_operator)
    page = operator.get("/console/dispatcher")
    assert page.status_code == 200 and PROBE_CONSUMER in page.text
    assert_inert(page.text)
    consumers = {c["name"]: c for c in client(env.app, env.key_operator).get("/v1/ops/consumers").json()["consumers"]}
    assert consumers[PROBE_CONSUMER]["status"] == "dead"
    assert "Consumer rearmed" in act(operator, "/console/dispatcher/rearm", csrf, "/console/dispatcher",
                                     name=PROBE_CONSUMER)
    state = client(env.app, env.key_operator).get(f"/v1/ops/consumers/{PROBE_CONSUMER}").json()
    assert state["storedStatus"] != "dead"
    r = post(operator, "/console/dispatcher/skip", csrf, name=PROBE_CONSUMER)
    assert r.status_code in (303, 409), r.text[:500]
    assert post(operator, "/console/dispatcher/rearm", csrf, name="no_such_consumer").status_code == 404


def test_another_tenant_sees_nothing_of_tenant_a(env: Env) -> None:
    before = tenant_rows(env.db, TENANT_A)
    root = env.api_a.get("/v1/finance/closes/2026-01").json()["merkleLog"]["rootHash"]
    browser, csrf = sign_in(env.app, env.key_b)
    job = quote(env.job_id, safe="")
    for page in (f"/console/job?id={job}", f"/console/job/export?id={job}",
                 f"/console/artifact?id={quote(env.artifact_id, safe='')}",
                 f"/console/destination?id={env.destination_id}", f"/console/delivery?id={env.delivery_id}",
                 "/console/finance/close?month=2026-01", f"/console/finance/proof?month=2026-01&job={job}",
                 "/console/finance/journal.csv?month=2026-01"):
        r = browser.get(page)
        assert r.status_code == 404, (page, r.status_code, r.text[:300])
        assert env.job_id not in r.text or "not found" in r.text
    for page in ("/console/", "/console/jobs", "/console/deliveries", "/console/ledger", "/console/finance",
                 "/console/ledger/account?id=acct_cash",
                 f"/console/jobs?q={quote(env.job_id[:8])}"):
        r = browser.get(page)
        assert r.status_code == 200
        assert env.job_id not in r.text and "dst_a" not in r.text and root[:24] not in r.text, page
    for path, fields in (("/console/destination/requeue", {"id": env.destination_id}),
                         ("/console/destination/disable", {"id": env.destination_id}),
                         ("/console/destination/rotate-secret", {"id": env.destination_id}),
                         ("/console/destination/replay", {"id": env.destination_id, "since": "2026-01-01T00:00:00"}),
                         ("/console/delivery/requeue", {"id": str(env.delivery_id)})):
        assert post(browser, path, csrf, **fields).status_code == 404, path
    assert tenant_rows(env.db, TENANT_A) == before


def test_sign_out_and_revocation_end_the_session(env: Env) -> None:
    secret_key = create_api_key(env.db, TENANT_A, ["jobs:read"])
    browser, csrf = sign_in(env.app, secret_key[1])
    copy = TestClient(env.app, base_url=ORIGIN)  # the cookie copied to another browser (or another API process)
    copy.cookies.set("sk_console", browser.cookies.get("sk_console") or "", path="/console")
    assert copy.get("/console/jobs").status_code == 200
    r = post(browser, "/console/logout", csrf)
    assert r.status_code == 303 and 'sk_console=""' in r.headers["set-cookie"]
    assert browser.get("/console/jobs", follow_redirects=False).status_code == 303
    assert copy.get("/console/jobs", follow_redirects=False).headers["location"] == "/console/login"
    again, _ = sign_in(env.app, secret_key[1])
    revoke_api_key(env.db, secret_key[0])
    assert again.get("/console/jobs", follow_redirects=False).headers["location"] == "/console/login"


def test_the_console_can_be_turned_off(tmp_path: Any) -> None:
    from settlekit.store.db import connect

    db = connect(f"sqlite:///{tmp_path / 'off.db'}")
    db.migrate()
    try:
        browser = TestClient(make_console_app(db, console=False))
        assert browser.get("/console/login").status_code == 404
        assert browser.get("/console/static/console.js").status_code == 404
    finally:
        db.close()


def test_actions_and_sign_ins_are_audited(env: Env, caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level("INFO", logger="settlekit.console.audit"):
        browser, csrf = sign_in(env.app, env.key_a)
        post(browser, "/console/destination/requeue", csrf, id=env.destination_id)
        post(browser, "/console/delivery/requeue", csrf, id="A" * 32)  # no delivery of the tenant
    records = [r for r in caplog.records if r.name == "settlekit.console.audit"]
    assert any(r.getMessage() == "console sign-in" and getattr(r, "tenant_id", None) == TENANT_A for r in records)
    done = [r for r in records if r.getMessage() == "console action"]
    assert [(r.__dict__["action"], r.__dict__["outcome"]) for r in done] == [
        ("/destination/requeue", "ok"), ("/delivery/requeue", "NOT_FOUND")]
    assert all(r.__dict__["key_id"] and r.__dict__["tenant_id"] == TENANT_A for r in done)


def test_an_ops_only_key_sees_the_overview_without_jobs(env: Env) -> None:
    ops_key = create_api_key(env.db, TENANT_A, ["ops"])[1]
    browser, _ = sign_in_at(env, ops_key, "/console/deliveries")
    overview = browser.get("/console/")
    assert overview.status_code == 200 and "needs the jobs:read scope" in overview.text
    assert browser.get("/console/jobs").status_code == 403


def sign_in_at(env: Env, api_key: str, landing: str) -> tuple[TestClient, str]:
    browser = TestClient(env.app, base_url=ORIGIN)
    form = browser.get("/console/login")
    r = browser.post("/console/login", data={"csrf": csrf_of(form.text), "api_key": api_key},
                     headers={"origin": ORIGIN}, follow_redirects=False)
    assert r.status_code == 303
    page = browser.get(landing)
    assert page.status_code == 200, page.text[:300]
    return browser, csrf_of(page.text)


def test_delivery_ids_are_the_tenants_own(env: Env) -> None:
    """The console names deliveries as the API does: the tenant's opaque id, never the global row id."""
    browser, csrf = sign_in(env.app, env.key_a)
    page = browser.get(f"/console/destination?id={env.destination_id}").text
    row = delivery_row_id(env.db, TENANT_A, env.delivery_id)
    assert f"delivery?id={env.delivery_id}" in page and f"delivery?id={row}\"" not in page
    detail = browser.get(f"/console/delivery?id={env.delivery_id}")
    assert detail.status_code == 200 and env.delivery_id in detail.text
    numeric = (browser.get(f"/console/delivery?id={row}"),
               post(browser, "/console/delivery/requeue", csrf, id=str(row)))
    for r in numeric:
        assert r.status_code == 400 and "CURSOR_NUMERIC" in r.text
    assert browser.get("/console/delivery?id=" + "A" * 32).status_code == 404


def test_a_long_timeline_lists_its_first_events_and_verifies_them_all(env: Env, signed_a: tuple[TestClient, str],
                                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("settlekit.console.web.TIMELINE_ROWS", 3)
    browser, _ = signed_a
    page = browser.get(f"/console/job?id={env.job_id}").text
    events = env.api_a.get(f"/v1/jobs/{env.job_id}/events").json()["events"]
    assert page.count('class="ok">verified') == 3 and f"{len(events) - 3} later events" in page
    assert 'id="verified">verifies' in page


def test_requests_are_labelled_by_their_full_route_template(env: Env, signed_a: tuple[TestClient, str],
                                                            caplog: pytest.LogCaptureFixture) -> None:
    """Metrics and request logs name a console request by its route's template under /console (a fixed set the
    routes define), never by the text of its path."""
    browser, csrf = signed_a
    routes = Console(env.app.state.settlekit, None).routes()  # type: ignore[arg-type]
    templates = {f"/console{r.path}".replace("{verb:str}", "{verb}") for r in routes} | {"/console/static/{path}"}
    with caplog.at_level("INFO", logger="settlekit.api.request"):
        for page in (f"/console/job?id={quote(HOSTILE_JOB_ID, safe='')}", f"/console/destination?id=dst_{LONG[:50]}",
                     "/console/static/console.css", "/console/no/such/page"):
            browser.get(page)
        post(browser, "/console/destination/requeue", csrf, id=env.destination_id)
    labels = {s.labels["route"] for m in env.app.state.settlekit.registry.collect() for s in m.samples
              if m.name == "settlekit_api_requests"}
    console = {label for label in labels if label.startswith("/console")}
    assert {"/console/job", "/console/destination", "/console/static/{path}", "/console/destination/{verb}"} <= console
    assert console <= templates and not any("script" in label or "LLLL" in label for label in labels)
    logged = {getattr(r, "route", None) for r in caplog.records if getattr(r, "path", "").startswith("/console")}
    assert {"/console/job", "/console/destination/{verb}"} <= logged and logged - {None} <= templates


def test_the_overview_append_rate_comes_from_the_database(env: Env, signed_a: tuple[TestClient, str]) -> None:
    """Every API process appends to one log: the overview counts from it, the tenant its own events, the operator
    the whole deployment's too."""
    from datetime import UTC, datetime

    from settlekit.store import append_rate

    browser, _ = signed_a
    page = browser.get("/console/overview/panel").text
    hour = append_rate.tenant_recent(env.db, TENANT_A, datetime.now(UTC))[1]
    assert hour > 0 and f"{hour:,} in the last hour" in page
    assert 'id="deployment-appends"' not in page  # other tenants' volume is the operator's to see
    operator, _ = sign_in(env.app, env.key_operator)
    whole = append_rate.deployment_rate(env.db, datetime.now(UTC))
    page = operator.get("/console/overview/panel").text
    assert 'id="deployment-appends"' in page and f"{whole.last_hour:,} in the last hour" in page
    assert whole.last_hour >= hour
