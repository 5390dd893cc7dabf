"""The `settlekit` command line."""

from __future__ import annotations

import json
import logging
import sys
from pathlib import Path
from typing import Annotated, Any, NoReturn

import typer
from rich.console import Console

from settlekit.errors import DatabaseUnavailableError, SettlekitError, VerificationError
from settlekit.events.canonical import parse_json
from settlekit.events.envelope import parse_keys_file, verify_chain

app = typer.Typer(help="settlekit: hash-chained job streams, ledger, artifacts and signed webhooks.",
                  no_args_is_help=True, pretty_exceptions_enable=False)
console = Console(stderr=True, soft_wrap=True)  # one error, one line

DbOption = Annotated[str, typer.Option("--db", envvar="SETTLEKIT_DB", help="postgresql://… or sqlite:///path.db")]


def _fail(exc: SettlekitError) -> None:
    console.print(f"[red]error[/red] {exc.code}: {exc.message}")
    raise typer.Exit(code=1)


def _read_json(path: Path) -> Any:
    """A JSON file parsed with JS number semantics; exit 2 with FILE_NOT_FOUND, FILE_UNREADABLE or JSON_INVALID."""
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError as exc:
        console.print(f"[red]error[/red] FILE_NOT_FOUND: {path} does not exist")
        raise typer.Exit(code=2) from exc
    except (OSError, UnicodeDecodeError) as exc:
        console.print(f"[red]error[/red] FILE_UNREADABLE: cannot read {path}: {exc}")
        raise typer.Exit(code=2) from exc
    try:
        return parse_json(text)
    except ValueError as exc:
        console.print(f"[red]error[/red] JSON_INVALID: {path} is not valid JSON: {exc}")
        raise typer.Exit(code=2) from exc


@app.command()
def migrate(db: DbOption) -> None:
    """Create or upgrade the schema (safe to run from several processes at once)."""
    from settlekit.store.db import connect

    database = connect(db)
    try:
        applied = database.migrate()
    finally:
        database.close()
    console.print(f"applied {len(applied)} migration(s): {', '.join(applied) or 'none pending'}")


def verify_stream_file(stream: Path, keys: Path | None) -> tuple[list[Any], dict[str, str]]:
    """Load and verify a stream file; raises VerificationError at the first bad index."""
    events = _read_json(stream)
    if not isinstance(events, list):
        if isinstance(events, dict) and isinstance(events.get("events"), list):
            events = events["events"]
        else:
            raise VerificationError("stream file must be a JSON array of events", code="SCHEMA_INVALID")
    key_map = parse_keys_file(_read_json(keys)) if keys is not None else {}
    verify_chain(events, key_map)
    return events, key_map


@app.command()
def verify(
    stream: Annotated[Path, typer.Argument(help="JSON array of finalized events")],
    keys: Annotated[Path | None, typer.Option("--keys", help="keyId→PEM object or list of signers")] = None,
    artifact: Annotated[Path | None, typer.Option("--artifact", help="artifact JSON to rebuild and compare")] = None,
) -> None:
    """Verify a stream offline (hashes, chain links, signatures); exit 1 naming the first bad index."""
    try:
        events, _ = verify_stream_file(stream, keys)
    except VerificationError as exc:
        print(json.dumps({"ok": False, "index": exc.index, "code": exc.code, "reason": exc.message}))
        raise typer.Exit(code=1) from None
    except SettlekitError as exc:
        _fail(exc)
        return
    result: dict[str, Any] = {"ok": True, "events": len(events),
                              "headChainHash": events[-1]["chainHash"] if events else None}
    if artifact is not None:
        from settlekit.artifacts.verify import verify_artifact_against_stream

        report = verify_artifact_against_stream(events, _read_json(artifact))
        result.update(report)
        print(json.dumps(result))
        if not report.get("ok", False):
            raise typer.Exit(code=1)
        return
    print(json.dumps(result))


