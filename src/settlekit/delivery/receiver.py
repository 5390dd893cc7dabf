"""Receiver side: verify a delivered webhook (spec 06 §10) and a small reference receiver server.

`verify_webhook` is what users call in their own receivers. `ReceiverServer` is a threaded stdlib HTTP/1.1
server (keep-alive) that verifies, dedupes by webhook-id and stores each artifact once (tests step in through the
`receiver.request` failpoint).
"""

from __future__ import annotations

import contextlib
import hashlib
import hmac
import json
import os
import re
import socket
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any, Final

from settlekit import failpoints
from settlekit.delivery.errors import WebhookVerificationError
from settlekit.delivery.signing import (
    DEFAULT_TOLERANCE_SECONDS,
    H_SIGNATURE,
    verify_legacy_signature,
    verify_standard_signature,
)
from settlekit.errors import CanonicalJsonError, SettlekitError
from settlekit.events.canonical import canonical_hash, parse_json
from settlekit.events.js import js_is_safe_integer

SETTLEMENT_TYPE: Final = "SettlementStatement.v1"
MAX_BODY_BYTES: Final = 10 * 1024 * 1024


# --- verification -------------------------------------------------------------------------------------------


def parse_webhook_body(body: bytes) -> Any:
    try:
        return parse_json(body.decode("utf-8"))
    except (UnicodeDecodeError, ValueError) as exc:
        raise WebhookVerificationError("body is not UTF-8 JSON", reason="bad_json") from exc


def verify_artifact(doc: Any) -> None:
    """Recompute `artifactHash` (04 §3); for SettlementStatement require totalsByAccountId to be integral and,
    while they are safe integers, to sum to 0."""
    if not isinstance(doc, dict):
        raise WebhookVerificationError("artifact body is not a JSON object", reason="bad_json")
    claimed = doc.get("artifactHash")
    if not isinstance(claimed, str) or not claimed:
        raise WebhookVerificationError("artifact has no artifactHash", reason="artifact_hash_mismatch")
    try:
        actual = canonical_hash({k: v for k, v in doc.items() if k != "artifactHash"})
    except CanonicalJsonError as exc:
        raise WebhookVerificationError("artifact is not canonical JSON", reason="bad_json") from exc
    if not hmac.compare_digest(actual.encode("ascii"), claimed.encode("utf-8", "replace")):
        raise WebhookVerificationError(
            "artifactHash does not match the artifact",
            reason="artifact_hash_mismatch",
            claimed=claimed,
            actual=actual,
            artifact_id=doc.get("artifactId"),
        )
    if doc.get("artifactType") == SETTLEMENT_TYPE:
        settlement = doc.get("settlement")
        totals = settlement.get("totalsByAccountId") if isinstance(settlement, dict) else None
        if not isinstance(totals, dict):
            raise WebhookVerificationError(
                "SettlementStatement has no settlement.totalsByAccountId", reason="bad_json"
            )
        amounts = list(totals.values())
        if not all(type(a) is int or (type(a) is float and a.is_integer()) for a in amounts):
            raise WebhookVerificationError("settlement totals must be integer cents", reason="bad_json")
        # beyond 2^53 cents settld's totals are IEEE double sums (as the builders reproduce), which need not
        # balance to the cent: the balance is checked exactly when every total is a safe integer
        if all(js_is_safe_integer(a) for a in amounts) and sum(int(a) for a in amounts) != 0:
            raise WebhookVerificationError(
                "settlement totals by account do not sum to zero",
                reason="unbalanced_settlement",
                sum=sum(int(a) for a in amounts),
                artifact_id=doc.get("artifactId"),
            )


def _check_hash_header(headers: Mapping[str, str], doc: Any) -> None:
    lowered = {k.lower(): v for k, v in headers.items()}
    for name in ("x-settlekit-artifact-hash", "x-proxy-artifact-hash"):
        value = lowered.get(name)
        if value is not None and isinstance(doc, dict) and value != doc.get("artifactHash"):
            raise WebhookVerificationError(f"{name} differs from the body", reason="artifact_hash_mismatch")


