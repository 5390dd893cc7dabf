"""Process wiring: settings, the server signing key, and the background workers (dispatcher consumers and the
webhook delivery worker) shared by `settlekit serve`, `settlekit worker` and the demo."""

from __future__ import annotations

import asyncio
import ipaddress
import logging
import os
import socket
import threading
import time
import uuid
import weakref
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from settlekit.errors import ConfigurationError
from settlekit.events.envelope import Signer
from settlekit.store.db import Database

log = logging.getLogger("settlekit.runtime")


def _env_bool(name: str, default: bool) -> bool:
    value = os.environ.get(name)
    if value is None or value == "":
        return default
    return value.strip().lower() in ("1", "true", "yes", "on")


def _env_num(name: str, default: Any, kind: type) -> Any:
    """`kind(os.environ[name])`, the default when unset or empty; ConfigurationError when malformed."""
    value = os.environ.get(name)
    if value is None or value.strip() == "":
        return default
    try:
        return kind(value.strip())
    except ValueError:
        raise ConfigurationError(f"{name} must be a number, not {value!r}", code="SETTINGS_INVALID",
                                 variable=name) from None


@dataclass
class Settings:
    """Process configuration. Every field has a `SETTLEKIT_*` environment variable (see README)."""

    db_url: str = "sqlite:///settlekit.db"
    host: str = "127.0.0.1"
    port: int = 8080
    server_key_file: str | None = None
    instance_id: str = field(default_factory=lambda: f"{socket.gethostname()}-{os.getpid()}-{uuid.uuid4().hex[:6]}")
    allow_loopback_webhooks: bool = False
    allow_private_webhooks: bool = False
    allow_insecure_http: bool = False
    delivery_concurrency: int = 16
    dispatch_batch_size: int = 200
    max_body_bytes: int = 1_048_576
    rate_limit_per_second: float = 50.0
    rate_limit_burst: int = 100
    auth_failure_rate_per_second: float = 1.0  # failed authentications allowed per client address
    auth_failure_burst: int = 20
    operator_tenant: str = "system"
    # behind a reverse proxy: the client address (per-address limit on invalid API keys) comes from
    # X-Forwarded-For / X-Forwarded-Proto, trusted only from these proxy addresses (uvicorn's
    # --proxy-headers / --forwarded-allow-ips; None: uvicorn's default, FORWARDED_ALLOW_IPS or 127.0.0.1)
    proxy_headers: bool = True
    forwarded_allow_ips: str | None = None
    allowed_webhook_networks: tuple[str, ...] = ()
    # delivery worker: lease (renewed every lease_renew s while sending; None = 30 % of the lease), retries
    delivery_lease: float = 10.0
    delivery_lease_renew: float | None = None
    delivery_timeout: float = 15.0
    delivery_max_attempts: int = 15
    delivery_backoff_base: float = 2.0
    delivery_backoff_cap: float = 3600.0
    delivery_max_claims: int = 5  # claims without a recorded outcome before the DLQ (crash_loop)
    # dispatcher: attempts on a failing event before the consumer is dead, automatic re-arm of dead consumers
    dispatch_max_attempts: int = 10
    rearm_cooldown: float = 300.0
    max_rearm_count: int = 3
    # `settlekit worker` serves /metrics here when a port is set
    metrics_host: str = "127.0.0.1"
    metrics_port: int | None = None
    metrics_per_destination: bool = False  # destination ids as metric labels (tenant data)
    # seconds between runs of the retention cleanups (expired deliveries, idempotency keys); 0 disables them
    cleanup_interval: float = 300.0
    log_level: str = "INFO"

    @classmethod
    def from_env(cls, **overrides: Any) -> Settings:
        env = os.environ
        settings = cls(
            db_url=env.get("SETTLEKIT_DB", cls.db_url),
            host=env.get("SETTLEKIT_HOST", cls.host),
            port=int(env.get("SETTLEKIT_PORT", cls.port)),
            server_key_file=env.get("SETTLEKIT_SERVER_KEY_FILE") or None,
            allow_loopback_webhooks=_env_bool("SETTLEKIT_ALLOW_LOOPBACK_WEBHOOKS", False),
            allow_private_webhooks=_env_bool("SETTLEKIT_ALLOW_PRIVATE_WEBHOOKS", False),
            allow_insecure_http=_env_bool("SETTLEKIT_ALLOW_INSECURE_HTTP", False),
            delivery_concurrency=int(env.get("SETTLEKIT_DELIVERY_CONCURRENCY", cls.delivery_concurrency)),
            dispatch_batch_size=int(env.get("SETTLEKIT_DISPATCH_BATCH_SIZE", cls.dispatch_batch_size)),
            max_body_bytes=int(env.get("SETTLEKIT_MAX_BODY_BYTES", cls.max_body_bytes)),
            rate_limit_per_second=float(env.get("SETTLEKIT_RATE_LIMIT_PER_SECOND", cls.rate_limit_per_second)),
            rate_limit_burst=int(env.get("SETTLEKIT_RATE_LIMIT_BURST", cls.rate_limit_burst)),
            auth_failure_rate_per_second=float(env.get("SETTLEKIT_AUTH_FAILURE_RATE_PER_SECOND",
                                                       cls.auth_failure_rate_per_second)),
            auth_failure_burst=int(env.get("SETTLEKIT_AUTH_FAILURE_BURST", cls.auth_failure_burst)),
            operator_tenant=env.get("SETTLEKIT_OPERATOR_TENANT", cls.operator_tenant),
            proxy_headers=_env_bool("SETTLEKIT_PROXY_HEADERS", cls.proxy_headers),
            forwarded_allow_ips=env.get("SETTLEKIT_FORWARDED_ALLOW_IPS") or None,
            metrics_per_destination=_env_bool("SETTLEKIT_METRICS_PER_DESTINATION", False),
            allowed_webhook_networks=tuple(n.strip() for n in env.get("SETTLEKIT_ALLOWED_WEBHOOK_NETWORKS", "")
                                           .split(",") if n.strip()),
            delivery_lease=_env_num("SETTLEKIT_DELIVERY_LEASE", cls.delivery_lease, float),
            delivery_lease_renew=_env_num("SETTLEKIT_DELIVERY_LEASE_RENEW", None, float),
            delivery_timeout=_env_num("SETTLEKIT_DELIVERY_TIMEOUT", cls.delivery_timeout, float),
            delivery_max_attempts=_env_num("SETTLEKIT_DELIVERY_MAX_ATTEMPTS", cls.delivery_max_attempts, int),
            delivery_backoff_base=_env_num("SETTLEKIT_DELIVERY_BACKOFF_BASE", cls.delivery_backoff_base, float),
            delivery_backoff_cap=_env_num("SETTLEKIT_DELIVERY_BACKOFF_CAP", cls.delivery_backoff_cap, float),
            delivery_max_claims=_env_num("SETTLEKIT_DELIVERY_MAX_CLAIMS", cls.delivery_max_claims, int),
            dispatch_max_attempts=_env_num("SETTLEKIT_DISPATCH_MAX_ATTEMPTS", cls.dispatch_max_attempts, int),
            rearm_cooldown=_env_num("SETTLEKIT_REARM_COOLDOWN", cls.rearm_cooldown, float),
            max_rearm_count=_env_num("SETTLEKIT_MAX_REARM_COUNT", cls.max_rearm_count, int),
            metrics_host=env.get("SETTLEKIT_METRICS_HOST") or cls.metrics_host,
            metrics_port=_env_num("SETTLEKIT_METRICS_PORT", None, int),
            cleanup_interval=_env_num("SETTLEKIT_CLEANUP_INTERVAL", cls.cleanup_interval, float),
            log_level=(env.get("SETTLEKIT_LOG_LEVEL") or cls.log_level).strip().upper(),
        )
        if env.get("SETTLEKIT_INSTANCE_ID"):
            settings.instance_id = env["SETTLEKIT_INSTANCE_ID"]
        for key, value in overrides.items():
            if value is not None:
                setattr(settings, key, value)
        for net in settings.allowed_webhook_networks:
            try:
                ipaddress.ip_network(net, strict=False)
            except ValueError as exc:
                raise ConfigurationError("SETTLEKIT_ALLOWED_WEBHOOK_NETWORKS holds an invalid CIDR",
                                         network=net) from exc
        if settings.cleanup_interval < 0:
            raise ConfigurationError("SETTLEKIT_CLEANUP_INTERVAL must be 0 (off) or a positive number of seconds",
                                     code="SETTINGS_INVALID", variable="SETTLEKIT_CLEANUP_INTERVAL")
        from settlekit.logs import parse_level

        settings.log_level = logging.getLevelName(parse_level(settings.log_level))
        return settings


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
    fd = os.open(file, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "w", encoding="ascii") as handle:
        handle.write(signer.private_key_pem())
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
    return WorkerConfig(
        allow_loopback=settings.allow_loopback_webhooks,
        allow_private_network=settings.allow_private_webhooks,
        per_destination_metrics=settings.metrics_per_destination,
        allowed_networks=settings.allowed_webhook_networks,
        allow_insecure_http=settings.allow_insecure_http or settings.allow_loopback_webhooks,
        idle_sleep=0.05,
        lease=timedelta(seconds=settings.delivery_lease),
        lease_renew=settings.delivery_lease_renew,
        max_claims=settings.delivery_max_claims,
        retry=retry,
        sender=SenderConfig(concurrency=settings.delivery_concurrency, timeout=settings.delivery_timeout,
                            connect_timeout=min(5.0, settings.delivery_timeout)),
    )


