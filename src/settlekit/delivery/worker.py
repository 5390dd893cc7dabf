"""Delivery worker (spec 06 §4-5): claim due deliveries of all tenants fairly, send them concurrently outside any
transaction, record each outcome under its lease as soon as it ends, retry with backoff, fail to the DLQ, disable
destinations on 410, and keep a destination that stops answering from holding anyone else's slots.

`run()` keeps up to `caps.in_flight` requests in flight: whenever slots are free it claims due deliveries dealt
round-robin between tenants and their destinations (`delivery.fairness`), at most `caps.per_destination` to one
destination and `caps.per_tenant` to one tenant at once; each ends on its own and its outcome is recorded at
once (outcomes that end while a record is being written go in the next one transaction together). One task
renews the leases of everything in flight. A destination's circuit breaker (`delivery.circuit`) pauses it after
repeated attempts without an answer. Running replays (`delivery.replays`) are advanced between claims.

Database calls are synchronous (`Database`/`Tx`) and run in worker threads; sending is async. Many workers
(threads or processes) may share one PostgreSQL database; on SQLite claims serialize on the single writer.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import os
import random
import socket
import threading
import time
import uuid
from collections import Counter
from collections.abc import Callable, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any, TypeVar

from prometheus_client import CollectorRegistry

from settlekit import failpoints
from settlekit.cursors import DELIVERY, Cursors
from settlekit.delivery import circuit as breaker
from settlekit.delivery import metrics as m
from settlekit.delivery import replays
from settlekit.delivery.auto_disable import AUTO_DISABLED, AutoDisable, record_outcomes
from settlekit.delivery.errors import WebhookSecretError
from settlekit.delivery.fairness import Caps, DestinationKey, allocate, quarantined
from settlekit.delivery.message import PreparedRequest
from settlekit.delivery.retry import (
    CRASH_LOOP,
    EXCEPTION,
    GONE,
    MISSING_ARTIFACT,
    NETWORK_ERROR,
    SECRET_REF_INVALID,
    TIMEOUT,
    UNKNOWN_DESTINATION,
    Decision,
    RetryPolicy,
    decide,
)
from settlekit.delivery.secrets import SecretRefError, SecretResolver
from settlekit.delivery.sender import Outcome, SenderConfig, WebhookSender
from settlekit.delivery.signing import SigningMode, delivery_headers
from settlekit.delivery.ssrf import AsyncResolver, SsrfPolicy
from settlekit.dispatch.outage import OutageBackoff
from settlekit.errors import ConfigurationError, DatabaseUnavailableError, SettlekitError
from settlekit.events.canonical import canonical_bytes
from settlekit.store import cursor_secret
from settlekit.store import deliveries as store
from settlekit.store.db import Database, Tx

ArtifactLoader = Callable[[Tx, str, str], Mapping[str, Any] | None]
"""(tx, tenant_id, artifact_id) → the stored artifact (with artifactHash), or None."""


log = logging.getLogger("settlekit.delivery")
T = TypeVar("T")

def _utcnow() -> datetime:
    return datetime.now(UTC)


@dataclass(frozen=True)
class WorkerConfig:
    """`lease`: how long a claim is held without renewal; while sends are in flight the worker renews it
    every `lease_renew` seconds (default: 30 % of the lease), so a crashed worker's rows are claimable again
    within one lease while a slow send never loses its lease. The lease must outlast a renewal interval by
    at least `lease_margin` seconds (time for the renewal's own round trip)."""

    batch_size: int = 64  # deliveries one claim takes at most (within the free slots)
    caps: Caps = field(default_factory=Caps)
    circuit: breaker.CircuitPolicy = field(default_factory=breaker.CircuitPolicy)
    replay: replays.ReplayPolicy = field(default_factory=replays.ReplayPolicy)
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

    def add(self, other: DeliveryPassResult) -> None:
        for name in self.__dataclass_fields__:
            setattr(self, name, getattr(self, name) + getattr(other, name))


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
        cursors: Cursors | None = None,
    ):
        self.db = db
        self.config = config or WorkerConfig()
        # a delivery's id as its tenant sees it (the legacy x-proxy-delivery-id header): the tenant's token
        self.cursors = cursors or Cursors(functools.partial(cursor_secret.read, db))
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
        self._db_threads: ThreadPoolExecutor | None = None  # created on first use, shut down by aclose()
        self._stop_requested = threading.Event()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._wake: asyncio.Event | None = None
        self._flush_needed: asyncio.Event | None = None
        self._flush_lock: asyncio.Lock | None = None
        self._flight: dict[int, store.Delivery] = {}  # claimed here, outcome not yet recorded
        self._busy_destinations: Counter[DestinationKey] = Counter()
        self._busy_tenants: Counter[str] = Counter()
        self._quarantined: int | None = None  # the one delivery in flight that was claimed before
        self._tasks: set[asyncio.Task[None]] = set()
        self._outcomes: list[tuple[Outcome, bool]] = []  # ended, not yet recorded (outcome, really sent)
        self._unsent: list[int] = []  # claimed, handed back unsent at the next record
        self._gone: set[DestinationKey] = set()  # answered 410 here, not yet recorded
        self._circuits: set[DestinationKey] = set()  # destinations whose circuit may need closing
        self._totals = DeliveryPassResult()
        self._next_replay_tick = 0.0
        self._low_water = max(1, min(self.config.batch_size, self.config.caps.in_flight) // 4)
        # a failing claim (the database down) backs off from 0.2 to 2 error_sleeps, logging once per change of state
        self._claim_outage = OutageBackoff(log, "delivery claim")
        self._error: BaseException | None = None  # the last unexpected error of a send or a record
        self._failed: asyncio.Event | None = None  # set by it (a pass of run_once ends at once)
        self._fail_fast = False  # in a pass of run_once

    async def aclose(self) -> None:
        await self._sender.aclose()
        threads, self._db_threads = self._db_threads, None
        if threads is not None:
            threads.shutdown(wait=False)

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
        """Keep up to `caps.in_flight` requests in flight until `stop()` is called (or `stop` is set); then let
        the requests in flight end, record them and release what was claimed but not sent. A claim that fails
        unexpectedly is logged, counted and retried after `error_sleep`; an outcome that cannot be recorded
        leaves its lease to expire (the delivery is claimed again)."""
        self._bind_loop()
        watcher = asyncio.create_task(self._watch(stop)) if stop is not None else None
        keeper = asyncio.create_task(self._keep_flight_leases())
        recorder = asyncio.create_task(self._record_loop())
        try:
            while not self.stopping:
                try:
                    await self._advance_replays()
                except Exception as exc:  # replays wait; claims go on
                    self.metrics.worker_errors.labels(type(exc).__name__).inc()
                    log.warning("could not advance the running replays: %s", exc)
                try:
                    wanted = min(self.config.batch_size, self.config.caps.in_flight - len(self._flight))
                    if self._flight and wanted < self._low_water:
                        wanted = 0  # a claim for a slot or two costs a transaction each: wait for a few more
                    claimed = await self._fill(wanted) if wanted > 0 else 0
                except Exception as exc:
                    self.metrics.worker_errors.labels(type(exc).__name__).inc()
                    await self._idle(self._claim_outage.failed(exc) * self.config.error_sleep)
                    continue
                self._claim_outage.succeeded()
                if claimed < wanted or wanted <= 0:  # nothing more due, or no free slot: until woken
                    await self._idle(self.config.idle_sleep)
                if self._error is not None and not isinstance(self._error, Exception):
                    raise self._error  # a crash
        finally:
            try:
                await self._settle()
            finally:
                await _cancel(recorder, keeper, watcher)
                self._wake = None

    async def _db_call(self, fn: Callable[..., T], /, *args: Any, **kwargs: Any) -> T:
        """`fn` on one of the worker's own database threads: never behind the event loop's default executor,
        where host name lookups (a tenant's slow name servers) wait."""
        if self._db_threads is None:
            self._db_threads = ThreadPoolExecutor(4, thread_name_prefix="settlekit-delivery-db")
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(self._db_threads, functools.partial(fn, *args, **kwargs))

    def _bind_loop(self) -> None:
        self._loop, self._wake = asyncio.get_running_loop(), asyncio.Event()
        self._flush_needed = asyncio.Event()
        self._flush_lock = asyncio.Lock()
        self._failed = asyncio.Event()

    async def _watch(self, stop: asyncio.Event) -> None:
        await stop.wait()
        self.stop()

    async def drain(self, timeout: float) -> bool:
        """Run passes until no pending delivery is due (True) or `timeout` seconds pass (False).

        Rows leased by other workers count as due until they complete or their lease expires.
        """
        if self._wake is None:
            self._bind_loop()
        deadline = time.monotonic() + timeout
        while True:
            result = await self.run_once()
            if result.claimed == 0 and await self._db_call(self._count_due) == 0:
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

    def _claim_and_prepare(self, slots: int, busy_destinations: dict[DestinationKey, int],
                           busy_tenants: dict[str, int], quarantine_free: bool) -> _Claim:
        """Deal up to `slots` due deliveries fairly (`fairness.allocate`) from a read; then one short transaction
        leases them and reads destinations and artifacts for the claimed rows."""
        now = self.clock()
        claim = _Claim()
        with self.db.read() as tx:  # a read (no write lock on SQLite) finds what to claim; usually nothing
            due = store.due_per_destination(tx, per_destination=self.config.caps.per_destination, now=now)
        picks = allocate(due, slots=slots, caps=self.config.caps, busy_destinations=busy_destinations,
                         busy_tenants=busy_tenants, quarantine_free=quarantine_free)
        if not picks:
            return claim
        self.cursors.load()  # the secret is read once, before the claim's transaction
        with self.db.transaction() as tx:  # the claim checks again that each is still pending and unleased
            rank = {p.id: i for i, p in enumerate(picks)}
            claimed = sorted(store.claim_ids(tx, list(rank), worker=self.worker_id, lease=self.config.lease,
                                             now=now), key=lambda d: rank[d.id])
            dests: dict[tuple[str, str], store.Destination | None] = {}
            # a destination's signing secrets, read once per claim (or the error reading them gave)
            signing: dict[tuple[str, str], list[str] | SettlekitError] = {}
            for d in claimed:
                claim.claimed.append(d)
                key = (d.tenant_id, d.destination_id)
                if key not in dests:
                    dests[key] = store.get_destination(tx, *key)
                    found = dests[key]
                    if found is not None and found.circuit != store.Circuit():
                        claim.circuits.add(key)
                dest = dests[key]
                if d.claims > self.config.max_claims:  # each earlier claim ended without an outcome: a crash loop
                    log.error("delivery %d (%s/%s) was claimed %d times without a recorded outcome: dead-lettered"
                              " (crash_loop)", d.id, d.tenant_id, d.destination_id, d.claims - 1)
                    claim.early.append(_local_failure(
                        d, CRASH_LOOP, f"claimed {d.claims - 1} times without a recorded outcome (worker crashes)",
                        now))
                    continue
                try:
                    if dest is None:
                        claim.early.append(_local_failure(d, UNKNOWN_DESTINATION, "destination not found", now))
                        continue
                    artifact = self.load_artifact(tx, d.tenant_id, d.artifact_id)
                    if artifact is None or artifact.get("artifactHash") != d.artifact_hash:
                        claim.early.append(_local_failure(d, MISSING_ARTIFACT, "artifact not found", now))
                        continue
                    if key not in signing:
                        try:
                            signing[key] = self.secrets.for_destination(tx, dest, now)
                        except SettlekitError as exc:
                            signing[key] = exc
                    secrets = signing[key]
                    if isinstance(secrets, SettlekitError):
                        raise secrets.with_traceback(None)  # the same error for each delivery of the destination
                    claim.requests.append(self._prepare(d, dest, artifact, now, secrets))
                except SecretRefError as exc:
                    claim.early.append(_local_failure(d, exc.reason, exc.message, now))
                except WebhookSecretError as exc:  # a resolved secret that is not a valid whsec_ secret
                    claim.early.append(_local_failure(d, SECRET_REF_INVALID, exc.message, now))
                except SettlekitError as exc:
                    claim.early.append(_local_failure(d, EXCEPTION, f"{exc.code}: {exc.message}", now))
        return claim

    async def _fill(self, slots: int) -> int:
        """Claim up to `slots` deliveries and start sending them; returns how many were claimed. Requests of one
        destination and scope go out one after another in claim order (one task); the rest concurrently."""
        if slots <= 0 or self.stopping:
            return 0
        claim = await self._db_call(self._claim_and_prepare, slots, dict(self._busy_destinations),
                                        dict(self._busy_tenants), self._quarantined is None)
        if not claim.claimed:
            return 0
        for d in claim.claimed:
            self._flight[d.id] = d
            self._busy_destinations[(d.tenant_id, d.destination_id)] += 1
            self._busy_tenants[d.tenant_id] += 1
            if quarantined(d.claims - 1):  # claimed before without an outcome: one at a time
                self._quarantined = d.id
        self._circuits |= claim.circuits
        failpoints.hit("delivery.claimed", self.worker_id)
        if claim.requests:
            failpoints.hit("delivery.sending", self.worker_id)
        chains: dict[object, list[PreparedRequest]] = {}
        for req in claim.requests:
            chains.setdefault(req.group, []).append(req)
        for chain in chains.values():
            task = asyncio.create_task(self._send_chain(chain))
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)
        if claim.early:
            self._outcomes.extend((o, False) for o in claim.early)
            self._signal_flush()
        return len(claim.claimed)

    async def _send_chain(self, chain: list[PreparedRequest]) -> None:
        """Send one destination's requests of one scope in order, each outcome queued for recording as soon as
        it ends. After `stop()`, or once the destination answered 410, the rest are handed back unsent. An
        unexpected error abandons the rest of the chain here (their leases expire; they are claimed again)."""
        started = 0
        try:
            for req in chain:
                started += 1
                d: store.Delivery = req.tag
                key = (d.tenant_id, d.destination_id)
                if self._crashed:
                    return
                if self.stopping or key in self._gone:
                    self._unsent.append(d.id)
                    continue
                try:
                    out = await self._sender.send(req)
                except asyncio.CancelledError:
                    self._unsent.append(d.id)
                    raise
                if self._crashed:
                    return
                if out.status == 410:
                    self._gone.add(key)
                failpoints.hit("delivery.sent", self.worker_id)
                self._outcomes.append((out, True))
                self._signal_flush()
        except asyncio.CancelledError:
            raise
        except BaseException as exc:  # noqa: BLE001 - a crash (a failpoint's) ends the pass; see _fail
            self._fail(exc, "a delivery send failed unexpectedly; its lease expires and it is sent again")
            self._land([r.tag.id for r in chain[max(0, started - 1):]])
        finally:
            self._signal_flush()

    @property
    def _crashed(self) -> bool:
        """A pass of `run_once` met an unexpected error: it ends as a crash would, nothing more is sent or
        recorded."""
        return self._fail_fast and self._error is not None

    def _fail(self, exc: BaseException, message: str) -> None:
        """An unexpected error of a send or a record: counted, logged, and (for `run_once`) the pass's error. One
        that is not an `Exception` (a simulated crash) ends `run()` too."""
        self._error = exc
        if self._failed is not None:
            self._failed.set()
        self.metrics.worker_errors.labels(type(exc).__name__).inc()
        log.error(message, exc_info=exc)

    def _signal_flush(self) -> None:
        if self._flush_needed is not None:
            self._flush_needed.set()

    async def _record_loop(self) -> None:
        """Record outcomes as they come: whatever ended while the previous record was written goes in one
        transaction."""
        assert self._flush_needed is not None
        while True:
            await self._flush_needed.wait()
            self._flush_needed.clear()
            try:
                await self._flush()
            except asyncio.CancelledError:
                raise
            except BaseException as exc:  # noqa: BLE001 - see _fail
                self._fail(exc, "could not record delivery outcomes; their leases expire and they are sent again")
                if not isinstance(exc, Exception):
                    return
                await asyncio.sleep(self.config.error_sleep)

    async def _flush(self) -> None:
        """Record the outcomes that have ended, hand back the deliveries left unsent, free their slots."""
        assert self._flush_lock is not None
        async with self._flush_lock:
            if self._crashed:
                return
            outcomes, self._outcomes = self._outcomes, []
            unsent, self._unsent = self._unsent, []
            if not outcomes and not unsent:
                return
            result = DeliveryPassResult()
            try:
                if unsent:  # handed back first: a failed record below must not keep them leased
                    released = await self._db_call(self._release, unsent)
                    self.metrics.released.inc(released)
                    result.released = released
                    result.claimed += len(unsent)
                if outcomes:
                    sent = [o for o, real in outcomes if real]
                    recorded = await self._record(sent + [o for o, real in outcomes if not real], sent=len(sent))
                    recorded.claimed += result.claimed
                    recorded.released = result.released
                    result = recorded
                    failpoints.hit("delivery.completed", self.worker_id)
                    for out in sent:  # its 410 is recorded: the destination is disabled in the database now
                        if out.status == 410:
                            self._gone.discard((out.tag.tenant_id, out.tag.destination_id))
            finally:
                self._land([o.tag.id for o, _ in outcomes] + unsent)
            self._totals.add(result)

    def _land(self, ids: list[int]) -> None:
        """These deliveries are no longer in flight here (recorded, released, or given up to lease expiry)."""
        for delivery_id in ids:
            d = self._flight.pop(delivery_id, None)
            if d is None:
                continue
            key = (d.tenant_id, d.destination_id)
            self._busy_destinations[key] -= 1
            if self._busy_destinations[key] <= 0:
                del self._busy_destinations[key]
            self._busy_tenants[d.tenant_id] -= 1
            if self._busy_tenants[d.tenant_id] <= 0:
                del self._busy_tenants[d.tenant_id]
            if self._quarantined == delivery_id:
                self._quarantined = None
        self.wake()

    async def _settle(self, *, fail_fast: bool = False) -> None:
        """Wait for every send in flight to end, then record what is left. With `fail_fast` (a pass of
        `run_once`), the first unexpected error ends the pass at once, as a crash would: the sends still in flight
        are cancelled, nothing more is recorded (their leases expire), and the error is raised."""
        assert self._failed is not None
        failed = asyncio.create_task(self._failed.wait())
        try:
            while self._tasks and not (fail_fast and self._failed.is_set()):
                await asyncio.wait([*self._tasks, failed], return_when=asyncio.FIRST_COMPLETED)
        finally:
            failed.cancel()
        if not (fail_fast and self._error is not None) and self._flush_lock is not None:
            await self._flush()
        if fail_fast and self._error is not None:
            for task in list(self._tasks):
                task.cancel()
            await asyncio.gather(*list(self._tasks), return_exceptions=True)
            self._outcomes, self._unsent = [], []
            self._land(list(self._flight))
            error, self._error = self._error, None
            raise error

    async def _advance_replays(self, *, force: bool = False) -> None:
        """Advance the running replays (at most once per `replay.tick` seconds unless forced)."""
        now = time.monotonic()
        if not force and now < self._next_replay_tick:
            return
        self._next_replay_tick = now + self.config.replay.tick
        if await self._db_call(replays.advance, self.db, self.config.replay, self.clock()):
            self.wake()

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
            delivery_id=self.cursors.encode(DELIVERY, d.tenant_id, d.id),
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
            pool=(d.tenant_id, d.destination_id),
        )

    def _complete(self, outcomes: list[Outcome], *, sent: int, circuits: frozenset[DestinationKey] | None = None
                  ) -> DeliveryPassResult:
        """Apply every outcome in one transaction, each guarded by this worker's lease; metrics after commit.

        The first `sent` outcomes are real HTTP attempts, the rest failed before sending. Each recorded outcome
        counts one attempt (`attempt` = attempts before it + 1). An outcome whose lease was lost is not recorded
        (not in the attempt log, not in the destination's failure streak): the worker that claimed the delivery
        since records its own. A 410 disables its destination and fails that delivery only: further 410s from a
        destination that is already disabled (by this pass, another worker or an operator) leave their
        deliveries pending, to be sent once it is enabled again. The conditional disable takes the
        destination's row lock, so of concurrent workers exactly one fails its delivery. The destinations of the
        real attempts are locked first, in one order, and the delivery rows are updated in id order, as other
        workers' records and lease renewals do: no two of them wait for each other in a cycle."""
        result = DeliveryPassResult(claimed=len(outcomes))
        now = self.clock()
        counted: list[tuple[str, str, str | None]] = [("", "", None)] * len(outcomes)  # (destination, outcome, reason)
        disabled_reasons: list[str] = []
        recorded: list[tuple[int, Outcome]] = []  # the real HTTP attempts recorded under this worker's lease
        decided: list[tuple[store.Delivery, Outcome, Decision, str]] = []
        circuits = frozenset(self._circuits) if circuits is None else circuits
        with self.db.transaction() as tx:
            # every destination this may update (streaks, circuits, a 410's disable), locked first in one order
            store.lock_destinations(tx, ((o.tag.tenant_id, o.tag.destination_id) for o in outcomes[:sent]))
            # delivery rows in id order, as every other transaction that updates several of them
            for i, out in sorted(enumerate(outcomes), key=lambda item: item[1].tag.id):
                d: store.Delivery = out.tag
                dec = self._decide(d, out)
                ok, outcome = self._apply_decision(tx, d, out, dec, now, result, disabled_reasons)
                if ok:
                    self._record_attempt(tx, d, out)
                    if i < sent:
                        recorded.append((i, out))
                decided.append((d, out, dec, outcome if ok else m.LEASE_LOST))
                result.lease_lost += not ok
                counted[i] = (d.destination_id, outcome if ok else m.LEASE_LOST, dec.reason)
                if i == 0:
                    failpoints.hit("delivery.completing", self.worker_id)
            in_order = [out for _, out in sorted(recorded, key=lambda item: item[0])]  # as they were sent
            self._count_streaks(tx, in_order, now, result, disabled_reasons)
            opened = self._update_circuits(tx, in_order, now, circuits)
        for d, out, dec, outcome in decided:  # logged once committed: a retried completion logs each attempt once
            _log_attempt(d, out, dec, outcome)
        self._count_outcomes(outcomes, counted, disabled_reasons, sent)
        for tenant_id, destination_id, circuit in opened:
            self.metrics.circuit_opened.inc()
            log.warning("destination %s/%s circuit opened until %s after %d attempts without an answer",
                        tenant_id, destination_id, circuit.open_until, circuit.failures)
        return result

    def _update_circuits(self, tx: Tx, sent: list[Outcome], now: datetime, circuits: frozenset[DestinationKey]
                         ) -> list[tuple[str, str, store.Circuit]]:
        """Move the circuits of the destinations these attempts went to (only where one got no answer or the
        circuit was not at rest: the common case writes nothing); returns the circuits opened now."""
        answered: dict[DestinationKey, list[bool]] = {}
        for out in sent:
            key = (out.tag.tenant_id, out.tag.destination_id)
            if out.error in (TIMEOUT, NETWORK_ERROR):
                answered.setdefault(key, []).append(False)
            elif out.status is not None:
                answered.setdefault(key, []).append(True)
        opened = []
        for key in sorted(answered):
            if all(answered[key]) and key not in circuits:
                continue
            current = store.get_circuit(tx, *key)
            if current is None:
                continue
            moved = breaker.after_attempts(current, answered[key], self.config.circuit, now)
            if moved != current:
                store.set_circuit(tx, *key, moved)
                if moved.opens > current.opens:
                    opened.append((*key, moved))
            rest = moved == store.Circuit()
            tx.after_commit(functools.partial(self._circuits.discard if rest else self._circuits.add, key))
        return opened

    async def _record(self, outcomes: list[Outcome], *, sent: int) -> DeliveryPassResult:
        """`_complete`, retried every `error_sleep` while the database is unavailable, for up to one lease (the
        leases stay renewed meanwhile: the outcomes are still in flight for `_keep_flight_leases`): a short outage
        after the sends neither loses their outcomes (the deliveries would be sent again) nor counts the claim
        toward `crash_loop`. Past that the error propagates and the leases expire as before."""
        deadline: float | None = None
        while True:
            try:
                return await self._db_call(self._complete, outcomes, sent=sent, circuits=frozenset(self._circuits))
            except DatabaseUnavailableError:
                if deadline is None:
                    deadline = time.monotonic() + self.config.lease.total_seconds()
                if time.monotonic() + self.config.error_sleep >= deadline:
                    raise
            self.metrics.worker_errors.labels("CompletionRetry").inc()
            log.warning("could not record %d delivery outcomes (database unavailable); retrying in %.3gs",
                        len(outcomes), self.config.error_sleep)
            await asyncio.sleep(self.config.error_sleep)

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

    async def _keep_flight_leases(self) -> None:
        """Renew the leases of every delivery in flight here, every renewal interval, until cancelled."""
        while True:
            await asyncio.sleep(self.config.renew_interval)
            if self._flight:
                await self._renew_now(list(self._flight))

    async def _renew_now(self, ids: list[int]) -> None:
        try:
            held = await self._db_call(self._renew, ids)
        except Exception:
            self.metrics.worker_errors.labels("LeaseRenewal").inc()
            log.warning("could not renew %d delivery leases", len(ids), exc_info=True)
            return
        self.metrics.lease_renewals.inc()
        still = sum(1 for i in ids if i in self._flight) if self._flight else len(ids)
        if held < still:  # (an outcome recorded meanwhile released its lease: not a loss)
            log.warning("%d of %d delivery leases were lost before renewal", still - held, still)

    def _release(self, ids: list[int]) -> int:
        with self.db.transaction() as tx:
            return store.release(tx, ids, self.worker_id, now=self.clock())

    async def run_once(self) -> DeliveryPassResult:
        """One pass: advance the running replays, claim what the free slots and caps allow, send it (leases
        renewed meanwhile), record each outcome as it ends, and return once all of them are recorded. After
        `stop()` no new request starts; claimed deliveries left unsent are released. Once a destination answers
        410, the pass sends it nothing more."""
        if self.stopping:
            return DeliveryPassResult()
        if self._wake is None:
            self._bind_loop()
        self._totals = DeliveryPassResult()
        self._error = None
        if self._failed is not None:
            self._failed.clear()
        self._fail_fast = True
        try:
            return await self._pass()
        finally:
            self._fail_fast = False

    async def _pass(self) -> DeliveryPassResult:
        await self._advance_replays(force=True)
        wanted = min(self.config.batch_size, self.config.caps.in_flight - len(self._flight))
        if await self._fill(wanted):
            keeper = asyncio.create_task(self._keep_flight_leases())
            recorder = asyncio.create_task(self._record_loop())
            try:
                await self._settle(fail_fast=True)
            finally:
                await _cancel(recorder, keeper)
        result, self._totals = self._totals, DeliveryPassResult()
        return result


@dataclass
class _Claim:
    claimed: list[store.Delivery] = field(default_factory=list)
    requests: list[PreparedRequest] = field(default_factory=list)
    early: list[Outcome] = field(default_factory=list)  # failed before sending
    circuits: set[DestinationKey] = field(default_factory=set)  # destinations whose circuit is not at rest


async def _cancel(*tasks: asyncio.Task[None] | None) -> None:
    """Cancel these background tasks and wait until each has ended."""
    for task in tasks:
        if task is not None:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task


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
