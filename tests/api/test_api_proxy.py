"""Behind a reverse proxy: the per-client-address limit on invalid API keys keys on the forwarded address, and
only when the connection comes from a trusted proxy (uvicorn's proxy headers, exposed by `settlekit serve`)."""

from __future__ import annotations

from typing import Any

import pytest
from fastapi.testclient import TestClient
from uvicorn.middleware.proxy_headers import ProxyHeadersMiddleware

from settlekit.api.ratelimit import RateLimiter
from settlekit.runtime import Settings, uvicorn_options
from settlekit.store.db import Database
from support.api import make_app


def _bad_key_codes(app: Any, forwarded_for: str, n: int) -> list[int]:
    api = TestClient(app, headers={"authorization": "Bearer sk_not_a_key", "x-forwarded-for": forwarded_for})
    return [api.get("/v1/jobs").status_code for _ in range(n)]


def test_forwarded_address_is_the_client_behind_a_trusted_proxy(db: Database) -> None:
    app = make_app(db)
    app.state.settlekit.auth_failures = RateLimiter(0.001, 2)
    proxied = ProxyHeadersMiddleware(app, trusted_hosts="testclient")  # the test client is the proxy
    assert _bad_key_codes(proxied, "203.0.113.7", 3) == [401, 401, 429]
    assert _bad_key_codes(proxied, "203.0.113.8", 2) == [401, 401]  # another client behind the same proxy


def test_forwarded_header_from_an_untrusted_peer_is_ignored(db: Database) -> None:
    app = make_app(db)
    app.state.settlekit.auth_failures = RateLimiter(0.001, 2)
    proxied = ProxyHeadersMiddleware(app, trusted_hosts="192.0.2.1")  # not the test client
    assert _bad_key_codes(proxied, "203.0.113.7", 2) == [401, 401]
    assert _bad_key_codes(proxied, "203.0.113.8", 1) == [429]  # a forged header buys no new bucket


def test_serve_options(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("SETTLEKIT_FORWARDED_ALLOW_IPS", raising=False)
    monkeypatch.delenv("SETTLEKIT_PROXY_HEADERS", raising=False)
    assert uvicorn_options(Settings()) == {"host": "127.0.0.1", "port": 8080, "proxy_headers": True}
    monkeypatch.setenv("SETTLEKIT_FORWARDED_ALLOW_IPS", "10.0.0.5,10.0.1.0/24")
    monkeypatch.setenv("SETTLEKIT_PROXY_HEADERS", "true")
    opts = uvicorn_options(Settings(port=9000))
    assert opts == {"host": "127.0.0.1", "port": 9000, "proxy_headers": True,
                    "forwarded_allow_ips": "10.0.0.5,10.0.1.0/24"}
    assert uvicorn_options(Settings(proxy_headers=False))["proxy_headers"] is False