CLEANUP_LOCK_KEY = 0x5E77_C1EA  # PostgreSQL advisory lock: one cleanup tick at a time across processes
CLEANUP_BATCH = 10_000  # expired deliveries deleted per transaction


@dataclass
class CleanupResult:
    deliveries: int = 0
    idempotency_keys: int = 0
    skipped: bool = False  # another process held the cleanup lock: this tick did nothing


class _CleanupMetrics:
    def __init__(self, registry: Any):
        from prometheus_client import Counter

        self.deleted = Counter("settlekit_cleanup_deleted_rows", "Rows deleted by the retention cleanups",
                               ["table"], registry=registry)
        self.errors = Counter("settlekit_cleanup_errors", "Cleanup ticks that failed (logged with the error)",
                              registry=registry)


_CLEANUP_METRICS: weakref.WeakKeyDictionary[Any, _CleanupMetrics] = weakref.WeakKeyDictionary()
_CLEANUP_METRICS_LOCK = threading.Lock()


def _cleanup_metrics(registry: Any) -> _CleanupMetrics:
    with _CLEANUP_METRICS_LOCK:
        found = _CLEANUP_METRICS.get(registry)
        if found is None:
            found = _CLEANUP_METRICS[registry] = _CleanupMetrics(registry)
        return found


