"""Requests whose connection ends during the body, over real loopback HTTP: a cut-off body, a bad chunk size, an
unknown Transfer-Encoding. The client got uvicorn's 400 or nothing; the API logs and counts them as 499, never as a
server error (any tenant could otherwise trip the error alerts)."""

from __future__ import annotations

import logging
import socket
import time
from urllib.parse import urlsplit

import pytest
from prometheus_client import CollectorRegistry

from settlekit.store.db import Database
from support.api import TENANT_A, key_for, make_app
from support.http_server import serve

ROUTES = (b"/v1/jobs", b"/v1/jobs/job_framing/events")  # routed, and the direct append route


def _framings(key: bytes) -> list[tuple[bytes, bool]]:
    """(request, whether the client closes right after sending it instead of waiting for an answer)."""
    out = []
    for path in ROUTES:
        head = (b"POST " + path + b" HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer " + key +
                b"\r\nContent-Type: application/json\r\n")
        out += [
            (head + b"Content-Length: 100\r\n\r\n{\"a\":", True),  # cut off
            (head + b"Transfer-Encoding: chunked\r\n\r\n2\r\n{", True),  # cut off inside a chunk
            (head + b"Transfer-Encoding: chunked\r\n\r\nZZ\r\n{}\r\n0\r\n\r\n", False),  # bad chunk size
            (head + b"Transfer-Encoding: xchunked\r\n\r\n2\r\n{}\r\n0\r\n\r\n", False),  # unknown coding
        ]
    return out


def _send(port: int, request: bytes, close_at_once: bool) -> bytes:
    with socket.create_connection(("127.0.0.1", port), timeout=30) as sock:
        sock.sendall(request)
        if close_at_once:
            return b""
        answer = b""
        while chunk := sock.recv(65_536):
            answer += chunk
        return answer


def _count(registry: CollectorRegistry, status: str) -> float:
    total = 0.0
    for metric in registry.collect():
        for sample in metric.samples:
            if sample.name == "settlekit_api_requests_total" and sample.labels["status"] == status:
                total += sample.value
    return total


def test_broken_framing_is_499_not_500(db: Database, caplog: pytest.LogCaptureFixture) -> None:
    registry = CollectorRegistry()
    app = make_app(db, registry=registry)
    key = key_for(db, TENANT_A).encode()
    framings = _framings(key)
    with caplog.at_level(logging.INFO, logger="settlekit.api.request"), serve(app) as base:
        port = urlsplit(base).port
        assert port is not None
        for request, close_at_once in framings:
            answer = _send(port, request, close_at_once)
            assert close_at_once or answer.startswith(b"HTTP/1.1 400 "), answer[:100]
        deadline = time.monotonic() + 30
        while _count(registry, "499") < len(framings):
            assert time.monotonic() < deadline, f"{_count(registry, '499')} of {len(framings)} counted as 499"
            time.sleep(0.02)
    assert _count(registry, "500") == 0
    lines = [r for r in caplog.records if r.name == "settlekit.api.request" and r.getMessage() == "request"]
    assert sorted(getattr(r, "status", None) for r in lines) == [499] * len(framings)
    assert all(r.levelno == logging.INFO for r in lines)
