"""The async sender against a real ReceiverServer on 127.0.0.1, with injected faults."""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import http.server
import socket
import threading
from collections.abc import Callable, Iterator, Sequence
from datetime import UTC, datetime, timedelta
from email.utils import format_datetime
from pathlib import Path
from typing import Any

import pytest

from settlekit.delivery.message import PreparedRequest, prepare_request
from settlekit.delivery.retry import RetryPolicy, decide
from settlekit.delivery.sender import Outcome, SenderConfig, WebhookSender
from settlekit.delivery.signing import SigningMode, generate_secret
from settlekit.delivery.ssrf import SsrfPolicy
from settlekit.events.canonical import canonical_hash, parse_json
from support.receiver import FaultyReceiver

VECTORS = Path(__file__).resolve().parent.parent / "vectors"
LOCAL = SsrfPolicy.for_local_testing()
SECRET = generate_secret()
FAST = SenderConfig(timeout=2.0, connect_timeout=1.0, concurrency=4)


def artifacts() -> list[dict[str, Any]]:
    data = parse_json((VECTORS / "settle_completed.json").read_text(encoding="utf-8"))
    return list(data["artifacts"])


def synthetic(job: str, version: int) -> dict[str, Any]:
    doc: dict[str, Any] = {
        "schemaVersion": "WorkCertificate.v1",
        "artifactType": "WorkCertificate.v1",
        "artifactId": f"cert_{job}_evt_{version}",
        "tenantId": "t",
        "jobId": job,
        "jobVersion": version,
    }
    doc["artifactHash"] = canonical_hash(doc)
    return doc


@pytest.fixture
def rx() -> Iterator[FaultyReceiver]:
    with FaultyReceiver(secrets=[SECRET], accept_legacy=True) as server:
        yield server


def req(
    url: str,
    doc: dict[str, Any],
    *,
    signing: SigningMode = "standard",
    timeout: float | None = None,
    policy: SsrfPolicy = LOCAL,
    attempt: int = 1,
) -> PreparedRequest:
    return prepare_request(
        url=url,
        artifact=doc,
        tenant_id="t",
        destination_id="d",
        secrets=[SECRET],
        signing=signing,
        policy=policy,
        timeout=timeout,
        attempt=attempt,
    )


def run_batch(requests: Sequence[PreparedRequest], config: SenderConfig = FAST) -> list[Outcome]:
    async def go() -> list[Outcome]:
        async with WebhookSender(config) as sender:
            return await sender.send_batch(requests)

    return asyncio.run(go())


def run_one(request: PreparedRequest, config: SenderConfig = FAST) -> Outcome:
    return run_batch([request], config)[0]


def test_success(rx: FaultyReceiver) -> None:
    doc = artifacts()[1]
    out = run_one(req(rx.url, doc))
    assert out.ok and out.status == 200 and out.error is None
    assert '"accepted"' in (out.response_snippet or "")
    assert out.duration_ms > 0 and out.started_at.tzinfo is UTC
    assert rx.artifacts == [doc]
    assert decide(status=out.status, error=out.error, attempts=1, policy=RetryPolicy()).kind == "delivered"


@pytest.mark.parametrize("mode", ["settld_legacy", "both"])
def test_legacy_modes_are_accepted(rx: FaultyReceiver, mode: SigningMode) -> None:
    out = run_one(req(rx.url, artifacts()[0], signing=mode))
    assert out.status == 200, out.response_snippet
    assert rx.requests[-1].headers.get("x-proxy-signature")


def test_500_then_success_and_dedupe(rx: FaultyReceiver) -> None:
    doc = artifacts()[0]
    rx.inject(500, count=2)
    policy = RetryPolicy(max_attempts=5)
    statuses = []
    for attempt in range(1, 5):
        out = run_one(req(rx.url, doc, attempt=attempt))
        statuses.append(out.status)
        d = decide(status=out.status, error=out.error, attempts=attempt, policy=policy)
        if d.kind == "delivered":
            break
        assert (d.kind, d.reason) == ("retry", "non_2xx")
    assert statuses == [500, 500, 200]
    # a resend after success (e.g. after a lost ack) is a duplicate for the receiver, still 2xx
    assert run_one(req(rx.url, doc, attempt=4)).status == 200
    assert rx.duplicates == 1 and len(rx.received) == 1
    attempts = [r.headers["x-settlekit-delivery-attempt"] for r in rx.requests]
    assert attempts == ["1", "2", "3", "4"]
    assert len({r.headers["webhook-id"] for r in rx.requests}) == 1


