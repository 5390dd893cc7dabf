"""The console's sessions on both backends: the cookie signed, expiring, bound to its purpose, its signing key
derived from the server's; the server-side row that signing out, revoking the key or expiry ends (a copied cookie
with it), and the retention cleanup that deletes expired rows."""

from __future__ import annotations

import time
from datetime import UTC, datetime, timedelta

import pytest
from starlette.requests import Request
from starlette.responses import Response

from settlekit.api.auth import ApiKey, create_api_key, revoke_api_key
from settlekit.console.session import SESSION_COOKIE, SIGN_IN_COOKIE, Sessions, session_secret
from settlekit.events.envelope import Signer
from settlekit.runtime.workers import CleanupScheduler
from settlekit.store import console_sessions
from settlekit.store.db import Database

KEY = ApiKey("0123456789abcdef", "tenant_s", frozenset({"jobs:read"}))


def _request(cookies: dict[str, str] | None = None, scheme: str = "http") -> Request:
    header = "; ".join(f"{k}={v}" for k, v in (cookies or {}).items())
    return Request({"type": "http", "method": "GET", "path": "/console/", "scheme": scheme, "query_string": b"",
                    "server": ("testserver", 80), "headers": [(b"host", b"testserver"), (b"cookie", header.encode())]})


def _cookie(response: Response, name: str) -> str:
    for key, value in response.raw_headers:
        if key == b"set-cookie" and value.startswith(f"{name}=".encode()):
            return value.decode().split(";")[0].split("=", 1)[1]
    raise AssertionError(f"no {name} cookie")


def _rows(db: Database) -> int:
    with db.read() as tx:
        return int(tx.scalar("SELECT count(*) FROM console_sessions"))


def test_a_session_expires_and_a_tampered_one_is_none(db: Database, monkeypatch: pytest.MonkeyPatch) -> None:
    sessions = Sessions(db, b"k" * 32, max_age=60, path="/console")
    response = Response()
    sessions.issue(response, _request(), KEY)
    value = _cookie(response, SESSION_COOKIE)
    read = sessions.read(_request({SESSION_COOKIE: value}))
    assert read is not None and read.key_id == "0123456789abcdef" and len(read.csrf) >= 32
    # a character of the signature changed (not its last: base64's last character carries padding bits too)
    tampered = value[:-5] + ("A" if value[-5] != "A" else "B") + value[-4:]
    assert sessions.read(_request({SESSION_COOKIE: tampered})) is None
    assert Sessions(db, b"o" * 32, max_age=60, path="/console").read(_request({SESSION_COOKIE: value})) is None
    later = time.time() + 120
    monkeypatch.setattr("itsdangerous.timed.time.time", lambda: later)
    assert sessions.read(_request({SESSION_COOKIE: value})) is None


def test_a_sign_in_token_is_not_a_session(db: Database) -> None:
    sessions = Sessions(db, b"k" * 32, max_age=60, path="/console")
    response = Response()
    sessions.sign_in_token(_request(), response)
    token_cookie = _cookie(response, SIGN_IN_COOKIE)
    assert sessions.read(_request({SESSION_COOKIE: token_cookie})) is None


def test_cookies_are_secure_over_tls_only(db: Database) -> None:
    sessions = Sessions(db, b"k" * 32, max_age=60, path="/console")
    plain, tls = Response(), Response()
    sessions.issue(plain, _request(), KEY)
    sessions.issue(tls, _request(scheme="https"), KEY)
    assert b"Secure" not in dict(plain.raw_headers)[b"set-cookie"]
    assert b"Secure" in dict(tls.raw_headers)[b"set-cookie"]


def test_the_signing_key_follows_the_server_key() -> None:
    server = Signer.generate()
    pem = server.private_key_pem()
    assert session_secret(pem) == session_secret(pem)  # every process of a deployment
    assert session_secret(pem) != session_secret(Signer.generate().private_key_pem())
    assert session_secret(None) != session_secret(None)  # no server key: random per process


def test_the_row_ends_the_session_everywhere(db: Database) -> None:
    """Two processes (two Sessions over one database): what one ends, the other no longer reads."""
    here, there = (Sessions(db, b"s" * 32, max_age=600, path="/console")
                   for _ in range(2))
    key_id, secret = create_api_key(db, "tenant_s", ["jobs:read"])
    key = ApiKey(key_id, "tenant_s", frozenset({"jobs:read"}))
    cookies = []
    for _ in range(3):
        response = Response()
        here.issue(response, _request(), key)
        cookies.append(_request({SESSION_COOKIE: _cookie(response, SESSION_COOKIE)}))
    assert all(there.read(c) is not None for c in cookies)
    with db.read() as tx:  # the row holds a hash of the session id, never the id itself
        stored = [r[0] for r in tx.fetchall("SELECT session_hash FROM console_sessions WHERE key_id = ?", (key_id,))]
    session = there.read(cookies[0])
    assert session is not None and session.session_id not in stored
    assert console_sessions.session_hash(session.session_id) in stored
    # sign-out: the copied cookie is no session in any process
    signed_out = Response()
    there.end(signed_out, session)
    assert 'sk_console=""' in dict(signed_out.raw_headers)[b"set-cookie"].decode()
    assert here.read(cookies[0]) is None and there.read(cookies[1]) is not None
    # revoking the key ends its other sessions
    revoke_api_key(db, key_id)
    assert here.read(cookies[1]) is None and there.read(cookies[2]) is None
    with db.read() as tx:
        assert tx.scalar("SELECT count(*) FROM console_sessions WHERE key_id = ?", (key_id,)) == 0
    assert secret


def test_expired_rows_are_no_session_and_the_cleanup_deletes_them(db: Database) -> None:
    sessions = Sessions(db, b"k" * 32, max_age=60, path="/console")
    response = Response()
    sessions.issue(response, _request(), KEY)
    session = sessions.read(_request({SESSION_COOKIE: _cookie(response, SESSION_COOKIE)}))
    assert session is not None
    later = datetime.now(UTC) + timedelta(seconds=61)
    assert console_sessions.find(db, session.session_id, now=later) is None  # the row's own expiry
    before = _rows(db)
    result = CleanupScheduler(db, interval=0, clock=lambda: later).tick()
    assert result.console_sessions >= 1 and _rows(db) == before - result.console_sessions
    assert console_sessions.find(db, session.session_id, now=datetime.now(UTC)) is None