@app.command()
def export(
    db: DbOption,
    stream: Annotated[str, typer.Option("--stream", help="stream id")],
    tenant: Annotated[str, typer.Option("--tenant", envvar="SETTLEKIT_TENANT")] = "tenant_default",
    out: Annotated[Path | None, typer.Option("--out", help="file to write; default stdout")] = None,
) -> None:
    """Write a stream in the offline verifier's format (a JSON array of events)."""
    from settlekit.store.db import connect
    from settlekit.store.event_store import EventStore

    _require_existing_sqlite(db)
    database = connect(db)
    try:
        events = EventStore(database).read_stream(tenant, stream)
    finally:
        database.close()
    if not events:
        console.print(f"[red]error[/red] NOT_FOUND: stream {stream} has no events for tenant {tenant}")
        raise typer.Exit(code=1)
    text = json.dumps(events, ensure_ascii=False, indent=2) + "\n"
    if out is None:
        sys.stdout.write(text)
    else:
        out.write_text(text, encoding="utf-8")
        console.print(f"wrote {len(events)} events to {out}")


@app.command("import")
def import_stream(
    stream: Annotated[Path, typer.Argument(help="exported stream: a JSON array of finalized events")],
    db: DbOption,
    keys: Annotated[Path, typer.Option("--keys", help="list of signers {role, keyId, publicKeyPem}")],
    tenant: Annotated[str, typer.Option("--tenant", envvar="SETTLEKIT_TENANT")] = "tenant_default",
    strict: Annotated[bool, typer.Option("--strict", help="apply the rules for new input: refuse an unsigned "
                                                           "robot/operator event and lone surrogates")] = False,
) -> None:
    """Import a settld stream through the live append path, event by event (ids, hashes and signatures kept).

    Registers the keys for the tenant by role, verifies the whole file's hash chains and signatures, skips events
    already imported (a re-run resumes), stops at the first refused event. The export is recorded history: an
    unsigned robot/operator event and lone surrogates are accepted and counted (`--strict` refuses them).
    Prints {"appended", "skipped", "refused", "unsigned", "loneSurrogates"} last on stdout; exit 0 when nothing
    was refused, 1 when an event was, 2 when the import could not start or was cut off (files, keys, database).
    """
    from rich.markup import escape
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeRemainingColumn

    from settlekit.events.canonical import storable_text
    from settlekit.importer import import_events, parse_import_keys, parse_import_stream, register_signers
    from settlekit.store.db import opened
    from settlekit.store.job_streams import job_store

    def stop(exc: SettlekitError, note: str = "") -> NoReturn:
        console.print(f"[red]error[/red] {exc.code}: {escape(exc.message)}{note}")
        raise typer.Exit(code=2) from None

    try:
        events = parse_import_stream(_read_json(stream))
        signers = parse_import_keys(_read_json(keys))
    except SettlekitError as exc:
        stop(exc)
    try:
        with opened(db) as database:
            store = job_store(database)
            try:
                register_signers(store, tenant, signers)
            except SettlekitError as exc:
                stop(exc)
            show = console.is_terminal and len(events) >= 100
            done = 0

            def advance(n: int) -> None:
                nonlocal done
                done = n
                bar.update(task, completed=n)

            with Progress(TextColumn("importing"), BarColumn(), MofNCompleteColumn(), TimeRemainingColumn(),
                          console=console, transient=True, disable=not show) as bar:
                task = bar.add_task("import", total=len(events))
                try:
                    result = import_events(store, tenant, events, strict=strict, progress=advance)
                except SettlekitError as exc:
                    stop(exc, f" (stopped after event {done}; a re-run resumes)")
    except SettlekitError as exc:  # the database could not be opened or migrated
        stop(exc)
    if result.refused is not None:
        r = result.refused
        console.print(f"[red]refused[/red] event {r.index} ({escape(str(r.event_id))}): {r.code}: "
                      f"{escape(storable_text(r.message))}")
    print(storable_text(json.dumps(result.to_json(), ensure_ascii=False)))  # a refusal may quote a lone surrogate
    if result.refused is not None:
        raise typer.Exit(code=1)


def _require_existing_sqlite(url: str) -> None:
    """Commands that only read refuse a SQLite path with no file (opening it would create an empty database)."""
    if url.startswith("sqlite:///"):
        path = Path(url[len("sqlite:///"):])
        if not path.is_file():
            raise DatabaseUnavailableError(f"no SQLite database at {path} (create one with `settlekit migrate`)",
                                           code="DATABASE_NOT_FOUND", path=str(path))


contracts_app = typer.Typer(help="Contract documents (ContractDocument.v1) that jobs pin by hash.",
                            no_args_is_help=True)


