"""Shared helpers for the console's tests (no tests here): the API with the console mounted, signing in, the
CSRF token of a page, and hostile content to seed."""

from __future__ import annotations

import re
from typing import Any

from prometheus_client import CollectorRegistry

from settlekit.dispatch import Consumer, Dispatcher, ErrorPolicy
from settlekit.store.db import Database
from support.api import TestClient, make_app

ORIGIN = "http://testserver"
HOSTILE = "<script>window.__pwned=1</script>\"><img src=x onerror=\"window.__pwned=2\">\u202ejavascript:alert(1)"
HOSTILE_JOB_ID = "job_<script>window.__pwned=3</script>\"><img/src=x/onerror=window.__pwned=4>\u202e"
LONG = "L" * 5000
PROBE_CONSUMER = "console_probe"


def make_console_app(db: Database, **options: Any) -> Any:
    """The API on `db` with the console mounted (`make_app`'s options)."""
    from settlekit.console import console_mounts
    from settlekit.runtime.settings import Settings

    settings = Settings(**{k: v for k, v in options.items() if k in Settings.model_fields})
    return make_app(db, mounts=console_mounts(settings), **options)


def csrf_of(html: str) -> str:
    found = re.search(r'name="csrf" value="([^"]+)"', html)
    assert found, html[:2000]
    return found.group(1)


def sign_in(app: Any, api_key: str) -> tuple[TestClient, str]:
    """A client signed in to the console with `api_key`, and its session's CSRF token."""
    browser = TestClient(app, base_url=ORIGIN)
    form = browser.get("/console/login")
    assert form.status_code == 200, form.text
    r = browser.post("/console/login", data={"csrf": csrf_of(form.text), "api_key": api_key},
                     headers={"origin": ORIGIN}, follow_redirects=False)
    assert r.status_code == 303, r.text
    page = browser.get("/console/jobs")
    assert page.status_code == 200, page.text
    return browser, csrf_of(page.text)


def post(browser: TestClient, path: str, csrf: str | None, origin: str | None = ORIGIN, **fields: str) -> Any:
    data = dict(fields)
    if csrf is not None:
        data["csrf"] = csrf
    headers = {"origin": origin} if origin is not None else {}
    return browser.post(path, data=data, headers=headers, follow_redirects=False)


def seed_hostile(api: TestClient) -> str:
    """A job whose id and payload hold script, markup, a javascript: URL, U+202E and a very long string; and a
    destination disabled with such a reason. Returns the job id."""
    payload = {"templateId": HOSTILE, "customerId": HOSTILE, "siteId": LONG, "constraints": {"zoneId": HOSTILE}}
    r = api.post("/v1/jobs", json={"jobId": HOSTILE_JOB_ID, "payload": payload})
    assert r.status_code == 201, r.text
    return HOSTILE_JOB_ID


def dead_consumer(db: Database) -> None:
    """A consumer that fails on every event, dead after one attempt (for rearm and skip)."""

    def fail(event: Any, ctx: Any) -> None:
        raise RuntimeError("console probe: <script>window.__pwned=5</script>")

    consumer = Consumer(PROBE_CONSUMER, fail, error_policy=ErrorPolicy(max_attempts=1))
    Dispatcher(db, [consumer], listen=False, backoff_base=0.0, rearm_cooldown=3600,
               registry=CollectorRegistry()).run_once()