def verify_webhook(
    headers: Mapping[str, str],
    body: bytes,
    secret: str | Sequence[str],
    *,
    tolerance_seconds: float = DEFAULT_TOLERANCE_SECONDS,
    now: float | None = None,
    verify_artifact_body: bool = True,
    accept_legacy: bool = False,
) -> dict[str, Any]:
    """Verify a Standard Webhooks delivery and return the artifact.

    Checks the signature headers (any `v1` entry for any secret), the timestamp window (±tolerance of `now`,
    unix seconds), then parses the body and, unless disabled, recomputes `artifactHash` and checks settlement
    totals. With `accept_legacy`, a request carrying only settld `x-proxy-*` headers is verified with the
    legacy scheme (the same secrets, used as raw strings). Raises WebhookVerificationError.
    """
    lowered = {k.lower(): v for k, v in headers.items()}
    if accept_legacy and H_SIGNATURE not in lowered and "x-proxy-signature" in lowered:
        verify_legacy_signature(lowered, body, secret, tolerance_seconds=tolerance_seconds, now=now)
    else:
        verify_standard_signature(lowered, body, secret, tolerance_seconds=tolerance_seconds, now=now)
    doc = parse_webhook_body(body)
    if not isinstance(doc, dict):
        raise WebhookVerificationError("webhook body is not a JSON object", reason="bad_json")
    if verify_artifact_body:
        verify_artifact(doc)
        _check_hash_header(lowered, doc)
    return doc


def verify(
    secret: str | Sequence[str],
    headers: Mapping[str, str],
    body: bytes,
    tolerance: float = DEFAULT_TOLERANCE_SECONDS,
    now: float | None = None,
    verify_artifact: bool = False,
) -> dict[str, Any]:
    """Spec 06 §10 call shape of `verify_webhook` (artifact checks off unless asked)."""
    return verify_webhook(
        headers, body, secret, tolerance_seconds=tolerance, now=now, verify_artifact_body=verify_artifact
    )


def verify_legacy(
    secret: str | Sequence[str],
    headers: Mapping[str, str],
    body: bytes,
    tolerance: float = DEFAULT_TOLERANCE_SECONDS,
    now: float | None = None,
) -> dict[str, Any]:
    """Verify settld `x-proxy-*` headers and return the parsed body."""
    verify_legacy_signature(headers, body, secret, tolerance_seconds=tolerance, now=now)
    doc = parse_webhook_body(body)
    if not isinstance(doc, dict):
        raise WebhookVerificationError("webhook body is not a JSON object", reason="bad_json")
    return doc


# --- reference receiver server ------------------------------------------------------------------------------


@dataclass(frozen=True)
class ReceivedRequest:
    """Log entry of one request: what came in and what the receiver answered."""

    path: str
    headers: dict[str, str]
    body: bytes
    status: int
    outcome: str  # accepted | duplicate | rejected | fault
    at: float = field(default_factory=time.time)


_SAFE_NAME = re.compile(r"[^A-Za-z0-9._-]")


_MAX_PLAIN_NAME = 200  # characters of an id kept as the file name as it is (file systems allow 255 bytes)