def test_retry_after_seconds_and_http_date(rx: FaultyReceiver) -> None:
    rx.inject(429, retry_after=7)
    out = run_one(req(rx.url, artifacts()[0]))
    assert (out.status, out.retry_after) == (429, 7.0)
    d = decide(status=out.status, error=None, attempts=1, policy=RetryPolicy(), retry_after=out.retry_after)
    assert d.kind == "retry" and d.delay == 7.0

    when = datetime.now(UTC) + timedelta(seconds=120)
    rx.inject(503, retry_after=format_datetime(when, usegmt=True))
    out = run_one(req(rx.url, artifacts()[0]))
    assert out.status == 503 and out.retry_after is not None and 110 <= out.retry_after <= 121


def test_410_disables(rx: FaultyReceiver) -> None:
    rx.inject(410)
    out = run_one(req(rx.url, artifacts()[0]))
    assert out.status == 410 and not out.ok
    d = decide(status=out.status, error=out.error, attempts=1, policy=RetryPolicy())
    assert (d.kind, d.reason) == ("disable", "gone")


def test_timeout_then_retry_is_deduped(rx: FaultyReceiver) -> None:
    doc = artifacts()[0]
    rx.inject(None, delay=0.8)  # slow, then processed normally
    out = run_one(req(rx.url, doc, timeout=0.2))
    assert (out.status, out.error) == (None, "timeout")
    assert out.error_message
    assert decide(status=None, error=out.error, attempts=1, policy=RetryPolicy()).reason == "timeout"
    assert rx.wait_for(lambda r: len(r.received) == 1, timeout=3)  # the late request still lands
    assert run_one(req(rx.url, doc, attempt=2)).status == 200
    assert rx.duplicates == 1


def test_receiver_down() -> None:
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    out = run_one(req(f"http://127.0.0.1:{port}/", artifacts()[0]))
    assert (out.status, out.error) == (None, "network_error")
    assert "Connect" in (out.error_message or "")


def test_ssrf_refused_statically_and_at_connect(rx: FaultyReceiver) -> None:
    doc = artifacts()[0]
    # IP literal: refused before any connection
    out = run_one(req(rx.url, doc, policy=SsrfPolicy(allow_insecure_http=True)))
    assert (out.status, out.error) == (None, "ssrf_blocked")
    assert out.details["category"] == "loopback"
    # hostname: passes the static check, refused by the guarded connection after resolution
    url = f"http://localhost:{rx.port}/"
    out = run_one(req(url, doc, policy=SsrfPolicy(allow_insecure_http=True)))
    assert (out.status, out.error) == (None, "ssrf_blocked")
    # plain http refused without allow_insecure_http
    out = run_one(req(url, doc, policy=SsrfPolicy(allow_loopback=True)))
    assert out.error == "ssrf_blocked"
    assert rx.requests == []
    # allowed for local testing: the guarded connection pins to the vetted loopback address
    if socket.getaddrinfo("localhost", rx.port)[0][4][0] == "127.0.0.1":
        assert run_one(req(url, doc)).status == 200


def test_batch_groups_are_sequential_and_outcomes_in_input_order(rx: FaultyReceiver) -> None:
    docs = [synthetic(f"job{j}", v) for v in range(1, 6) for j in range(3)]
    requests = [dataclasses.replace(req(rx.url, d), tag=i) for i, d in enumerate(docs)]
    outs = run_batch(requests)
    assert [o.tag for o in outs] == list(range(len(docs)))
    assert all(o.status == 200 for o in outs)
    assert [o.response_snippet for o in outs] == [
        f'{{"status":"accepted","id":"{r.headers["webhook-id"]}"}}' for r in requests
    ]
    for j in range(3):
        seen = [
            r.headers["x-settlekit-artifact-id"]
            for r in rx.requests
            if r.headers["x-settlekit-artifact-id"].startswith(f"cert_job{j}_")
        ]
        assert seen == [f"cert_job{j}_evt_{v}" for v in range(1, 6)]
    # keep-alive: at most one connection per concurrent worker
    assert rx.connections_opened <= FAST.concurrency