class CleanupScheduler:
    """Deletes rows past their retention every `interval` seconds, on a thread of its own: delivered and failed
    deliveries past `expires_at` (their attempt logs cascade) and idempotency keys past their TTL or lease.

    Safe with many worker processes on one database: the deletes are idempotent, and on PostgreSQL a
    transaction-scoped advisory lock lets one process run a tick at a time (the others skip theirs). A failed
    tick is logged with its traceback and counted (`settlekit_cleanup_errors`); the next runs on schedule."""

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
        from settlekit.store import deliveries as delivery_store
        from settlekit.store import idempotency

        now = self.clock()
        result = CleanupResult()
        for batch_no in range(self.max_batches):
            with self.db.transaction() as tx:
                if tx.dialect == "postgres" and not tx.scalar("SELECT pg_try_advisory_xact_lock(?)",
                                                              (CLEANUP_LOCK_KEY,)):
                    result.skipped = True
                    break
                deleted = delivery_store.cleanup_expired(tx, now=now, limit=self.batch)
                if batch_no == 0:
                    result.idempotency_keys = idempotency.purge_expired_in(tx, now=now)
            result.deliveries += deleted
            if deleted < self.batch:
                break
        self.metrics.deleted.labels("deliveries").inc(result.deliveries)
        self.metrics.deleted.labels("idempotency_keys").inc(result.idempotency_keys)
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
