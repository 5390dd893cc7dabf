"""The composition root: the server signing key, the background workers (dispatcher consumers and the webhook
delivery worker) and the retention cleanups they schedule, shared by `settlekit serve`, `settlekit worker` and
the demo; and the processes of `settlekit deliveries run` (a delivery worker alone) and `settlekit receive` (the
reference webhook receiver)."""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import os
import tempfile
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

from settlekit.errors import ConfigurationError
from settlekit.events.envelope import Signer
from settlekit.metrics import PerRegistry
from settlekit.runtime.settings import Settings
from settlekit.store.db import Database
from settlekit.store.maintenance import try_cleanup_lock
from settlekit.store.progress import outstanding

if TYPE_CHECKING:
    from settlekit.delivery.worker import DeliveryWorker, WorkerConfig

log = logging.getLogger("settlekit.runtime")


def wait_until_caught_up(db: Database, received: Callable[[], int], *, timeout: float, min_artifacts: int = 0,
                         poll: float = 0.3) -> bool:
    """Wait until the workers (of any process on `db`) have registered their consumers and processed every
    committed event, delivered every delivery, and the receiver has `received()` at least every artifact built
    (and at least `min_artifacts` were built): True, or False at `timeout` seconds."""
    deadline = time.monotonic() + timeout
    while True:
        work = outstanding(db)
        if (work.consumers > 0 and work.consumers_behind == 0 and work.undelivered == 0
                and work.artifacts >= min_artifacts and received() >= work.artifacts):
            return True
        if time.monotonic() >= deadline:
            return False
        time.sleep(poll)


def load_server_signer(path: str | None) -> Signer:
    """The server's Ed25519 key from a PKCS#8 PEM file, created (mode 0600) when missing. Every process of one
    deployment must use the same file. Without a path, an ephemeral key (tests, demo)."""
    if path is None:
        return Signer.generate()
    file = Path(path)
    if file.exists():
        return Signer.from_pem(file.read_text(encoding="ascii"))
    signer = Signer.generate()
    file.parent.mkdir(parents=True, exist_ok=True)
    # written whole under another name (mode 0600), then linked in: processes starting at once all end up with
    # the one key that was linked first, and none reads a file half written
    fd, temporary = tempfile.mkstemp(dir=file.parent, prefix=".server-key-", suffix=".pem")
    try:
        with os.fdopen(fd, "w", encoding="ascii") as handle:
            handle.write(signer.private_key_pem())
            handle.flush()
            os.fsync(handle.fileno())
        try:
            os.link(temporary, file)
        except FileExistsError:
            return Signer.from_pem(file.read_text(encoding="ascii"))
    finally:
        os.unlink(temporary)
    return signer


def uvicorn_options(settings: Settings) -> dict[str, Any]:
    """uvicorn.Config keywords for `settlekit serve`: listen address and the trusted reverse proxies."""
    options: dict[str, Any] = {"host": settings.host, "port": settings.port, "proxy_headers": settings.proxy_headers}
    if settings.forwarded_allow_ips is not None:
        options["forwarded_allow_ips"] = settings.forwarded_allow_ips
    return options