@contracts_app.command("add")
def contracts_add(
    document: Annotated[Path, typer.Argument(help="ContractDocument.v1 JSON file")],
    db: DbOption,
    tenant: Annotated[str, typer.Option("--tenant", envvar="SETTLEKIT_TENANT")] = "tenant_default",
) -> None:
    """Validate and store a contract document; prints its hash (the operatorContractHash jobs pin)."""
    from settlekit.store.contracts import put_contract
    from settlekit.store.db import connect

    database = connect(db)
    try:
        print(put_contract(database, tenant, _read_json(document)))
    except SettlekitError as exc:
        _fail(exc)
    finally:
        database.close()


app.add_typer(contracts_app, name="contracts")


def _register_subcommands() -> None:
    """Attach the sub-apps of each area that is present."""
    import importlib

    for module, attr, name in (
        ("settlekit.cli.ledger", "ledger_app", "ledger"),
        ("settlekit.dispatch.cli", "consumers_app", "consumers"),
        ("settlekit.cli.artifacts", "artifacts_app", "artifacts"),
        ("settlekit.delivery.cli", "delivery_app", "deliveries"),
        ("settlekit.api.cli", "api_keys_app", "keys"),
    ):
        try:
            mod = importlib.import_module(module)
        except ModuleNotFoundError as exc:
            if exc.name == module:
                continue
            raise
        app.add_typer(getattr(mod, attr), name=name)


_register_subcommands()


def _register_receiver() -> None:
    from settlekit.delivery.cli import receive_command

    app.command("receive", help="Run the reference webhook receiver (verifies, dedupes, stores).")(receive_command)


_register_receiver()


def _graceful_server(config: Any) -> Any:
    """uvicorn's server, except that a SIGTERM/SIGINT that led to a clean shutdown ends the process with exit 0
    (uvicorn re-raises the signal after shutting down, which makes the exit status -15)."""
    import signal as signal_module
    from types import FrameType

    import uvicorn

    class Server(uvicorn.Server):
        def handle_exit(self, sig: int, frame: FrameType | None) -> None:
            if self.should_exit and sig == signal_module.SIGINT:
                self.force_exit = True
            else:
                self.should_exit = True

    return Server(config)


CleanupIntervalOption = Annotated[float | None, typer.Option(
    "--cleanup-interval", help="seconds between the retention cleanups of expired deliveries and idempotency "
    "keys; 0 turns them off (env SETTLEKIT_CLEANUP_INTERVAL, default 300)")]


