"""Delivery worker (spec 06 §4-5): claim due deliveries of all tenants, send outside any transaction, complete
each under its lease, retry with backoff, fail to the DLQ, disable destinations on 410.

Database calls are synchronous (`Database`/`Tx`) and run in worker threads; sending is async. Many workers
(threads or processes) may share one PostgreSQL database; on SQLite claims serialize on the single writer.
"""

from __future__ import annotations

import asyncio
import contextlib
import ipaddress
import os
import random
import socket
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

from settlekit.delivery import store
from settlekit.delivery.message import PreparedRequest
from settlekit.delivery.retry import (
    EXCEPTION,
    MISSING_ARTIFACT,
    UNKNOWN_DESTINATION,
    RetryPolicy,
    decide,
)
from settlekit.delivery.secrets import SecretRefError, SecretResolver
from settlekit.delivery.sender import Outcome, SenderConfig, WebhookSender
from settlekit.delivery.signing import SigningMode, delivery_headers
from settlekit.delivery.ssrf import AsyncResolver, SsrfPolicy
from settlekit.errors import ConfigurationError
from settlekit.events.canonical import canonical_bytes
from settlekit.store.db import Database, Tx

ArtifactLoader = Callable[[Tx, str, str], Mapping[str, Any] | None]
"""(tx, tenant_id, artifact_id) → the stored artifact (with artifactHash), or None."""


def _utcnow() -> datetime:
    return datetime.now(UTC)


@dataclass(frozen=True)
class WorkerConfig:
    batch_size: int = 50
    lease: timedelta = timedelta(seconds=60)
    retention: timedelta = timedelta(days=30)
    allow_insecure_http: bool = False
    allow_loopback: bool = False  # dev/test only
    allowed_networks: tuple[str, ...] = ()
    idle_sleep: float = 1.0
    sender: SenderConfig = field(default_factory=SenderConfig)
    retry: RetryPolicy = field(default_factory=RetryPolicy)


@dataclass
class PassResult:
    claimed: int = 0
    delivered: int = 0
    retried: int = 0
    failed: int = 0
    disabled: int = 0
    lease_lost: int = 0