def worker_config(settings: Settings) -> Any:
    """The delivery worker's configuration from the settings; ConfigurationError (SETTINGS_INVALID) for values
    that cannot work together."""
    from datetime import timedelta

    from settlekit.delivery.auto_disable import AutoDisable
    from settlekit.delivery.fairness import Caps
    from settlekit.delivery.retry import RetryPolicy
    from settlekit.delivery.sender import SenderConfig
    from settlekit.delivery.worker import WorkerConfig

    try:
        retry = RetryPolicy(base=settings.delivery_backoff_base, cap=settings.delivery_backoff_cap,
                            max_attempts=settings.delivery_max_attempts)
    except ValueError as exc:
        raise ConfigurationError(f"delivery retry settings: {exc}", code="SETTINGS_INVALID") from None
    if settings.delivery_timeout <= 0 or settings.delivery_lease <= 0:
        raise ConfigurationError("delivery timeout and lease must be positive", code="SETTINGS_INVALID")
    if settings.delivery_max_claims < 1:
        raise ConfigurationError("delivery max claims must be at least 1", code="SETTINGS_INVALID")
    caps = Caps(in_flight=settings.delivery_concurrency, per_destination=settings.delivery_destination_concurrency,
                per_tenant=settings.delivery_tenant_concurrency)
    return WorkerConfig(
        caps=caps,
        batch_size=caps.in_flight,
        circuit=settings.circuit_policy(),
        replay=settings.replay_policy(),
        allow_loopback=settings.allow_loopback_webhooks,
        allow_private_network=settings.allow_private_webhooks,
        per_destination_metrics=settings.metrics_per_destination,
        allowed_networks=settings.allowed_webhook_networks,
        allow_insecure_http=settings.allow_insecure_http or settings.allow_loopback_webhooks,
        idle_sleep=0.5,  # new work in this process wakes it at once (the sink); this polls for retries coming due
        lease=timedelta(seconds=settings.delivery_lease),
        lease_renew=settings.delivery_lease_renew,
        max_claims=settings.delivery_max_claims,
        retry=retry,
        auto_disable=AutoDisable(settings.destination_disable_after_failures,
                                 timedelta(hours=settings.destination_disable_after_hours)),
        sender=SenderConfig(concurrency=settings.delivery_concurrency, timeout=settings.delivery_timeout,
                            connect_timeout=min(5.0, settings.delivery_timeout),
                            max_connections=max(100, settings.delivery_concurrency),
                            max_keepalive_connections=settings.delivery_concurrency),
    )


def delivery_run_config(settings: Settings, *, concurrency: int, batch: int, idle_sleep: float, lease: float,
                        lease_renew: float | None, timeout: float, max_claims: int) -> WorkerConfig:
    """The configuration of a delivery worker run alone (`settlekit deliveries run`): the embedded workers' one
    (`worker_config`: retries, caps, circuit, replay rate, network policy, metrics, automatic disabling) built
    from the settings with the command line's figures in place of theirs; ConfigurationError (SETTINGS_INVALID)
    for figures that cannot work."""
    if concurrency < 1 or batch < 1:
        raise ConfigurationError("concurrency and batch must be at least 1", code="SETTINGS_INVALID")
    if idle_sleep <= 0:
        raise ConfigurationError("idle sleep must be positive", code="SETTINGS_INVALID")
    # worker_config checks the timeout, the lease and the claims (model_copy does not validate)
    given = settings.model_copy(update={
        "delivery_concurrency": concurrency, "delivery_timeout": timeout, "delivery_lease": lease,
        "delivery_lease_renew": lease_renew, "delivery_max_claims": max_claims})
    config: WorkerConfig = dataclasses.replace(worker_config(given), batch_size=batch, idle_sleep=idle_sleep)
    return config


def standalone_delivery_worker(db: Database, config: WorkerConfig, *, allow_env_secrets: bool) -> DeliveryWorker:
    """A delivery worker for every tenant of `db`, on its own (`settlekit deliveries run`): artifacts loaded from
    the database, `env:` secret references resolved only when `allow_env_secrets`. Enter it (`async with`) on the
    event loop that runs it."""
    from settlekit.delivery.secrets import SecretResolver
    from settlekit.delivery.sink import artifact_loader
    from settlekit.delivery.worker import DeliveryWorker

    return DeliveryWorker(db, artifact_loader=artifact_loader, config=config,
                          secret_resolver=SecretResolver(allow_env=allow_env_secrets))


def run_receiver(stopping: threading.Event, log_line: Callable[[str], None], *, secrets: Sequence[str], host: str,
                 port: int, out_dir: Path | None, tolerance_seconds: float, verify_artifact_body: bool,
                 accept_legacy: bool) -> None:
    """The reference webhook receiver (`settlekit receive`): verify, dedupe by webhook-id and store each artifact
    once, serving on a thread of its own until `stopping` is set (then stopped from here, never interrupted
    mid-request). `log_line` takes its lines: each webhook, where it listens, its counts once stopped."""
    from settlekit.delivery.receiver import ReceiverServer

    server = ReceiverServer(
        secrets=secrets,
        host=host,
        port=port,
        out_dir=out_dir,
        tolerance_seconds=tolerance_seconds,
        verify_artifact_body=verify_artifact_body,
        accept_legacy=accept_legacy,
        log=log_line,
    )
    server.start()
    log_line(f"listening on {server.url}")
    try:
        while not stopping.wait(0.2):
            pass
    finally:
        server.stop()
        log_line(f"stopped: {server.stats()}")


