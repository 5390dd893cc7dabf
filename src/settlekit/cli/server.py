"""`settlekit serve` and `settlekit worker`: the long-running processes. Their flags are the settings
(`settlekit.runtime.settings`), defined once and shared."""

from __future__ import annotations

import contextlib
import ctypes
import functools
import logging
import os
import signal
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from types import FrameType
from typing import Annotated, Any

import typer

from settlekit.application.database import url_traits
from settlekit.cli.common import console, settings_flags
from settlekit.runtime.memory import settle_after_start_up

log = logging.getLogger("settlekit.server")

# the settings of the embedded workers: `worker`, and `serve` unless --no-workers
WORKER_SETTINGS = (
    "db_url", "db_direct", "db_prepared_statements", "db_unavailable_hold", "db_statement_timeout",
    "db_pool_timeout", "instance_id", "allow_loopback_webhooks",
    "allow_private_webhooks", "allowed_webhook_networks", "allow_insecure_http", "metrics_per_destination",
    "delivery_concurrency", "delivery_lease", "delivery_lease_renew", "delivery_timeout", "delivery_max_attempts",
    "delivery_backoff_base", "delivery_backoff_cap", "delivery_max_claims", "delivery_destination_concurrency",
    "delivery_tenant_concurrency", "delivery_circuit_threshold", "delivery_circuit_probe", "delivery_circuit_probe_max",
    "replay_rate", "replay_max_deliveries", "replay_max_window_hours", "replay_max_running_per_tenant",
    "destination_disable_after_failures",
    "destination_disable_after_hours", "dispatch_batch_size",
    "dispatch_max_attempts", "rearm_cooldown", "max_rearm_count", "cleanup_interval", "log_level",
)
API_SETTINGS = (
    "host", "port", "server_key_file", "proxy_headers", "forwarded_allow_ips", "max_body_bytes", "max_header_bytes",
    "max_destinations_per_tenant", "max_queued_appends", "append_cached_streams", "group_commit_window_ms",
    "max_routed_requests", "rate_limit_per_second", "rate_limit_burst", "auth_failure_rate_per_second",
    "auth_failure_burst", "operator_tenant", "feed_max_streams_per_tenant", "feed_poll_interval",
    "feed_heartbeat_interval", "settld_compat_at_root", "test_send_concurrency", "test_send_timeout",
    "console", "console_session_seconds",
)
METRICS_SETTINGS = ("metrics_host", "metrics_port")
HEALTHCHECK_TIMEOUT_SECONDS = 60  # `serve --workers N`: a process silent this long is replaced
# the flag names of earlier releases, still accepted (hidden)
OLD_WORKER_FLAGS = {
    "allowed_webhook_networks": "--allowed-webhook-network", "delivery_lease": "--lease",
    "delivery_lease_renew": "--lease-renew", "delivery_max_attempts": "--max-attempts",
    "delivery_backoff_base": "--backoff-base", "delivery_backoff_cap": "--backoff-cap",
    "delivery_max_claims": "--max-claims",
}


def _graceful_server(config: Any, on_exit: Any = None) -> Any:
    """uvicorn's server, except that a SIGTERM/SIGINT that led to a clean shutdown ends the process with exit 0
    (uvicorn re-raises the signal after shutting down, which makes the exit status -15), and that `on_exit()`
    runs at the first signal (it ends the open event streams, which would otherwise hold the shutdown)."""
    import uvicorn

    class Server(uvicorn.Server):
        def handle_exit(self, sig: int, frame: FrameType | None) -> None:
            if self.should_exit and sig == signal.SIGINT:
                self.force_exit = True
            else:
                self.should_exit = True
                if on_exit is not None:
                    on_exit()

    return Server(config)


PR_SET_PDEATHSIG = 1  # prctl(2)
PARENT_WATCH_SECONDS = 0.5  # where there is no prctl: how often an API process checks that its parent lives


def die_with_parent(parent_pid: int) -> None:
    """End this process (SIGTERM: a graceful stop, which closes its listening socket first) when `parent_pid`, the
    `serve` that started it, dies, even by SIGKILL: otherwise the API processes outlive it under pid 1, answering
    on the port a new `serve` cannot then bind. On Linux the kernel sends the signal (PR_SET_PDEATHSIG); elsewhere
    a thread watches the parent's pid. A parent that died before this ran is noticed here too."""
    if sys.platform == "linux":
        libc = ctypes.CDLL(None, use_errno=True)
        if libc.prctl(PR_SET_PDEATHSIG, signal.SIGTERM, 0, 0, 0) != 0:
            raise OSError(ctypes.get_errno(), "prctl(PR_SET_PDEATHSIG) failed")
    else:
        def watch() -> None:
            while os.getppid() == parent_pid:
                time.sleep(PARENT_WATCH_SECONDS)
            os.kill(os.getpid(), signal.SIGTERM)

        threading.Thread(target=watch, name="settlekit-parent-watch", daemon=True).start()
    if os.getppid() != parent_pid:  # the parent died before the signal was asked for
        os.kill(os.getpid(), signal.SIGTERM)


