"""The console's session cookie: signed, expiring, bound to its purpose; its signing key derived from the server's."""

from __future__ import annotations

import time

import pytest
from starlette.requests import Request
from starlette.responses import Response

from settlekit.console.session import SESSION_COOKIE, SIGN_IN_COOKIE, Sessions, session_secret
from settlekit.events.envelope import Signer


def _request(cookies: dict[str, str] | None = None, scheme: str = "http") -> Request:
    header = "; ".join(f"{k}={v}" for k, v in (cookies or {}).items())
    return Request({"type": "http", "method": "GET", "path": "/console/", "scheme": scheme, "query_string": b"",
                    "server": ("testserver", 80), "headers": [(b"host", b"testserver"), (b"cookie", header.encode())]})


def _cookie(response: Response, name: str) -> str:
    for key, value in response.raw_headers:
        if key == b"set-cookie" and value.startswith(f"{name}=".encode()):
            return value.decode().split(";")[0].split("=", 1)[1]
    raise AssertionError(f"no {name} cookie")


def test_a_session_expires_and_a_tampered_one_is_none(monkeypatch: pytest.MonkeyPatch) -> None:
    sessions = Sessions(b"k" * 32, max_age=60, path="/console")
    response = Response()
    sessions.issue(response, _request(), "0123456789abcdef")
    value = _cookie(response, SESSION_COOKIE)
    read = sessions.read(_request({SESSION_COOKIE: value}))
    assert read is not None and read.key_id == "0123456789abcdef" and len(read.csrf) >= 32
    assert sessions.read(_request({SESSION_COOKIE: value[:-1] + ("A" if value[-1] != "A" else "B")})) is None
    assert Sessions(b"o" * 32, max_age=60, path="/console").read(_request({SESSION_COOKIE: value})) is None
    later = time.time() + 120
    monkeypatch.setattr("itsdangerous.timed.time.time", lambda: later)
    assert sessions.read(_request({SESSION_COOKIE: value})) is None


def test_a_sign_in_token_is_not_a_session() -> None:
    sessions = Sessions(b"k" * 32, max_age=60, path="/console")
    response = Response()
    sessions.sign_in_token(_request(), response)
    token_cookie = _cookie(response, SIGN_IN_COOKIE)
    assert sessions.read(_request({SESSION_COOKIE: token_cookie})) is None


def test_cookies_are_secure_over_tls_only() -> None:
    sessions = Sessions(b"k" * 32, max_age=60, path="/console")
    plain, tls = Response(), Response()
    sessions.issue(plain, _request(), "k1")
    sessions.issue(tls, _request(scheme="https"), "k1")
    assert b"Secure" not in dict(plain.raw_headers)[b"set-cookie"]
    assert b"Secure" in dict(tls.raw_headers)[b"set-cookie"]


def test_the_signing_key_follows_the_server_key() -> None:
    server = Signer.generate()
    pem = server.private_key_pem()
    assert session_secret(pem) == session_secret(pem)  # every process of a deployment
    assert session_secret(pem) != session_secret(Signer.generate().private_key_pem())
    assert session_secret(None) != session_secret(None)  # no server key: random per process