CLEANUP_BATCH = 10_000  # expired deliveries deleted per transaction


@dataclass
class CleanupResult:
    deliveries: int = 0
    idempotency_keys: int = 0
    console_sessions: int = 0
    skipped: bool = False  # another process held the cleanup lock: this tick did nothing


class _CleanupMetrics:
    def __init__(self, registry: Any):
        from prometheus_client import Counter

        self.deleted = Counter("settlekit_cleanup_deleted_rows", "Rows deleted by the retention cleanups",
                               ["table"], registry=registry)
        self.errors = Counter("settlekit_cleanup_errors", "Cleanup ticks that failed (logged with the error)",
                              registry=registry)


_cleanup_metrics: PerRegistry[_CleanupMetrics] = PerRegistry(_CleanupMetrics)


class CleanupScheduler:
    """Deletes rows past their retention every `interval` seconds, on a thread of its own: delivered and failed
    deliveries past `expires_at` (their attempt logs cascade), idempotency keys past their TTL or lease and console
    sessions past their expiry.

    Safe with many worker processes on one database: the deletes are idempotent, and on PostgreSQL a
    transaction-scoped advisory lock (`store.maintenance`) lets one process run a tick at a time (the others skip
    theirs). A failed tick is logged with its traceback and counted (`settlekit_cleanup_errors`); the next runs
    on schedule."""

    def __init__(self, db: Database, *, interval: float, clock: Callable[[], datetime] | None = None,
                 registry: Any = None, batch: int = CLEANUP_BATCH, max_batches: int = 100):
        from prometheus_client import REGISTRY

        self.db = db
        self.interval = interval
        self.clock = clock or (lambda: datetime.now(UTC))
        self.batch = batch
        self.max_batches = max_batches
        self.metrics = _cleanup_metrics(REGISTRY if registry is None else registry)
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def tick(self) -> CleanupResult:
        """One cleanup pass now; raises what the database raises."""
        from settlekit.store import console_sessions, idempotency
        from settlekit.store import deliveries as delivery_store

        now = self.clock()
        result = CleanupResult()
        for batch_no in range(self.max_batches):
            with self.db.transaction() as tx:
                if not try_cleanup_lock(tx):
                    result.skipped = True
                    break
                deleted = delivery_store.cleanup_expired(tx, now=now, limit=self.batch)
                if batch_no == 0:
                    result.idempotency_keys = idempotency.purge_expired_in(tx, now=now)
                    result.console_sessions = console_sessions.purge_expired_in(tx, now=now)
            result.deliveries += deleted
            if deleted < self.batch:
                break
        self.metrics.deleted.labels("deliveries").inc(result.deliveries)
        self.metrics.deleted.labels("idempotency_keys").inc(result.idempotency_keys)
        self.metrics.deleted.labels("console_sessions").inc(result.console_sessions)
        return result

    def run_once(self) -> CleanupResult | None:
        """`tick`, with the outcome logged; None when it failed (the error is logged with its traceback)."""
        try:
            result = self.tick()
        except Exception:
            self.metrics.errors.inc()
            log.exception("retention cleanup failed; retrying in %s s", self.interval)
            return None
        if result.deliveries or result.idempotency_keys:
            log.info("retention cleanup deleted %d deliveries and %d idempotency keys", result.deliveries,
                     result.idempotency_keys)
        return result

    def start(self) -> None:
        """Run a tick now and then every `interval` seconds until `stop` (no thread when the interval is 0)."""
        if self.interval <= 0 or self._thread is not None:
            return

        def loop() -> None:
            while not self._stop.is_set():
                self.run_once()
                self._stop.wait(self.interval)

        self._thread = threading.Thread(target=loop, name="settlekit-cleanup", daemon=True)
        self._thread.start()

    def stop(self, timeout: float = 30.0) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout)
            self._thread = None