def api_process_app(flags: dict[str, Any], server_key_pem: str, parent_pid: int | None = None) -> Any:
    """The app of one API process of `serve --workers N` (a uvicorn factory, run in each child process): its own
    database pool and logging, the parent's server key, no background workers. It ends when `parent_pid` (the
    `serve` process) dies (`die_with_parent`)."""
    from settlekit.api.app import create_app
    from settlekit.application.database import connect
    from settlekit.console import console_mounts
    from settlekit.events.envelope import Signer
    from settlekit.metrics import shared_registry
    from settlekit.runtime.logging import configure_logging
    from settlekit.runtime.settings import Settings
    from settlekit.runtime.workers import register_queue_gauges

    if parent_pid is not None:
        die_with_parent(parent_pid)
    settings = Settings(**flags)
    configure_logging(settings.log_level)
    database = connect(settings.db_url, **settings.database_options())
    app = create_app(database, settings, server_signer=Signer.from_pem(server_key_pem), close_db=True,
                     mounts=console_mounts(settings))
    feed = app.state.settlekit.feed
    if feed is not None:
        _on_exit_signal(feed.close)
    exposed = shared_registry()
    if exposed is not None:  # /metrics renders every process's metrics, and the delivery queue read at scrape time
        register_queue_gauges(database, exposed)
        app.state.settlekit.exposed_registry = exposed
    settle_after_start_up()
    return app


def _on_exit_signal(action: Callable[[], None]) -> None:
    """Run `action()` at each SIGTERM/SIGINT, before what the signal did until now. In an API process of `serve
    --workers N`, uvicorn's server has installed its exit handler by the time it builds the app (which calls this):
    the open event streams then end at the signal instead of holding the shutdown until its timeout."""
    for sig in (signal.SIGTERM, signal.SIGINT):
        previous = signal.getsignal(sig)

        def handler(signum: int, frame: FrameType | None, previous: Any = previous) -> None:
            action()
            if callable(previous):
                previous(signum, frame)

        signal.signal(sig, handler)


PREPARED_STATEMENTS_OFF = (
    "prepared statements turned off: they do not survive the connection pooler of SETTLEKIT_DB (PgBouncer in "
    "transaction mode before 1.22, or without max_prepared_statements); set SETTLEKIT_DB_PREPARED_STATEMENTS=false "
    "to say so and skip this check")


def _open_database(flags: dict[str, Any], settings: Any) -> tuple[Any, dict[str, Any], Any, bool]:
    """The database of `settings`, migrated: (it, the flags and settings it was opened with, whether prepared
    statements were turned off). When they are on but a statement prepared in one transaction cannot run in a
    later one (`Database.prepared_statements_survive`: a pooler in transaction mode), the database is opened again
    with them off, and so are the API processes: writes would otherwise fail ("prepared statement _pg3_0 already
    exists") with 500s and failing dispatcher passes. The caller logs PREPARED_STATEMENTS_OFF once logging is
    set up."""
    from settlekit.application.database import connect
    from settlekit.runtime.settings import Settings

    database = connect(settings.db_url, **settings.database_options())
    turned_off = False
    try:
        if not database.prepared_statements_survive():
            database.close()
            flags = {**flags, "db_prepared_statements": False}
            settings = Settings(**flags)
            database = connect(settings.db_url, **settings.database_options())
            turned_off = True
        database.migrate()  # before logging is configured: an unreachable database is one line on stderr
    except BaseException:
        database.close()
        raise
    return database, flags, settings, turned_off


def _check_processes(processes: int, db_url: str) -> None:
    if processes < 1:
        raise typer.BadParameter("must be at least 1", param_hint="--workers")
    if processes > 1 and not url_traits(db_url).server:
        # SQLite wakes the dispatcher in-process and serializes writers per process: one API process only
        raise typer.BadParameter("several API processes need PostgreSQL; on SQLite run one (the default)",
                                 param_hint="--workers")


@settings_flags(*WORKER_SETTINGS, *API_SETTINGS, aliases=OLD_WORKER_FLAGS)
def serve(
    flags: dict[str, Any],
    processes: Annotated[int, typer.Option("--workers", min=1, help="number of API processes sharing the port "
                                           "(PostgreSQL only above 1); the background workers run once, in the "
                                           "parent process")] = 1,
    no_workers: Annotated[bool, typer.Option("--no-workers", help="do not run the dispatcher and delivery worker "
                                             "in this process (run `settlekit worker` instead)")] = False,
) -> None:
    """Run the HTTP API (uvicorn), with the workers embedded unless --no-workers. SIGTERM shuts down gracefully."""
    from settlekit.metrics import remove_stale_shared_dirs, share_across_processes, shared_dir_prefix
    from settlekit.runtime.settings import Settings

    settings = Settings(**flags)
    _check_processes(processes, settings.db_url)
    with contextlib.ExitStack() as shared:
        if processes > 1:  # one /metrics for all: the API processes' and the background workers' of this one
            remove_stale_shared_dirs(tempfile.gettempdir())  # left by a serve that was killed
            share_across_processes(shared.enter_context(tempfile.TemporaryDirectory(prefix=shared_dir_prefix())))
        _serve(flags, settings, processes, no_workers)