@app.command()
def serve(
    db: Annotated[str | None, typer.Option("--db", envvar="SETTLEKIT_DB", help="database URL")] = None,
    host: Annotated[str | None, typer.Option("--host", envvar="SETTLEKIT_HOST")] = None,
    port: Annotated[int | None, typer.Option("--port", envvar="SETTLEKIT_PORT")] = None,
    server_key_file: Annotated[str | None, typer.Option("--server-key-file", envvar="SETTLEKIT_SERVER_KEY_FILE",
                                                        help="server Ed25519 PEM (created if missing)")] = None,
    workers: Annotated[bool, typer.Option("--workers/--no-workers", help="run the dispatcher and delivery "
                                          "worker in this process too")] = True,
    allow_loopback_webhooks: Annotated[bool, typer.Option("--allow-loopback-webhooks",
                                                          envvar="SETTLEKIT_ALLOW_LOOPBACK_WEBHOOKS")] = False,
    allow_private_webhooks: Annotated[bool, typer.Option(
        "--allow-private-webhooks", help="destinations that opt in (allowPrivateNetwork) may use private "
        "ranges [env SETTLEKIT_ALLOW_PRIVATE_WEBHOOKS]")] = False,
    allowed_webhook_network: Annotated[list[str] | None, typer.Option(
        "--allowed-webhook-network", help="CIDR destinations that opt in may reach (repeatable) "
        "[env SETTLEKIT_ALLOWED_WEBHOOK_NETWORKS, comma separated]")] = None,
    cleanup_interval: CleanupIntervalOption = None,
    proxy_headers: Annotated[bool | None, typer.Option(
        "--proxy-headers/--no-proxy-headers", help="take the client address from X-Forwarded-For when the "
        "connection comes from a trusted proxy [env SETTLEKIT_PROXY_HEADERS, default on]")] = None,
    forwarded_allow_ips: Annotated[str | None, typer.Option(
        "--forwarded-allow-ips", help="comma-separated addresses/CIDRs of the reverse proxies trusted for "
        "X-Forwarded-* ('*' trusts all) [env SETTLEKIT_FORWARDED_ALLOW_IPS, default uvicorn's: 127.0.0.1]")] = None,
) -> None:
    """Run the HTTP API (uvicorn), with the workers embedded unless --no-workers. SIGTERM shuts down gracefully."""
    import uvicorn

    from settlekit.api.app import create_app
    from settlekit.logs import configure_logging
    from settlekit.runtime import (
        Settings,
        Workers,
        load_server_signer,
        register_queue_gauges,
        unregister_queue_gauges,
        uvicorn_options,
    )
    from settlekit.store.db import connect

    settings = Settings.from_env(db_url=db, host=host, port=port, server_key_file=server_key_file,
                                 proxy_headers=proxy_headers, forwarded_allow_ips=forwarded_allow_ips,
                                 allow_loopback_webhooks=allow_loopback_webhooks or None,
                                 allow_private_webhooks=allow_private_webhooks or None,
                                 allowed_webhook_networks=tuple(allowed_webhook_network or ()) or None,
                                 cleanup_interval=cleanup_interval)
    database = connect(settings.db_url)
    database.migrate()  # before logging is configured: an unreachable database is one line on stderr
    configure_logging(settings.log_level)
    background = Workers(database, settings) if workers else None
    gauges = None
    try:
        if background is not None:
            background.start()
        else:
            gauges = register_queue_gauges(database)
        app_ = create_app(database, server_signer=load_server_signer(settings.server_key_file), settings=settings)
        # uvicorn logs through the JSON handler; the API logs one line per request itself (no access log)
        config = uvicorn.Config(app_, log_level=settings.log_level.lower(), log_config=None, access_log=False,
                                timeout_graceful_shutdown=20, **uvicorn_options(settings))
        _graceful_server(config).run()
    finally:
        if background is not None:
            background.stop()
        if gauges is not None:
            unregister_queue_gauges(gauges)
        database.close()