def artifact_filename(artifact_id: str) -> str:
    """`<artifactId>.json` when the id is a plain file name (only [A-Za-z0-9._-], not starting with `.`, at most 200
    characters). Any other id gets a readable prefix (those characters, others as `_`, at most 100) and `~` with
    16 hex digits of its sha256: `~` never occurs in a plain name, so two ids never share a file."""
    if artifact_id and len(artifact_id) <= _MAX_PLAIN_NAME and not artifact_id.startswith(".") \
            and not _SAFE_NAME.search(artifact_id):
        return artifact_id + ".json"
    prefix = _SAFE_NAME.sub("_", artifact_id)[:100].lstrip(".")
    return f"{prefix}~{hashlib.sha256(artifact_id.encode('utf-8', 'surrogatepass')).hexdigest()[:16]}.json"


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server_version = "settlekit-receiver"
    sys_version = ""
    timeout = 30  # idle keep-alive connections are closed after this many seconds
    server: _Server

    def setup(self) -> None:
        super().setup()
        # an answer is written as head then body: without TCP_NODELAY, Nagle holds the body until the client's
        # delayed ACK of the head (about 40 ms on every keep-alive request)
        self.connection.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.server.owner._track(self.connection, add=True)

    def finish(self) -> None:
        try:
            super().finish()
        finally:
            self.server.owner._track(self.connection, add=False)

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - stdlib signature
        log = self.server.owner.log
        if log is not None:
            log(format % args)

    def _reply(self, status: int, payload: Mapping[str, Any], extra: Mapping[str, str] | None = None) -> None:
        data = json.dumps(payload, separators=(",", ":")).encode("utf-8")
        self._send_bytes(status, data, "application/json", extra)

    def _send_bytes(
        self, status: int, data: bytes, ctype: str, extra: Mapping[str, str] | None = None
    ) -> None:
        self.send_response(status)
        self.send_header("content-type", ctype)
        self.send_header("content-length", str(len(data)))
        for k, v in (extra or {}).items():
            self.send_header(k, v)
        self.end_headers()
        self.wfile.write(data)

    def do_GET(self) -> None:  # noqa: N802 - stdlib naming
        if self.path.rstrip("/") in ("/healthz", "/stats"):
            self._reply(200, self.server.owner.stats())
        else:
            self._reply(404, {"error": "not found"})

    def do_POST(self) -> None:  # noqa: N802 - stdlib naming
        owner = self.server.owner
        length_text = self.headers.get("content-length")
        if length_text is None or not length_text.isdigit():
            self.close_connection = True
            self._reply(411, {"error": "content-length required"})
            return
        length = int(length_text)
        if length > owner.max_body_bytes:
            self.close_connection = True
            self._reply(413, {"error": "body too large"})
            return
        body = self.rfile.read(length)
        if len(body) < length:
            # The sender went away mid-body (e.g. a killed worker): not a delivery, nothing to answer.
            self.close_connection = True
            owner._count_incomplete()
            return
        headers = {k.lower(): v for k, v in self.headers.items()}
        if failpoints.hit("receiver.request", self, headers, body):
            return  # a test answered (or dropped) this request itself
        status, payload = owner.handle(headers, body, self.path)
        self._reply(status, payload)


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = True
    request_queue_size = 128  # listen backlog; socketserver's 5 drops SYNs when many senders connect at once

    def __init__(self, addr: tuple[str, int], owner: ReceiverServer):
        self.owner = owner
        super().__init__(addr, _Handler)

    def handle_error(self, request: Any, client_address: Any) -> None:
        # a client that gave up (timeout) or a stop() closing idle connections is not an error
        exc = sys.exc_info()[1]
        if isinstance(exc, (ConnectionError, TimeoutError)) or self.owner._stopping.is_set():
            return
        super().handle_error(request, client_address)