class DeliveryWorker:
    """`await worker.run_once()` processes one claimed batch; `await worker.run(stop_event)` loops."""

    def __init__(
        self,
        db: Database,
        *,
        artifact_loader: ArtifactLoader,
        config: WorkerConfig | None = None,
        secret_resolver: SecretResolver | None = None,
        worker_id: str | None = None,
        clock: Callable[[], datetime] = _utcnow,
        rng: random.Random | None = None,
        resolver: AsyncResolver | None = None,
    ):
        self.db = db
        self.config = config or WorkerConfig()
        if self.config.lease.total_seconds() <= self.config.sender.timeout + 5:
            raise ConfigurationError(
                "delivery lease must exceed the HTTP timeout plus a 5 s margin",
                code="DELIVERY_LEASE_TOO_SHORT",
                lease_seconds=self.config.lease.total_seconds(),
                timeout_seconds=self.config.sender.timeout,
            )
        self.load_artifact = artifact_loader
        self.secrets = secret_resolver or SecretResolver()
        self.worker_id = worker_id or f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:8]}"
        self.clock = clock
        self.rng = rng or random.Random()
        self._sender = WebhookSender(self.config.sender, resolver=resolver)

    async def aclose(self) -> None:
        await self._sender.aclose()

    async def __aenter__(self) -> DeliveryWorker:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    def _policy(self, dest: store.Destination) -> SsrfPolicy:
        cfg = self.config
        return SsrfPolicy(
            allow_insecure_http=cfg.allow_insecure_http,
            allow_private_network=dest.allow_private_network,
            allow_loopback=cfg.allow_loopback,
            allowed_networks=tuple(ipaddress.ip_network(n, strict=False) for n in cfg.allowed_networks),
        )

    def _claim_and_prepare(self) -> tuple[list[PreparedRequest], list[Outcome]]:
        """One short transaction: claim, then read destinations and artifacts for the claimed rows."""
        now = self.clock()
        requests: list[PreparedRequest] = []
        early: list[Outcome] = []
        with self.db.transaction() as tx:
            claimed = store.claim(
                tx, worker=self.worker_id, limit=self.config.batch_size, lease=self.config.lease, now=now
            )
            dests: dict[tuple[str, str], store.Destination | None] = {}
            for d in claimed:
                key = (d.tenant_id, d.destination_id)
                if key not in dests:
                    dests[key] = store.get_destination(tx, *key)
                dest = dests[key]
                try:
                    if dest is None:
                        early.append(_local_failure(d, UNKNOWN_DESTINATION, "destination not found", now))
                        continue
                    artifact = self.load_artifact(tx, d.tenant_id, d.artifact_id)
                    if artifact is None or artifact.get("artifactHash") != d.artifact_hash:
                        early.append(_local_failure(d, MISSING_ARTIFACT, "artifact not found", now))
                        continue
                    requests.append(self._prepare(d, dest, artifact, now))
                except SecretRefError as exc:
                    early.append(_local_failure(d, exc.reason, exc.message, now))
        return requests, early

    def _prepare(
        self, d: store.Delivery, dest: store.Destination, artifact: Mapping[str, Any], now: datetime
    ) -> PreparedRequest:
        body = canonical_bytes(dict(artifact))
        signing: SigningMode = dest.signing  # type: ignore[assignment]  # checked when stored
        headers = delivery_headers(
            mode=signing,
            secrets=self.secrets.resolve(dest.secret_ref),
            body=body,
            message_id=d.message_id,
            dedupe_key=d.dedupe_key,
            delivery_id=str(d.id),
            artifact_type=d.artifact_type,
            artifact_id=d.artifact_id,
            artifact_hash=d.artifact_hash,
            order_key=d.order_key,
            attempt=d.attempts,
            now=now,
        )
        return PreparedRequest(
            url=dest.url,
            headers=headers,
            body=body,
            tag=d,
            group=(d.tenant_id, d.destination_id, d.scope_key),
            policy=self._policy(dest),
        )

    def _complete(self, outcomes: list[Outcome]) -> PassResult:
        """Apply every outcome in one transaction, each guarded by this worker's lease."""
        result = PassResult(claimed=len(outcomes))
        now = self.clock()
        cfg = self.config
        with self.db.transaction() as tx:
            for out in outcomes:
                d: store.Delivery = out.tag
                store.record_attempt(
                    tx,
                    d.id,
                    d.attempts,
                    started_at=out.started_at,
                    duration_ms=out.duration_ms,
                    http_status=out.status,
                    error=out.error_message or out.error,
                    response_snippet=out.response_snippet,
                )
                dec = decide(
                    status=out.status,
                    error=out.error,
                    attempts=d.attempts,
                    policy=cfg.retry,
                    retry_after=out.retry_after,
                    rng=self.rng,
                )
                if dec.kind == "delivered":
                    assert out.status is not None
                    ok = store.mark_delivered(
                        tx, d.id, self.worker_id, status=out.status, now=now, retention=cfg.retention
                    )
                    result.delivered += ok
                elif dec.kind == "retry":
                    assert dec.delay is not None and dec.reason is not None
                    ok = store.mark_retry(
                        tx,
                        d.id,
                        self.worker_id,
                        status=out.status,
                        error=dec.reason,
                        next_attempt_at=now + timedelta(seconds=dec.delay),
                        now=now,
                    )
                    result.retried += ok
                else:
                    assert dec.reason is not None
                    ok = store.mark_failed(
                        tx,
                        d.id,
                        self.worker_id,
                        status=out.status,
                        error=dec.reason,
                        now=now,
                        retention=cfg.retention,
                    )
                    if ok and dec.kind == "disable":
                        store.set_destination_status(
                            tx, d.tenant_id, d.destination_id, status="disabled", reason="gone", now=now
                        )
                        result.disabled += 1
                    else:
                        result.failed += ok
                result.lease_lost += not ok
        return result

    async def run_once(self) -> PassResult:
        requests, early = await asyncio.to_thread(self._claim_and_prepare)
        sent = await self._sender.send_batch(requests) if requests else []
        outcomes = early + sent
        if not outcomes:
            return PassResult()
        return await asyncio.to_thread(self._complete, outcomes)

    async def run(self, stop: asyncio.Event) -> None:
        """Loop until `stop` is set; sleeps `idle_sleep` after a pass that claimed nothing."""
        while not stop.is_set():
            result = await self.run_once()
            if result.claimed == 0:
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(stop.wait(), self.config.idle_sleep)


def _local_failure(d: store.Delivery, reason: str, message: str, now: datetime) -> Outcome:
    """An attempt that failed before any request was sent."""
    return Outcome(
        tag=d,
        status=None,
        error=reason if reason else EXCEPTION,
        error_message=message,
        retry_after=None,
        duration_ms=0.0,
        started_at=now,
    )