@app.command()
def worker(
    db: Annotated[str | None, typer.Option("--db", envvar="SETTLEKIT_DB", help="database URL")] = None,
    allow_loopback_webhooks: Annotated[bool, typer.Option("--allow-loopback-webhooks",
                                                          envvar="SETTLEKIT_ALLOW_LOOPBACK_WEBHOOKS")] = False,
    lease: Annotated[float | None, typer.Option(
        "--lease", help="delivery lease seconds; renewed while a send is in flight (env SETTLEKIT_DELIVERY_LEASE, "
        "default 10)")] = None,
    lease_renew: Annotated[float | None, typer.Option(
        "--lease-renew", help="lease renewal interval seconds (env SETTLEKIT_DELIVERY_LEASE_RENEW, default 30 percent "
        "of the lease)")] = None,
    delivery_timeout: Annotated[float | None, typer.Option(
        "--delivery-timeout", help="HTTP timeout of one attempt, seconds (env SETTLEKIT_DELIVERY_TIMEOUT, "
        "default 15)")] = None,
    max_attempts: Annotated[int | None, typer.Option(
        "--max-attempts", help="delivery attempts before the DLQ (env SETTLEKIT_DELIVERY_MAX_ATTEMPTS, "
        "default 15)")] = None,
    backoff_base: Annotated[float | None, typer.Option(
        "--backoff-base", help="first retry delay, seconds (env SETTLEKIT_DELIVERY_BACKOFF_BASE, default 2)")] = None,
    backoff_cap: Annotated[float | None, typer.Option(
        "--backoff-cap", help="longest retry delay, seconds (env SETTLEKIT_DELIVERY_BACKOFF_CAP, default "
        "3600)")] = None,
    max_claims: Annotated[int | None, typer.Option(
        "--max-claims", help="claims of one delivery without a recorded outcome (its worker crashed each time) "
        "before it is dead-lettered as crash_loop (env SETTLEKIT_DELIVERY_MAX_CLAIMS, default 5)")] = None,
    dispatch_max_attempts: Annotated[int | None, typer.Option(
        "--dispatch-max-attempts", help="handler attempts on one event before its consumer is dead "
        "(env SETTLEKIT_DISPATCH_MAX_ATTEMPTS, default 10)")] = None,
    rearm_cooldown: Annotated[float | None, typer.Option(
        "--rearm-cooldown", help="seconds before a dead consumer is re-armed (env SETTLEKIT_REARM_COOLDOWN, "
        "default 300)")] = None,
    max_rearm_count: Annotated[int | None, typer.Option(
        "--max-rearm-count", help="automatic re-arms before a dead consumer stays dead "
        "(env SETTLEKIT_MAX_REARM_COUNT, default 3)")] = None,
    metrics_port: Annotated[int | None, typer.Option(
        "--metrics-port", help="serve Prometheus /metrics on this port (0: any free port) "
        "(env SETTLEKIT_METRICS_PORT; default: not served)")] = None,
    metrics_host: Annotated[str | None, typer.Option(
        "--metrics-host", help="address of /metrics (env SETTLEKIT_METRICS_HOST, default 127.0.0.1)")] = None,
    allow_private_webhooks: Annotated[bool, typer.Option(
        "--allow-private-webhooks", help="destinations that opt in (allowPrivateNetwork) may use private "
        "ranges [env SETTLEKIT_ALLOW_PRIVATE_WEBHOOKS]")] = False,
    allowed_webhook_network: Annotated[list[str] | None, typer.Option(
        "--allowed-webhook-network", help="CIDR destinations that opt in may reach (repeatable) "
        "[env SETTLEKIT_ALLOWED_WEBHOOK_NETWORKS, comma separated]")] = None,
    cleanup_interval: CleanupIntervalOption = None,
) -> None:
    """Run the dispatcher consumers and the delivery worker until SIGTERM/SIGINT (finishes work in flight)."""
    import signal
    import threading

    from settlekit.logs import configure_logging
    from settlekit.runtime import Settings, Workers
    from settlekit.store.db import connect

    settings = Settings.from_env(
        db_url=db, allow_loopback_webhooks=allow_loopback_webhooks or None, delivery_lease=lease,
        delivery_lease_renew=lease_renew, delivery_timeout=delivery_timeout, delivery_max_attempts=max_attempts,
        delivery_backoff_base=backoff_base, delivery_backoff_cap=backoff_cap, delivery_max_claims=max_claims,
        dispatch_max_attempts=dispatch_max_attempts, rearm_cooldown=rearm_cooldown, max_rearm_count=max_rearm_count,
        metrics_port=metrics_port, metrics_host=metrics_host,
        allow_private_webhooks=allow_private_webhooks or None,
        allowed_webhook_networks=tuple(allowed_webhook_network or ()) or None,
        cleanup_interval=cleanup_interval)
    database = connect(settings.db_url)
    database.migrate()  # before logging is configured: an unreachable database is one line on stderr
    configure_logging(settings.log_level)
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


@app.command()
def demo(
    jobs: Annotated[int, typer.Option("--jobs", help="number of jobs to simulate")] = 200,
    db: Annotated[str | None, typer.Option("--db", help="database URL; default: SQLite in a temp dir")] = None,
) -> None:
    """Run the end-to-end demo on embedded SQLite (or --db)."""
    from settlekit.demo import run_demo

    code = run_demo(jobs=jobs, db_url=db)
    raise typer.Exit(code=code)


class _ConnectionErrors(logging.Handler):
    """Keeps the last connection error the PostgreSQL pool logged, so the one-line DATABASE_UNAVAILABLE message
    can say why (refused, unknown database or role, unknown host) without the pool's own log lines."""

    def __init__(self) -> None:
        super().__init__(logging.WARNING)
        self.last: str | None = None

    def emit(self, record: logging.LogRecord) -> None:
        message = record.getMessage()
        self.last = message.split(": ", 1)[-1].splitlines()[0].strip() if message else None


def main() -> None:
    errors = _ConnectionErrors()
    logging.getLogger("psycopg.pool").addHandler(errors)
    try:
        app()
    except SettlekitError as exc:
        reason = f" ({errors.last})" if exc.code == "DATABASE_UNAVAILABLE" and errors.last else ""
        console.print(f"[red]error[/red] {exc.code}: {exc.message}{reason}", highlight=False, markup=True)
        sys.exit(1)


if __name__ == "__main__":
    main()