class ReceiverServer:
    """Reference webhook receiver. In tests: `with ReceiverServer(secrets=[s]) as rx: ... rx.url ...`."""

    def __init__(
        self,
        *,
        secrets: Sequence[str],
        host: str = "127.0.0.1",
        port: int = 0,
        out_dir: str | os.PathLike[str] | None = None,
        tolerance_seconds: float = DEFAULT_TOLERANCE_SECONDS,
        verify_artifact_body: bool = True,
        accept_legacy: bool = False,
        max_body_bytes: int = MAX_BODY_BYTES,
        log: Callable[[str], None] | None = None,
    ):
        if not secrets:
            raise ValueError("at least one secret is required")
        self.secrets = list(secrets)
        self.host = host
        self.out_dir = Path(out_dir) if out_dir is not None else None
        self.tolerance_seconds = tolerance_seconds
        self.verify_artifact_body = verify_artifact_body
        self.accept_legacy = accept_legacy
        self.max_body_bytes = max_body_bytes
        self.log = log
        self.received: dict[str, dict[str, Any]] = {}  # webhook-id → artifact, first arrival order
        self.duplicates = 0
        self.rejected = 0
        self.incomplete = 0  # requests whose body ended before its content-length (sender died mid-request)
        self.connections_opened = 0  # TCP connections accepted (keep-alive reuse keeps this low)
        self.requests: list[ReceivedRequest] = []
        self._lock = threading.RLock()
        self._changed = threading.Condition(self._lock)
        self._stopping = threading.Event()
        self._connections: set[socket.socket] = set()
        self._server = _Server((host, port), self)
        self._thread: threading.Thread | None = None
        if self.out_dir is not None:
            self.out_dir.mkdir(parents=True, exist_ok=True)

    # lifecycle

    @property
    def port(self) -> int:
        return int(self._server.server_address[1])

    @property
    def url(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"http://{host}:{self.port}/"

    def start(self) -> ReceiverServer:
        if self._thread is None:
            self._thread = threading.Thread(
                target=self._server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True
            )
            self._thread.start()
        return self

    def stop(self) -> None:
        self._stopping.set()
        if self._thread is not None:
            self._server.shutdown()
            self._thread.join(timeout=5)
            self._thread = None
        self._close()

    def _close(self) -> None:
        with self._lock:
            conns = list(self._connections)
        for c in conns:  # wake handlers blocked on idle keep-alive connections
            with contextlib.suppress(OSError):
                c.shutdown(socket.SHUT_RDWR)
        self._server.server_close()

    def __enter__(self) -> ReceiverServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def _track(self, conn: socket.socket, *, add: bool) -> None:
        with self._lock:
            if add:
                self._connections.add(conn)
                self.connections_opened += 1
            else:
                self._connections.discard(conn)

    # processing

    def _log_request(self, rec: ReceivedRequest) -> None:
        with self._changed:
            self.requests.append(rec)
            if rec.outcome == "rejected":
                self.rejected += 1
            self._changed.notify_all()

    def handle(self, headers: Mapping[str, str], body: bytes, path: str = "/") -> tuple[int, dict[str, Any]]:
        """Verify, dedupe and store one delivery; returns (HTTP status, JSON reply)."""
        try:
            doc = verify_webhook(
                headers,
                body,
                self.secrets,
                tolerance_seconds=self.tolerance_seconds,
                verify_artifact_body=self.verify_artifact_body,
                accept_legacy=self.accept_legacy,
            )
        except SettlekitError as exc:
            self._log_request(ReceivedRequest(path, dict(headers), body, exc.status, "rejected"))
            return exc.status, exc.to_problem()
        headers = {k.lower(): v for k, v in headers.items()}
        msg_id = headers.get("webhook-id") or headers.get("x-proxy-dedupe-key") or ""
        with self._changed:
            known = self.received.get(msg_id)
            if known is not None:
                if known.get("artifactHash") != doc.get("artifactHash"):
                    status, outcome = 409, "rejected"
                    payload = WebhookVerificationError(
                        "webhook-id already received with a different artifactHash", reason="id_conflict"
                    ).to_problem()
                    self.rejected += 1
                else:
                    status, outcome, payload = 200, "duplicate", {"status": "duplicate", "id": msg_id}
                    self.duplicates += 1
            else:
                self._store(doc, body)
                self.received[msg_id] = doc
                status, outcome, payload = 200, "accepted", {"status": "accepted", "id": msg_id}
            self.requests.append(ReceivedRequest(path, dict(headers), body, status, outcome))
            self._changed.notify_all()
        if self.log is not None and outcome == "accepted":
            self.log(f"accepted {doc.get('artifactType')} {doc.get('artifactId')} ({msg_id})")
        return status, payload

    def _store(self, doc: Mapping[str, Any], body: bytes) -> None:
        if self.out_dir is None:
            return
        target = self.out_dir / artifact_filename(str(doc.get("artifactId") or doc.get("artifactHash")))
        if target.exists():
            return
        fd, tmp = tempfile.mkstemp(dir=self.out_dir, prefix=".incoming-", suffix=".json")
        try:
            with os.fdopen(fd, "wb") as f:
                f.write(body)  # the exact signed bytes (canonical JSON)
            os.replace(tmp, target)
        except BaseException:
            Path(tmp).unlink(missing_ok=True)
            raise

    # inspection

    @property
    def artifacts(self) -> list[dict[str, Any]]:
        with self._lock:
            return list(self.received.values())

    def _count_incomplete(self) -> None:
        with self._lock:
            self.incomplete += 1

    def stats(self) -> dict[str, int]:
        with self._lock:
            return {
                "received": len(self.received),
                "duplicates": self.duplicates,
                "rejected": self.rejected,
                "incomplete": self.incomplete,
                "requests": len(self.requests),
                "connections": self.connections_opened,
            }

    def wait_for(self, predicate: Callable[[ReceiverServer], bool], timeout: float = 5.0) -> bool:
        """Block until `predicate(self)` holds (re-checked after every request) or the timeout passes."""
        deadline = time.monotonic() + timeout
        with self._changed:
            while not predicate(self):
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    return False
                self._changed.wait(remaining)
            return True