def _serve(flags: dict[str, Any], settings: Any, processes: int, no_workers: bool) -> None:
    from settlekit.runtime.logging import configure_logging
    from settlekit.runtime.workers import Workers, register_queue_gauges, unregister_queue_gauges

    database, flags, settings, turned_off = _open_database(flags, settings)
    configure_logging(settings.log_level)
    if turned_off:
        log.warning(PREPARED_STATEMENTS_OFF)
    background = None if no_workers else Workers(database, settings)
    gauges = None
    try:
        if background is not None:
            background.start()
        else:
            gauges = register_queue_gauges(database)
        if processes == 1:
            _serve_one(database, settings)
        else:
            _serve_many(flags, settings, processes)
    finally:
        if background is not None:
            background.stop()
        if gauges is not None:
            unregister_queue_gauges(gauges)
        database.close()


def _uvicorn_config(app: Any, settings: Any, **options: Any) -> Any:
    import uvicorn

    from settlekit.api.http_protocol import BoundedHttpToolsProtocol
    from settlekit.runtime.workers import uvicorn_options

    # uvicorn logs through the JSON handler; the API logs one line per request itself (no access log). The HTTP
    # protocol: httptools with a bound on the request head (api/http_protocol.py says why not h11)
    http: Any = functools.partial(BoundedHttpToolsProtocol, max_head_bytes=settings.max_header_bytes)
    return uvicorn.Config(app, log_level=settings.log_level.lower(), log_config=None, access_log=False,
                          timeout_graceful_shutdown=20, http=http, **uvicorn_options(settings), **options)


def _serve_one(database: Any, settings: Any) -> None:
    """The API in this process."""
    from settlekit.api.app import create_app
    from settlekit.console import console_mounts
    from settlekit.runtime.workers import load_server_signer

    app_ = create_app(database, settings, server_signer=load_server_signer(settings.server_key_file),
                      mounts=console_mounts(settings))
    feed = app_.state.settlekit.feed
    settle_after_start_up()
    _graceful_server(_uvicorn_config(app_, settings), feed.close if feed is not None else None).run()


def _serve_many(flags: dict[str, Any], settings: Any, processes: int) -> None:
    """`processes` API processes accepting on one socket bound here; SIGTERM/SIGINT stops them (each finishes
    its requests in flight) and then returns."""
    from uvicorn.supervisors import Multiprocess

    from settlekit.runtime.workers import load_server_signer

    signer = load_server_signer(settings.server_key_file)  # one key for every process (made once if missing)
    factory = functools.partial(api_process_app, flags, signer.private_key_pem(), os.getpid())
    # uvicorn pings each process every half second and replaces one that does not answer within the timeout: a
    # process busy under load answers late (its ping thread waits for the interpreter lock), so be patient
    config = _uvicorn_config(factory, settings, factory=True, workers=processes,
                             timeout_worker_healthcheck=HEALTHCHECK_TIMEOUT_SECONDS)
    sock = config.bind_socket()
    Multiprocess(config, sockets=[sock]).run()


@settings_flags(*WORKER_SETTINGS, *METRICS_SETTINGS, aliases=OLD_WORKER_FLAGS)
def worker(flags: dict[str, Any]) -> None:
    """Run the dispatcher consumers, the delivery worker and the retention cleanups until SIGTERM/SIGINT
    (finishes work in flight)."""
    import signal
    import threading

    from settlekit.runtime.logging import configure_logging
    from settlekit.runtime.settings import Settings
    from settlekit.runtime.workers import Workers

    settings = Settings(**flags)
    database, flags, settings, turned_off = _open_database(flags, settings)
    configure_logging(settings.log_level)
    if turned_off:
        log.warning(PREPARED_STATEMENTS_OFF)
    stop = threading.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: stop.set())
    background = Workers(database, settings)
    server = None
    if settings.metrics_port is not None:
        from prometheus_client import REGISTRY, start_http_server

        # the delivery queue and DLQ gauges are registered by Workers.start
        server, _ = start_http_server(settings.metrics_port, addr=settings.metrics_host, registry=REGISTRY)
        console.print(f"metrics on http://{settings.metrics_host}:{server.server_port}/metrics")
    background.start()
    settle_after_start_up()
    console.print(f"settlekit worker {settings.instance_id} running on {settings.db_url}")
    try:
        while not stop.wait(1.0):
            pass
    finally:
        background.stop()
        if server is not None:
            server.shutdown()
            server.server_close()
        database.close()
    console.print("settlekit worker stopped")