class Workers:
    """The dispatcher (artifact consumer) and the delivery worker, each on its own thread."""

    def __init__(self, db: Database, settings: Settings, *, registry: Any = None):
        from settlekit.delivery.sink import WebhookDeliverySink, artifact_loader
        from settlekit.delivery.worker import DeliveryWorker
        from settlekit.dispatch import Dispatcher
        from settlekit.projections.artifacts import artifacts_consumer

        self.db = db
        self.settings = settings
        self.delivery = DeliveryWorker(
            db, artifact_loader=artifact_loader, config=worker_config(settings),
            **({"registry": registry} if registry is not None else {}),
        )
        sink = WebhookDeliverySink(on_enqueued=self.delivery.wake)
        from settlekit.store.contracts import contract_in_tx

        consumer = artifacts_consumer(sink=sink, contract_resolver=contract_in_tx)
        self.dispatcher = Dispatcher(db, [consumer], instance_id=settings.instance_id,
                                     batch_size=settings.dispatch_batch_size,
                                     max_attempts=settings.dispatch_max_attempts,
                                     rearm_cooldown=settings.rearm_cooldown,
                                     max_rearm_count=settings.max_rearm_count,
                                     **({"registry": registry} if registry is not None else {}))
        self.cleanup = CleanupScheduler(db, interval=settings.cleanup_interval, registry=registry)
        self._registry = registry
        self._queue_gauges: Any = None
        self._delivery_thread: threading.Thread | None = None
        self._delivery_error: BaseException | None = None

    def start(self) -> None:
        self._queue_gauges = register_queue_gauges(self.db, self._registry)
        self.dispatcher.start()
        self.cleanup.start()

        def run_delivery() -> None:
            try:
                asyncio.run(self.delivery.run())
            except BaseException as exc:  # recorded and re-raised by stop(); the thread must not die silently
                self._delivery_error = exc
                log.exception("delivery worker stopped with an error")

        self._delivery_thread = threading.Thread(target=run_delivery, name="settlekit-delivery", daemon=True)
        self._delivery_thread.start()

    def drain(self, timeout: float = 60.0) -> bool:
        """True once every committed event is processed and no pending delivery is due (False on timeout).
        The delivery thread does the sending; this only watches the queue."""
        from settlekit.store import deliveries as delivery_store

        deadline = time.monotonic() + timeout
        self.dispatcher.drain(timeout)
        while time.monotonic() < deadline:
            if self._delivery_error is not None:
                raise ConfigurationError(f"delivery worker failed: {self._delivery_error}", code="WORKER_FAILED")
            with self.db.read() as tx:
                due = delivery_store.count_due(tx, now=self.delivery.clock())
            if due == 0:
                return True
            self.delivery.wake()
            time.sleep(0.05)
        return False

    def stop(self, timeout: float = 30.0) -> None:
        """Finish the turn and the attempts in flight, release leases, join the threads."""
        self.cleanup.stop(timeout)
        self.dispatcher.stop(timeout)
        self.delivery.stop()
        if self._delivery_thread is not None:
            self._delivery_thread.join(timeout)
        if self._queue_gauges is not None:
            unregister_queue_gauges(self._queue_gauges, self._registry)
            self._queue_gauges = None
        if self._delivery_error is not None:
            raise ConfigurationError(f"delivery worker failed: {self._delivery_error}", code="WORKER_FAILED")


def register_queue_gauges(db: Database, registry: Any = None) -> Any:
    """Register the scrape-time delivery queue gauges (rows per state, DLQ size, oldest pending age) of `db` in
    `registry` (default: the global one) and return the collector (None when that registry already has them)."""
    from prometheus_client import REGISTRY

    from settlekit.delivery.metrics import register_queue_collector

    try:
        return register_queue_collector(db, REGISTRY if registry is None else registry)
    except ValueError:  # the registry already has these gauges (another Workers of this process registered them)
        log.debug("delivery queue gauges already registered")
        return None


def unregister_queue_gauges(collector: Any, registry: Any = None) -> None:
    from prometheus_client import REGISTRY

    (REGISTRY if registry is None else registry).unregister(collector)
