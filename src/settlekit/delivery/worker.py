"""Delivery worker (spec 06 §4-5): claim due deliveries of all tenants, send outside any transaction, complete
each under its lease, retry with backoff, fail to the DLQ, disable destinations on 410.

Database calls are synchronous (`Database`/`Tx`) and run in worker threads; sending is async. Many workers
(threads or processes) may share one PostgreSQL database; on SQLite claims serialize on the single writer.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import random
import socket
import threading
import time
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

from prometheus_client import CollectorRegistry

from settlekit import failpoints
from settlekit.delivery import metrics as m
from settlekit.delivery.errors import WebhookSecretError
from settlekit.delivery.message import PreparedRequest
from settlekit.delivery.recovery import AUTO_DISABLED, AutoDisable, record_outcomes
from settlekit.delivery.retry import (
    CRASH_LOOP,
    EXCEPTION,
    GONE,
    MISSING_ARTIFACT,
    SECRET_REF_INVALID,
    UNKNOWN_DESTINATION,
    Decision,
    RetryPolicy,
    decide,
)
from settlekit.delivery.secrets import SecretRefError, SecretResolver
from settlekit.delivery.sender import Outcome, SenderConfig, WebhookSender
from settlekit.delivery.signing import SigningMode, delivery_headers
from settlekit.delivery.ssrf import AsyncResolver, SsrfPolicy
from settlekit.errors import ConfigurationError, DatabaseUnavailableError, SettlekitError
from settlekit.events.canonical import canonical_bytes
from settlekit.store import deliveries as store
from settlekit.store.db import Database, Tx

ArtifactLoader = Callable[[Tx, str, str], Mapping[str, Any] | None]
"""(tx, tenant_id, artifact_id) → the stored artifact (with artifactHash), or None."""


log = logging.getLogger("settlekit.delivery")

def _utcnow() -> datetime:
    return datetime.now(UTC)


@dataclass(frozen=True)
class WorkerConfig:
    """`lease`: how long a claim is held without renewal; while sends are in flight the worker renews it
    every `lease_renew` seconds (default: 30 % of the lease), so a crashed worker's rows are claimable again
    within one lease while a slow send never loses its lease. The lease must outlast a renewal interval by
    at least `lease_margin` seconds (time for the renewal's own round trip)."""

    batch_size: int = 50
    lease: timedelta = timedelta(seconds=10)
    lease_renew: float | None = None  # seconds; None = 30 % of the lease
    lease_margin: float = 1.0
    retention: timedelta = timedelta(days=30)
    allow_insecure_http: bool = False
    allow_loopback: bool = False  # dev/test only
    allow_private_network: bool = False  # deployment switch; a destination must also opt in
    allowed_networks: tuple[str, ...] = ()  # deployment CIDRs; a destination must also opt in
    per_destination_metrics: bool = False  # label attempts with destination ids (tenant data: off by default)
    max_claims: int = 5  # claims without a recorded outcome before a delivery is dead-lettered (crash_loop)
    idle_sleep: float = 0.2  # poll interval while the queue is empty
    error_sleep: float = 1.0  # back-off after a pass failed unexpectedly (database down, …)
    sender: SenderConfig = field(default_factory=SenderConfig)
    retry: RetryPolicy = field(default_factory=RetryPolicy)
    auto_disable: AutoDisable = field(default_factory=AutoDisable)  # off unless min_failures > 0


    @property
    def renew_interval(self) -> float:
        return self.lease_renew if self.lease_renew is not None else 0.3 * self.lease.total_seconds()


@dataclass
class DeliveryPassResult:
    claimed: int = 0
    delivered: int = 0
    retried: int = 0
    failed: int = 0
    disabled: int = 0
    held: int = 0  # answered, but their destination was disabled (410) meanwhile: pending, not failed
    lease_lost: int = 0
    released: int = 0  # claimed but handed back unsent (graceful stop, destination gone)


class DeliveryWorker:
    """`await worker.run_once()` processes one claimed batch; `await worker.run()` loops until `stop()`.

    `stop()` (thread-safe) lets the attempts in flight finish and be recorded, hands claimed but unsent
    deliveries back (lease released, attempt not counted) and makes `run()` return. `drain(timeout)` runs
    passes until no due delivery remains. `wake()` cuts the idle sleep short.
    """

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
        registry: CollectorRegistry | None = None,
    ):
        self.db = db
        self.config = config or WorkerConfig()
        renew = self.config.renew_interval
        if self.config.max_claims < 1:
            raise ConfigurationError("max_claims must be at least 1", code="SETTINGS_INVALID",
                                     max_claims=self.config.max_claims)
        if renew <= 0 or self.config.lease.total_seconds() < renew + self.config.lease_margin:
            raise ConfigurationError(
                "delivery lease must exceed the lease renewal interval plus the lease margin",
                code="DELIVERY_LEASE_TOO_SHORT",
                lease_seconds=self.config.lease.total_seconds(),
                renew_seconds=renew,
                margin_seconds=self.config.lease_margin,
            )
        self.load_artifact = artifact_loader
        self.secrets = secret_resolver or SecretResolver()
        self.worker_id = worker_id or f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:8]}"
        self.clock = clock
        self.rng = rng or random.Random()
        self.metrics = m.metrics_for(registry)
        self._sender = WebhookSender(self.config.sender, resolver=resolver)
        self._stop_requested = threading.Event()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._wake: asyncio.Event | None = None

    async def aclose(self) -> None:
        await self._sender.aclose()

    async def __aenter__(self) -> DeliveryWorker:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    # --- lifecycle ------------------------------------------------------------------------------------------

    @property
    def stopping(self) -> bool:
        return self._stop_requested.is_set()

    def stop(self) -> None:
        """Ask `run()` to finish the attempts in flight, release unsent claims and return (thread-safe)."""
        self._stop_requested.set()
        self.wake()

    def wake(self) -> None:
        """Start the next pass now instead of after the idle sleep (thread-safe)."""
        loop, ev = self._loop, self._wake
        if loop is not None and ev is not None and not loop.is_closed():
            with contextlib.suppress(RuntimeError):  # loop closed between the check and the call
                loop.call_soon_threadsafe(ev.set)

    async def _idle(self, seconds: float) -> None:
        ev = self._wake
        if ev is None or seconds <= 0:
            return
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(ev.wait(), seconds)
        ev.clear()

    async def run(self, stop: asyncio.Event | None = None) -> None:
        """Loop until `stop()` is called (or `stop` is set). A pass that fails unexpectedly is logged,
        counted and retried after `error_sleep`; leases it held expire and are claimed again."""
        self._loop, self._wake = asyncio.get_running_loop(), asyncio.Event()
        watcher = asyncio.create_task(self._watch(stop)) if stop is not None else None
        try:
            while not self.stopping:
                try:
                    result = await self.run_once()
                except Exception as exc:
                    self.metrics.worker_errors.labels(type(exc).__name__).inc()
                    log.exception("delivery pass failed; retrying in %.1fs", self.config.error_sleep)
                    await self._idle(self.config.error_sleep)
                    continue
                if result.claimed == 0:
                    await self._idle(self.config.idle_sleep)
        finally:
            if watcher is not None:
                watcher.cancel()
            self._wake = None

    async def _watch(self, stop: asyncio.Event) -> None:
        await stop.wait()
        self.stop()

    async def drain(self, timeout: float) -> bool:
        """Run passes until no pending delivery is due (True) or `timeout` seconds pass (False).

        Rows leased by other workers count as due until they complete or their lease expires.
        """
        if self._wake is None:
            self._loop, self._wake = asyncio.get_running_loop(), asyncio.Event()
        deadline = time.monotonic() + timeout
        while True:
            result = await self.run_once()
            if result.claimed == 0 and await asyncio.to_thread(self._count_due) == 0:
                return True
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                return False
            if result.claimed == 0:
                await self._idle(min(self.config.idle_sleep, remaining))

    def _count_due(self) -> int:
        with self.db.read() as tx:
            return store.count_due(tx, now=self.clock())

    # --- one pass -------------------------------------------------------------------------------------------

    def _policy(self, dest: store.Destination) -> SsrfPolicy:
        cfg = self.config
        return SsrfPolicy.for_destination(
            tenant_opt_in=dest.allow_private_network,
            allow_private_network=cfg.allow_private_network,
            allowed_networks=cfg.allowed_networks,
            allow_loopback=cfg.allow_loopback,
            allow_insecure_http=cfg.allow_insecure_http,
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
            # a destination's signing secrets, read once per claim (or the error reading them gave)
            signing: dict[tuple[str, str], list[str] | SettlekitError] = {}
            for d in claimed:
                key = (d.tenant_id, d.destination_id)
                if key not in dests:
                    dests[key] = store.get_destination(tx, *key)
                dest = dests[key]
                if d.claims > self.config.max_claims:  # each earlier claim ended without an outcome: a crash loop
                    log.error("delivery %d (%s/%s) was claimed %d times without a recorded outcome: dead-lettered"
                              " (crash_loop)", d.id, d.tenant_id, d.destination_id, d.claims - 1)
                    early.append(_local_failure(
                        d, CRASH_LOOP, f"claimed {d.claims - 1} times without a recorded outcome (worker crashes)",
                        now))
                    continue
                try:
                    if dest is None:
                        early.append(_local_failure(d, UNKNOWN_DESTINATION, "destination not found", now))
                        continue
                    artifact = self.load_artifact(tx, d.tenant_id, d.artifact_id)
                    if artifact is None or artifact.get("artifactHash") != d.artifact_hash:
                        early.append(_local_failure(d, MISSING_ARTIFACT, "artifact not found", now))
                        continue
                    if key not in signing:
                        try:
                            signing[key] = self.secrets.for_destination(tx, dest, now)
                        except SettlekitError as exc:
                            signing[key] = exc
                    secrets = signing[key]
                    if isinstance(secrets, SettlekitError):
                        raise secrets.with_traceback(None)  # the same error for each delivery of the destination
                    requests.append(self._prepare(d, dest, artifact, now, secrets))
                except SecretRefError as exc:
                    early.append(_local_failure(d, exc.reason, exc.message, now))
                except WebhookSecretError as exc:  # a resolved secret that is not a valid whsec_ secret
                    early.append(_local_failure(d, SECRET_REF_INVALID, exc.message, now))
                except SettlekitError as exc:
                    early.append(_local_failure(d, EXCEPTION, f"{exc.code}: {exc.message}", now))
        return requests, early

    def _prepare(
        self, d: store.Delivery, dest: store.Destination, artifact: Mapping[str, Any], now: datetime,
        secrets: list[str]
    ) -> PreparedRequest:
        body = canonical_bytes(dict(artifact))
        signing: SigningMode = dest.signing  # type: ignore[assignment]  # checked when stored
        headers = delivery_headers(
            mode=signing,
            secrets=secrets,
            body=body,
            message_id=d.message_id,
            dedupe_key=d.dedupe_key,
            delivery_id=str(d.id),
            artifact_type=d.artifact_type,
            artifact_id=d.artifact_id,
            artifact_hash=d.artifact_hash,
            order_key=d.order_key,
            attempt=d.attempts + 1,
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

    def _complete(self, outcomes: list[Outcome], *, sent: int) -> DeliveryPassResult:
        """Apply every outcome in one transaction, each guarded by this worker's lease; metrics after commit.

        The first `sent` outcomes are real HTTP attempts, the rest failed before sending. Each recorded outcome
        counts one attempt (`attempt` = attempts before it + 1). An outcome whose lease was lost is not recorded
        (not in the attempt log, not in the destination's failure streak): the worker that claimed the delivery
        since records its own. A 410 disables its destination and fails that delivery only: further 410s from a
        destination that is already disabled (by this pass, another worker or an operator) leave their
        deliveries pending, to be sent once it is enabled again. The conditional disable takes the
        destination's row lock, so of concurrent workers exactly one fails its delivery. A batch with a failed
        attempt first locks the rows of those destinations in one order, as other workers' batches do."""
        result = DeliveryPassResult(claimed=len(outcomes))
        now = self.clock()
        counted: list[tuple[str, str, str | None]] = []  # (destination_id, outcome, failure reason)
        disabled_reasons: list[str] = []
        recorded: list[Outcome] = []  # the real HTTP attempts recorded under this worker's lease
        decided: list[tuple[store.Delivery, Outcome, Decision, str]] = []
        with self.db.transaction() as tx:
            store.lock_destinations(tx, ((o.tag.tenant_id, o.tag.destination_id) for o in outcomes[:sent]
                                         if not o.ok))
            for i, out in enumerate(outcomes):
                d: store.Delivery = out.tag
                dec = self._decide(d, out)
                ok, outcome = self._apply_decision(tx, d, out, dec, now, result, disabled_reasons)
                if ok:
                    self._record_attempt(tx, d, out)
                    if i < sent:
                        recorded.append(out)
                decided.append((d, out, dec, outcome if ok else m.LEASE_LOST))
                result.lease_lost += not ok
                counted.append((d.destination_id, outcome if ok else m.LEASE_LOST, dec.reason))
                if i == 0:
                    failpoints.hit("delivery.completing", self.worker_id)
            self._count_streaks(tx, recorded, now, result, disabled_reasons)
        for d, out, dec, outcome in decided:  # logged once committed: a retried completion logs each attempt once
            _log_attempt(d, out, dec, outcome)
        self._count_outcomes(outcomes, counted, disabled_reasons, sent)
        return result

    async def _record(self, outcomes: list[Outcome], *, sent: int) -> DeliveryPassResult:
        """`_complete`, retried every `error_sleep` while the database is unavailable, for up to one lease, with
        the leases renewed meanwhile: a short outage after the sends neither loses their outcomes (the
        deliveries would be sent again) nor counts the claim toward `crash_loop`. Past that the error
        propagates and the leases expire as before."""
        deadline: float | None = None
        keeper: asyncio.Task[None] | None = None
        try:
            while True:
                try:
                    return await asyncio.to_thread(self._complete, outcomes, sent=sent)
                except DatabaseUnavailableError:
                    if deadline is None:
                        deadline = time.monotonic() + self.config.lease.total_seconds()
                        keeper = asyncio.create_task(self._keep_leases([o.tag.id for o in outcomes]))
                    if time.monotonic() + self.config.error_sleep >= deadline:
                        raise
                self.metrics.worker_errors.labels("CompletionRetry").inc()
                log.warning("could not record %d delivery outcomes (database unavailable); retrying in %.3gs",
                            len(outcomes), self.config.error_sleep)
                await asyncio.sleep(self.config.error_sleep)
        finally:
            if keeper is not None:
                keeper.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await keeper

    def _count_streaks(self, tx: Tx, sent: list[Outcome], now: datetime, result: DeliveryPassResult,
                       disabled_reasons: list[str]) -> None:
        """Count the real HTTP attempts into their destinations' failure streaks; disable the ones the
        auto-disable rule catches (their pending deliveries wait until they are enabled)."""
        attempts = [(out.tag.tenant_id, out.tag.destination_id, out) for out in sent]
        for tenant_id, destination_id, reason in record_outcomes(tx, attempts, self.config.auto_disable, now):
            result.disabled += 1
            disabled_reasons.append(AUTO_DISABLED)
            log.warning("destination %s/%s disabled: %s", tenant_id, destination_id, reason)

    def _decide(self, d: store.Delivery, out: Outcome) -> Decision:
        """What becomes of the delivery (`attempts` before this one + 1 counts against the retry policy)."""
        return decide(
            status=out.status,
            error=out.error,
            attempts=d.attempts + 1,
            policy=self.config.retry,
            retry_after=out.retry_after,
            rng=self.rng,
        )

    def _record_attempt(self, tx: Tx, d: store.Delivery, out: Outcome) -> None:
        """Record the attempt in the attempt log (numbered on across requeues and replays)."""
        store.record_attempt(
            tx,
            d.id,
            d.next_log_attempt,
            started_at=out.started_at,
            duration_ms=out.duration_ms,
            http_status=out.status,
            error=out.error_message or out.error,
            response_snippet=out.response_snippet,
        )

    def _apply_decision(
        self,
        tx: Tx,
        d: store.Delivery,
        out: Outcome,
        dec: Decision,
        now: datetime,
        result: DeliveryPassResult,
        disabled_reasons: list[str],
    ) -> tuple[bool, str]:
        """Store the decision under this worker's lease; `(lease still held, metrics outcome)`."""
        if dec.kind == "delivered":
            assert out.status is not None
            ok = store.mark_delivered(
                tx, d.id, self.worker_id, status=out.status, now=now, retention=self.config.retention
            )
            result.delivered += ok
            return ok, m.DELIVERED
        if dec.kind == "disable" and not store.disable_if_active(
            tx, d.tenant_id, d.destination_id, reason=dec.reason or GONE, now=now
        ):
            # already disabled (an earlier 410 of this batch, another worker, an operator): wait for enable
            assert dec.reason is not None
            ok = store.mark_held(tx, d.id, self.worker_id, status=out.status, error=dec.reason, now=now)
            result.held += ok
            return ok, m.HELD
        if dec.kind == "retry":
            assert dec.delay is not None and dec.reason is not None
            ok = store.mark_retry(tx, d.id, self.worker_id, status=out.status, error=dec.reason,
                                  next_attempt_at=now + timedelta(seconds=dec.delay), now=now)
            result.retried += ok
            return ok, m.RETRIED
        # failed; when its 410 just disabled the destination (`disable_if_active` succeeded), the destination
        # counts as disabled and its other deliveries wait until it is enabled
        assert dec.reason is not None
        ok = store.mark_failed(tx, d.id, self.worker_id, status=out.status, error=dec.reason, now=now,
                               retention=self.config.retention)
        if dec.kind != "disable":
            result.failed += ok
            return ok, m.FAILED
        result.disabled += 1
        disabled_reasons.append(dec.reason)
        log.warning("destination %s/%s disabled (%s); delivery %d failed, its other deliveries wait until it is "
                    "enabled", d.tenant_id, d.destination_id, dec.reason, d.id)
        return ok, m.GONE if dec.reason == GONE else m.FAILED

    def _count_outcomes(
        self,
        outcomes: list[Outcome],
        counted: list[tuple[str, str, str | None]],
        disabled_reasons: list[str],
        sent: int,
    ) -> None:
        """Metrics of a committed pass: attempts and failures per outcome, the dead-letter count, the durations
        of the real HTTP attempts (the first `sent`) and the destinations disabled."""
        for i, out in enumerate(outcomes):
            dest_id, outcome, reason = counted[i]
            label = dest_id if self.config.per_destination_metrics else m.ALL_DESTINATIONS
            self.metrics.attempts.labels(label, outcome).inc()
            if reason is not None:
                self.metrics.failures.labels(reason).inc()
            if outcome == m.FAILED:
                self.metrics.dlq.inc()
            if i < sent:
                self.metrics.duration.observe(out.duration_ms / 1000.0)
        for reason in disabled_reasons:
            self.metrics.disabled.labels(reason).inc()

    def _renew(self, ids: list[int]) -> int:
        with self.db.transaction() as tx:
            return store.renew_leases(tx, ids, self.worker_id, lease=self.config.lease, now=self.clock())

    async def _keep_leases(self, ids: list[int]) -> None:
        """Renew this pass's leases every renewal interval until cancelled (when the sends are done). A
        failed renewal is logged and retried at the next interval; the completion stays lease-guarded."""
        while True:
            await asyncio.sleep(self.config.renew_interval)
            try:
                held = await asyncio.to_thread(self._renew, ids)
            except Exception:
                self.metrics.worker_errors.labels("LeaseRenewal").inc()
                log.warning("could not renew %d delivery leases", len(ids), exc_info=True)
                continue
            self.metrics.lease_renewals.inc()
            if held < len(ids):
                log.warning("%d of %d delivery leases were lost before renewal", len(ids) - held, len(ids))

    def _release(self, ids: list[int]) -> int:
        with self.db.transaction() as tx:
            return store.release(tx, ids, self.worker_id, now=self.clock())

    async def run_once(self) -> DeliveryPassResult:
        """Claim one batch, send it (leases renewed meanwhile), record the outcomes. After `stop()` no new
        request starts; claimed deliveries left unsent are released. Once a destination answers 410, the
        batch sends it nothing more."""
        if self.stopping:
            return DeliveryPassResult()
        requests, early = await asyncio.to_thread(self._claim_and_prepare)
        if requests or early:
            failpoints.hit("delivery.claimed", self.worker_id)
        sent: list[Outcome] = []
        if requests:
            gone: set[tuple[str, str]] = set()

            def note(out: Outcome, req: PreparedRequest) -> None:
                if out.status == 410:
                    gone.add((req.tag.tenant_id, req.tag.destination_id))

            def skip(req: PreparedRequest) -> bool:
                return (req.tag.tenant_id, req.tag.destination_id) in gone

            # the early failures too: they are recorded with the sent ones, once every send has ended
            keeper = asyncio.create_task(self._keep_leases([r.tag.id for r in requests] + [o.tag.id for o in early]))
            try:
                failpoints.hit("delivery.sending", self.worker_id)
                sent = await self._sender.send_batch(
                    requests, should_stop=self._stop_requested.is_set, should_skip=skip, on_outcome=note
                )
            finally:
                keeper.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await keeper
            failpoints.hit("delivery.sent", self.worker_id)
        sent_ids = {o.tag.id for o in sent}
        unsent = [req.tag.id for req in requests if req.tag.id not in sent_ids]
        outcomes = sent + early
        result = await self._record(outcomes, sent=len(sent)) if outcomes else DeliveryPassResult()
        failpoints.hit("delivery.completed", self.worker_id)
        if unsent:
            released = await asyncio.to_thread(self._release, unsent)
            self.metrics.released.inc(released)
            result.released = released
            result.claimed += len(unsent)
        return result


def _log_attempt(d: store.Delivery, out: Outcome, dec: Decision, outcome: str) -> None:
    """One log line per attempt (never the URL, which may carry credentials): a failure at info (warning when
    the delivery is given up), a success at debug (deliveries are counted in the metrics and kept in the
    attempt log)."""
    level = logging.DEBUG if dec.kind == "delivered" else logging.INFO if dec.kind == "retry" else logging.WARNING
    if not log.isEnabledFor(level):
        return
    fields = {"tenantId": d.tenant_id, "destinationId": d.destination_id, "deliveryId": d.id,
              "attempt": d.attempts + 1, "outcome": outcome, "httpStatus": out.status,
              "durationMs": out.duration_ms}
    if dec.kind != "delivered":
        fields["reason"] = dec.reason
    if dec.delay is not None:
        fields["retryInSeconds"] = round(dec.delay, 3)
    log.log(level, "delivery attempt", extra=fields)


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