@contextlib.contextmanager
def local_receiver(answer: Callable[[http.server.BaseHTTPRequestHandler], tuple[int, dict[str, str]]]
                   ) -> Iterator[str]:
    """A plain HTTP server on 127.0.0.1 whose POSTs `answer(handler)` gives (status, extra headers) for; yields
    its base URL."""

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            self.rfile.read(int(self.headers.get("content-length", "0")))
            status, headers = answer(self)
            self.send_response(status)
            for name, value in headers.items():
                self.send_header(name, value)
            self.send_header("content-length", "0")
            self.end_headers()

        def log_message(self, *args: Any) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/"
    finally:
        server.shutdown()
        server.server_close()


def test_batch_concurrency_overlaps_groups() -> None:
    """Four groups with concurrency 4 are in flight together: each request is answered only once all four have
    arrived (a barrier), which a sequential sender could never pass (the barrier's timeout is a hang guard)."""
    barrier = threading.Barrier(4, timeout=10)

    def answer(_: http.server.BaseHTTPRequestHandler) -> tuple[int, dict[str, str]]:
        try:
            barrier.wait()
        except threading.BrokenBarrierError:
            return 503, {}
        return 200, {}

    with local_receiver(answer) as url:
        requests = [req(url, synthetic(f"g{i}", 1)) for i in range(4)]
        outs = run_batch(requests, SenderConfig(timeout=15.0, concurrency=4))
    assert [o.status for o in outs] == [200, 200, 200, 200]


def test_a_receivers_cookie_never_reaches_the_next_delivery() -> None:
    """One sender serves every destination of a network policy, whichever tenant's: a cookie a receiver sets is
    not kept, so no later request (to the same host, for another tenant) carries it."""
    cookies_seen: list[str | None] = []

    def answer(handler: http.server.BaseHTTPRequestHandler) -> tuple[int, dict[str, str]]:
        cookies_seen.append(handler.headers.get("cookie"))
        return 200, {"set-cookie": "session=tenant-a-secret; Path=/"}

    with local_receiver(answer) as url:
        outs = run_batch([req(url, synthetic(job, 1)) for job in ("a", "b", "c")],
                         SenderConfig(timeout=5.0, concurrency=1))
    assert [o.status for o in outs] == [200, 200, 200]
    assert cookies_seen == [None, None, None]


def test_mixed_failures_in_one_batch(rx: FaultyReceiver) -> None:
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    dead = s.getsockname()[1]
    s.close()
    rx.inject(500)
    requests = [
        req(rx.url, synthetic("a", 1)),
        req(f"http://127.0.0.1:{dead}/", synthetic("b", 1)),
        req("ftp://127.0.0.1/", synthetic("c", 1)),
    ]
    outs = run_batch(requests, SenderConfig(timeout=2.0, concurrency=1))
    assert [(o.status, o.error) for o in outs] == [
        (500, None),
        (None, "network_error"),
        (None, "ssrf_blocked"),
    ]


def test_closed_sender_reports_exception(rx: FaultyReceiver) -> None:
    async def go() -> Outcome:
        sender = WebhookSender(FAST)
        await sender.aclose()
        return await sender.send(req(rx.url, artifacts()[0]))

    out = asyncio.run(go())
    assert out.error == "exception" and "closed" in (out.error_message or "")


def test_a_pooled_connection_the_receiver_closed_is_not_reused() -> None:
    """The receiver answers each request with keep-alive, then closes the connection: the sender's second request
    must see that the idle pooled connection was closed (readable at EOF) and open a new one."""
    listener = socket.create_server(("127.0.0.1", 0))
    accepted: list[int] = []

    def serve() -> None:
        for _ in range(2):
            conn, _ = listener.accept()
            accepted.append(1)
            with conn:
                data = b""
                while b"\r\n\r\n" not in data:
                    data += conn.recv(65536)
                head, _, body = data.partition(b"\r\n\r\n")
                length = int(next(line.split(b":")[1] for line in head.split(b"\r\n")
                                  if line.lower().startswith(b"content-length")))
                while len(body) < length:
                    body += conn.recv(65536)
                conn.sendall(b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\nok")

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    url = f"http://127.0.0.1:{listener.getsockname()[1]}/hook"

    async def go() -> list[Outcome]:
        async with WebhookSender(FAST) as sender:
            first = await sender.send(req(url, synthetic("j1", 1)))
            await asyncio.sleep(0.2)  # the server has closed the connection by now
            return [first, await sender.send(req(url, synthetic("j1", 2)))]

    try:
        outcomes = asyncio.run(go())
    finally:
        listener.close()
    thread.join(5)
    assert [o.status for o in outcomes] == [200, 200]
    assert len(accepted) == 2
