"""`settlekit deliveries …` (destinations, deliveries, requeue, worker, secrets) and `settlekit receive`.

Secrets are write-only: commands take a secret file (its value is stored in the database), a reference
(`secret:<id>`/`env:`) or generate a secret (stored, and written to a 0600 file whose path only is printed).
`deliveries secrets migrate` imports legacy `file:` references.
"""

from __future__ import annotations

import asyncio
import os
import signal
import threading
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.console import Console
from rich.table import Table

from settlekit.api.auth import check_tenant_id
from settlekit.application import destinations
from settlekit.application.database import Database
from settlekit.cli.common import DbOption, JsonOption, TenantOption, fail, print_json, run_with_db, settings_flags
from settlekit.errors import SettlekitError
from settlekit.runtime.settings import Settings

delivery_app = typer.Typer(help="Webhook delivery tools.", no_args_is_help=True)
destinations_app = typer.Typer(help="Webhook destinations of a tenant.", no_args_is_help=True)
delivery_app.add_typer(destinations_app, name="destinations")
_err = Console(stderr=True, soft_wrap=True)

LoopbackOption = Annotated[bool, typer.Option("--allow-loopback-webhooks",
                                               help="allow 127.0.0.0/8 and ::1 (local development only)")]
OldLoopbackOption = Annotated[bool, typer.Option("--allow-loopback", hidden=True)]  # the earlier name
InsecureOption = Annotated[
    bool, typer.Option("--allow-insecure-http", help="allow plain http:// URLs (development only)")
]
NetworksOption = Annotated[list[str] | None, typer.Option(
    "--allowed-webhook-networks", help="CIDR exempt from the private-range check (repeatable)")]
OldNetworksOption = Annotated[list[str] | None, typer.Option("--allow-network", hidden=True)]  # the earlier name
SecretsDirOption = Annotated[Path | None, typer.Option(
    "--secrets-dir", file_okay=False, help="directory of webhook secret files [env SETTLEKIT_SECRETS_DIR, "
    "default secrets]")]
SecretRefOption = Annotated[
    str | None, typer.Option("--secret-ref", help="secret:<id> of this tenant, or env:NAME (with "
                             "--allow-env-secrets)")
]
SecretFileOption = Annotated[
    Path | None, typer.Option("--secret-file", dir_okay=False, help="file holding the secret: its value is "
                              "stored in the database (the file is not kept referenced)")
]
GenerateSecretOption = Annotated[
    bool, typer.Option("--generate-secret", help="create a new whsec_ secret (stored in the database, and "
                       "written to a 0600 file in --secrets-dir for the receiver)")
]
OldSecretDirOption = Annotated[Path | None, typer.Option("--secret-dir", hidden=True)]  # the earlier name
SigningOption = Annotated[str, typer.Option("--signing", help="standard | settld_legacy | both")]
ArtifactTypesOption = Annotated[
    list[str] | None, typer.Option("--type", help="artifact type to deliver (repeatable; default all)")
]
OrderingOption = Annotated[str, typer.Option("--ordering", help="best_effort | strict_scope")]
AllowPrivateOption = Annotated[
    bool, typer.Option("--allow-private-network", help="this destination may be on a private network (the "
                       "operator running this command decides for the deployment)")
]
ReplaceOption = Annotated[bool, typer.Option("--replace", help="overwrite an existing destination")]
AllowEnvSecretsOption = Annotated[bool, typer.Option("--allow-env-secrets", help="accept env: refs")]


def _policy(loopback: bool, insecure: bool, networks: list[str] | None, env_secrets: bool = False,
            private: bool = False) -> destinations.DestinationPolicy:
    return destinations.DestinationPolicy(
        allow_insecure_http=insecure,
        allow_loopback=loopback,
        allow_private_network=private,
        allowed_networks=tuple(networks or ()),
        allow_env_secrets=env_secrets,
    )


def _parse_since(text: str) -> datetime:
    """An ISO-8601 time with a zone (`Z` accepted); naive times are refused."""
    try:
        when = datetime.fromisoformat(text.strip().replace("Z", "+00:00").replace("z", "+00:00"))
    except ValueError as exc:
        raise typer.BadParameter(f"--since must be an ISO-8601 time, e.g. 2026-01-02T00:00:00Z: {exc}") from exc
    if when.tzinfo is None:
        raise typer.BadParameter("--since needs a time zone, e.g. 2026-01-02T00:00:00Z")
    try:
        return when.astimezone(UTC)
    except OverflowError as exc:
        raise typer.BadParameter("--since must lie within the years 1 to 9999 in UTC") from exc


def _table(rows: list[dict[str, Any]], columns: list[str]) -> None:
    table = Table()
    for c in columns:
        table.add_column(c)
    for r in rows:
        table.add_row(*("—" if r.get(c) is None else str(r.get(c)) for c in columns))
    Console().print(table)


def _write_secret(secret_dir: Path, tenant: str, destination_id: str) -> Path:
    # the file is named after both: each must be an id (no path separator, no `..`) before anything is written
    check_tenant_id(tenant)
    destinations.check_destination_id(destination_id)
    secret_dir.mkdir(parents=True, exist_ok=True)
    path = (secret_dir / f"{tenant}.{destination_id}.whsec").resolve()
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "w", encoding="utf-8") as f:
        f.write(destinations.generate_secret() + "\n")
    return path


@destinations_app.command("add")
def destinations_add(
    *,
    db: DbOption = None,
    tenant: TenantOption,
    destination_id: Annotated[str, typer.Option("--id", help="destination id ([A-Za-z0-9._-])")],
    url: Annotated[str, typer.Option("--url", help="https:// endpoint")],
    secret_ref: SecretRefOption = None,
    secret_file: SecretFileOption = None,
    generate: GenerateSecretOption = False,
    secrets_dir: SecretsDirOption = None,
    old_secret_dir: OldSecretDirOption = None,
    signing: SigningOption = "standard",
    types: ArtifactTypesOption = None,
    ordering: OrderingOption = "best_effort",
    allow_private: AllowPrivateOption = False,
    replace: ReplaceOption = False,
    allow_loopback: LoopbackOption = False,
    old_allow_loopback: OldLoopbackOption = False,
    allow_insecure_http: InsecureOption = False,
    allow_network: NetworksOption = None,
    old_allow_network: OldNetworksOption = None,
    allow_env_secrets: AllowEnvSecretsOption = False,
    as_json: JsonOption = False,
) -> None:
    """Add a destination (SSRF-checked, secret reference checked). Secrets are never printed."""
    secret = _NewSecret.from_options(secret_ref, secret_file, generate, secrets_dir or old_secret_dir)
    allow_loopback = allow_loopback or old_allow_loopback
    allow_network = [*(allow_network or ()), *(old_allow_network or ())]

    def action(database: Database) -> dict[str, Any]:
        ref = secret_ref or ""
        value = secret.value(tenant, destination_id)
        try:
            dest = destinations.add_destination(
                database, tenant, destination_id, url=url, secret_ref=ref, signing=signing, artifact_types=types,
                ordering=ordering, allow_private_network=allow_private,
                policy=_policy(allow_loopback, allow_insecure_http, allow_network, allow_env_secrets,
                               private=allow_private),
                replace=replace, actor="cli", secret_value=value)
        except BaseException:
            secret.discard()
            raise
        return dest.to_json()

    body = run_with_db(db, action)
    _print_saved(body, tenant, destination_id, as_json, secret.written)


@dataclass
class _NewSecret:
    """Where the secret of `destinations add` comes from. A secret written for --generate-secret is removed
    again when saving the destination fails."""

    secret_file: Path | None
    generate: bool
    secret_dir: Path
    written: Path | None = None

    @classmethod
    def from_options(cls, secret_ref: str | None, secret_file: Path | None, generate: bool,
                     secrets_dir: Path | None) -> _NewSecret:
        """Exactly one source must be given (typer.BadParameter otherwise)."""
        given = sum(x is not None and x is not False for x in (secret_ref, secret_file, generate or None))
        if given != 1:
            raise typer.BadParameter("give exactly one of --secret-ref, --secret-file, --generate-secret")
        return cls(secret_file, generate, Settings(secrets_dir=secrets_dir).secrets_dir)

    def value(self, tenant: str, destination_id: str) -> str | None:
        """The secret value to store (None for a reference); generates and writes a new one if asked."""
        value: str | None = None
        if self.secret_file is not None:  # imported into the database: workers never read files
            value = self.secret_file.read_text(encoding="utf-8").strip()
        if self.generate:
            self.written = _write_secret(self.secret_dir, tenant, destination_id)
            value = self.written.read_text(encoding="utf-8").strip()
        return value

    def discard(self) -> None:
        """Remove the generated secret file, if one was written."""
        if self.written is not None:
            self.written.unlink(missing_ok=True)
            self.written = None


def _print_saved(body: dict[str, Any], tenant: str, destination_id: str, as_json: bool,
                 generated: Path | None) -> None:
    if as_json:
        print_json(body)
    else:
        typer.echo(f"destination {tenant}/{destination_id} saved ({body['status']})")
    if generated is not None:
        _err.print(f"secret written to {generated} (mode 0600); give it to the receiver")


@destinations_app.command("list")
def destinations_list(*, db: DbOption = None, tenant: TenantOption, as_json: JsonOption = False) -> None:
    """List a tenant's destinations (secret references only, inline secrets redacted)."""
    rows = [d.to_json() for d in run_with_db(db, lambda database: destinations.list_destinations(database, tenant),
                                             reading=True)]
    if as_json:
        print_json(rows)
        return
    _table(rows, ["destination_id", "url", "status", "disabled_reason", "signing", "ordering",
                  "artifact_types", "secret_ref"])


@destinations_app.command("disable")
def destinations_disable(
    *,
    db: DbOption = None,
    tenant: TenantOption,
    destination_id: Annotated[str, typer.Option("--id", help="destination id")],
    reason: Annotated[str, typer.Option("--reason", help="recorded as disabled_reason")] = "operator",
) -> None:
    """Stop delivering to a destination; its pending deliveries wait."""
    run_with_db(db, lambda database: destinations.disable_destination(database, tenant, destination_id, reason=reason,
                                                           actor="cli"))
    typer.echo(f"destination {tenant}/{destination_id} disabled ({reason})")


@destinations_app.command("enable")
def destinations_enable(
    *,
    db: DbOption = None,
    tenant: TenantOption,
    destination_id: Annotated[str, typer.Option("--id", help="destination id")],
    allow_loopback: LoopbackOption = False,
    old_allow_loopback: OldLoopbackOption = False,
    allow_insecure_http: InsecureOption = False,
    allow_network: NetworksOption = None,
    old_allow_network: OldNetworksOption = None,
    backfill: Annotated[bool, typer.Option("--backfill", help="also create the deliveries of the artifacts "
                                           "built while it was disabled")] = False,
) -> None:
    """Re-activate a destination (the SSRF guard runs again) and offer to backfill what it missed."""
    pol = _policy(allow_loopback or old_allow_loopback, allow_insecure_http,
                  [*(allow_network or ()), *(old_allow_network or ())])
    _, report = run_with_db(db, lambda database: destinations.enable_destination_with_backfill(
        database, tenant, destination_id, policy=pol, actor="cli", backfill=backfill))
    typer.echo(f"destination {tenant}/{destination_id} enabled")
    if report.since is None:
        return
    since = report.to_json()["since"]
    if backfill:
        typer.echo(f"backfilled since {since}: {report.created} deliveries created, {report.requeued} requeued")
    elif report.missing:
        typer.echo(f"{report.missing} artifacts built since it was disabled ({since}) have no delivery to it; "
                   f"deliver them with: settlekit deliveries requeue --tenant {tenant} "
                   f"--destination-id {destination_id} --since {since}")


@delivery_app.command("list")
def deliveries_list(
    *,
    db: DbOption = None,
    tenant: TenantOption,
    state: Annotated[str | None, typer.Option("--state", help="pending | delivered | failed")] = None,
    destination_id: Annotated[str | None, typer.Option("--destination-id")] = None,
    limit: Annotated[int, typer.Option("--limit")] = 100,
    after_id: Annotated[int | None, typer.Option("--after-id", help="page after this delivery id")] = None,
    as_json: JsonOption = False,
) -> None:
    """List a tenant's deliveries."""
    rows = [
        d.to_json()
        for d in run_with_db(
            db,
            lambda database: destinations.list_deliveries(
                database, tenant, state=state, destination_id=destination_id, limit=limit, after_id=after_id
            ),
            reading=True,
        )
    ]
    if as_json:
        print_json(rows)
        return
    _table(rows, ["id", "destination_id", "artifact_type", "artifact_id", "state", "attempts", "last_status",
                  "last_error", "next_attempt_at"])


@delivery_app.command("requeue")
def deliveries_requeue(
    *,
    db: DbOption = None,
    tenant: TenantOption,
    delivery_id: Annotated[int | None, typer.Option("--delivery-id", help="requeue one failed delivery")] = None,
    destination_id: Annotated[str | None, typer.Option("--destination-id")] = None,
    all_failed: Annotated[
        bool, typer.Option("--all", help="with --destination-id: every failed delivery of it")
    ] = False,
    since: Annotated[
        str | None,
        typer.Option("--since", help="ISO-8601 time: create the deliveries missing for the artifacts built since "
                      "then (for --destination-id, or every active destination) and requeue those failed by a 410"),
    ] = None,
) -> None:
    """Requeue failed deliveries (failed → pending, attempts reset, same webhook-id), or with --since backfill
    the deliveries missing since a time (idempotent)."""
    if since is not None:
        if delivery_id is not None or all_failed:
            raise typer.BadParameter("--since goes with an optional --destination-id only")
        when = _parse_since(since)
        report = run_with_db(db, lambda database: destinations.backfill_deliveries(
            database, tenant, since=when, destination_id=destination_id, actor="cli"))
        typer.echo(f"backfilled since {report.to_json()['since']}: {report.created} deliveries created, "
                   f"{report.requeued} requeued")
        return
    if (delivery_id is None) == (destination_id is None) or (destination_id is not None and not all_failed):
        raise typer.BadParameter("give --delivery-id ID, or --destination-id ID --all, or --since TIME")
    if delivery_id is not None:
        did = delivery_id
        n = run_with_db(db, lambda database: destinations.requeue_delivery(database, tenant, did, actor="cli"))
    else:
        dst = destination_id
        assert dst is not None
        n = run_with_db(db, lambda database: destinations.requeue_destination(database, tenant, dst, actor="cli"))
    typer.echo(f"requeued {n} deliver{'y' if n == 1 else 'ies'}")


@delivery_app.command("replay")
def deliveries_replay(
    destination_id: Annotated[str, typer.Argument(help="the destination")],
    *,
    db: DbOption = None,
    tenant: TenantOption,
    since: Annotated[str, typer.Option("--since", help="ISO-8601 time: deliveries created at or after it")],
    until: Annotated[str | None, typer.Option("--until", help="ISO-8601 time: created before it (default: now)")]
    = None,
    as_json: JsonOption = False,
) -> None:
    """Start a replay: every delivered or failed delivery of a destination created in [since, until) is sent again
    (new attempts, the same webhook-id) by the workers, at `replay_rate` per second (the first ones at once);
    pending ones are left as they are. Its progress: `GET /v1/destinations/{id}/replays/{replayId}`."""
    from settlekit.application.destinations import replays

    start, end = _parse_since(since), (_parse_since(until) if until is not None else None)
    policy = Settings().replay_policy()

    def create(database: Database) -> dict[str, Any]:
        now = datetime.now(UTC)
        window = destinations.window(start, end, now)
        with database.transaction() as tx:
            row, pending = replays.create(tx, tenant, destination_id, since=window[0], until=window[1],
                                          policy=policy, actor="cli", now=now)
        return {**replays.to_json(row), "alreadyPending": pending}

    report = run_with_db(db, create)
    if as_json:
        print_json(report)
        return
    typer.echo(f"replay {report['replayId']} of {destination_id}: {report['total']} deliveries to send again, "
               f"{report['replayed']} requeued so far ({report['alreadyPending']} still pending)")


@delivery_app.command("test")
@settings_flags("db_url", "allow_loopback_webhooks", "allow_insecure_http", "allowed_webhook_networks",
                "allow_private_webhooks", "delivery_timeout")
def deliveries_test(
    flags: dict[str, Any],
    destination_id: Annotated[str, typer.Argument(help="the destination")],
    tenant: TenantOption,
    as_json: JsonOption = False,
) -> None:
    """Send one signed test message (type settlekit.test) to a destination now and print how it went; exit 1
    when it was not answered with a 2xx."""
    settings = Settings(**flags)
    policy = destinations.DestinationPolicy.from_settings(settings)
    sender = destinations.config_for_test_send(settings.delivery_timeout)
    sent = run_with_db(settings.db_url, lambda database: asyncio.run(
        destinations.send_test(database, tenant, destination_id, policy=policy, sender=sender)), reading=True)
    body = sent.to_json()
    if as_json:
        print_json(body)
    else:
        typer.echo(f"test {body['webhookId']} to {destination_id}: "
                   + (f"HTTP {body['httpStatus']}" if body["httpStatus"] is not None else str(body["error"]))
                   + f" in {body['durationMs']:.0f} ms")
    if not body["ok"]:
        raise typer.Exit(1)


@delivery_app.command("stats")
def deliveries_stats(
    destination_id: Annotated[str, typer.Argument(help="the destination")],
    *,
    db: DbOption = None,
    tenant: TenantOption,
    since: Annotated[str | None, typer.Option("--since", help="ISO-8601 window start (default: 24 h ago)")] = None,
    until: Annotated[str | None, typer.Option("--until", help="ISO-8601 window end (default: now)")] = None,
    as_json: JsonOption = False,
) -> None:
    """A destination's endpoint statistics over a window: attempts, success rate, latency percentiles, the last
    error, deliveries per state and its current failure streak."""

    start = _parse_since(since) if since is not None else None
    end = _parse_since(until) if until is not None else None
    stats = run_with_db(db, lambda database: destinations.destination_stats(database, tenant, destination_id,
                                                                            since=start, until=end), reading=True)
    if as_json:
        print_json(stats)
        return
    rate = stats["successRate"]
    latency = stats["latencyMs"]
    reason = f": {stats['disabledReason']}" if stats["disabledReason"] else ""
    typer.echo(f"{destination_id} ({stats['status']}{reason}) {stats['since']} .. {stats['until']}")
    typer.echo(f"attempts {stats['attempts']['total']} ({stats['attempts']['failed']} failed), success rate "
               f"{'-' if rate is None else f'{rate:.1%}'}, latency ms p50 {latency['p50']} p90 {latency['p90']} "
               f"p99 {latency['p99']}")
    typer.echo(f"deliveries {stats['deliveries']}, failures in a row {stats['consecutiveFailures']}"
               + (f" since {stats['failingSince']}" if stats["failingSince"] else ""))
    if stats["lastError"]:
        typer.echo(f"last error {stats['lastError']}")


@delivery_app.command("run")
@settings_flags("db_url", "allow_loopback_webhooks", "allow_insecure_http", "allowed_webhook_networks",
                "allow_private_webhooks", "log_level", "destination_disable_after_failures",
                "destination_disable_after_hours", "delivery_destination_concurrency", "delivery_tenant_concurrency",
                "delivery_circuit_threshold", "delivery_circuit_probe", "delivery_circuit_probe_max", "replay_rate",
                "delivery_max_attempts", "delivery_backoff_base", "delivery_backoff_cap", "metrics_per_destination",
                aliases={"allow_loopback_webhooks": "--allow-loopback", "allowed_webhook_networks": "--allow-network"})
def deliveries_run(
    flags: dict[str, Any],
    concurrency: Annotated[int, typer.Option("--concurrency", help="requests in flight")] = 64,
    batch: Annotated[int, typer.Option("--batch", help="deliveries claimed at most at once")] = 64,
    idle_sleep: Annotated[float, typer.Option("--idle-sleep", help="poll interval when idle (s)")] = 0.2,
    lease: Annotated[float, typer.Option("--lease", help="lease seconds (renewed while a send is in flight)")] = 10.0,
    lease_renew: Annotated[float | None, typer.Option("--lease-renew", help="renewal interval seconds "
                                                      "(default 30 % of the lease)")] = None,
    timeout: Annotated[float, typer.Option("--timeout", help="HTTP timeout seconds")] = 15.0,
    max_claims: Annotated[int, typer.Option("--max-claims", help="claims without a recorded outcome before a "
                                            "delivery is dead-lettered (crash_loop)")] = 5,
    allow_env_secrets: Annotated[bool, typer.Option("--allow-env-secrets", help="accept env: refs")] = False,
) -> None:
    """Run a delivery worker for all tenants until SIGINT/SIGTERM (then finishes in-flight attempts)."""
    from settlekit.runtime.logging import configure_logging
    from settlekit.runtime.workers import delivery_run_config, standalone_delivery_worker

    try:
        settings = Settings(**flags)
        config = delivery_run_config(settings, concurrency=concurrency, batch=batch, idle_sleep=idle_sleep,
                                     lease=lease, lease_renew=lease_renew, timeout=timeout, max_claims=max_claims)
    except SettlekitError as exc:
        fail(exc)

    async def main(database: Database) -> None:
        async with standalone_delivery_worker(database, config, allow_env_secrets=allow_env_secrets) as worker:
            loop = asyncio.get_running_loop()
            for sig in (signal.SIGINT, signal.SIGTERM):
                loop.add_signal_handler(sig, worker.stop)
            _err.print(f"delivery worker {worker.worker_id} running")
            await worker.run()
            _err.print("delivery worker stopped")

    configure_logging(settings.log_level)
    run_with_db(settings.db_url, lambda database: asyncio.run(main(database)))


secrets_app = typer.Typer(help="Webhook secrets kept in the database.", no_args_is_help=True)
delivery_app.add_typer(secrets_app, name="secrets")


@secrets_app.command("migrate")
def secrets_migrate(
    *,
    db: DbOption = None,
    secrets_dir: SecretsDirOption = None,
    as_json: JsonOption = False,
) -> None:
    """Import legacy file: secret references into the database (per tenant) and rewrite them; report what was
    migrated and what was refused (exit 1 when anything was refused). Only files inside the secrets directory,
    in the destination's own tenant area, are imported."""
    root = Settings(secrets_dir=secrets_dir).secrets_dir
    report = run_with_db(db, lambda database: destinations.migrate_file_refs(database, root, now=datetime.now(UTC)))
    if as_json:
        print_json(report.to_json())
    else:
        for o in report.migrated:
            typer.echo(f"migrated {o.tenant_id}/{o.destination_id} {o.field}: {o.path}")
        for o in report.refused:
            typer.echo(f"refused  {o.tenant_id}/{o.destination_id} {o.field}: {o.path} ({o.reason})")
        for t, d in report.enabled:
            typer.echo(f"enabled  {t}/{d} again")
        typer.echo(f"{len(report.migrated)} migrated, {len(report.refused)} refused, {len(report.enabled)} "
                   f"destinations enabled again, {report.requeued} deliveries requeued")
    if report.refused:
        raise typer.Exit(1)


@delivery_app.callback()
def _delivery_group() -> None:
    """Webhook delivery tools."""


def _load_secrets(secret: list[str] | None, secret_file: Path | None) -> list[str]:
    secrets = list(secret or [])
    if secret_file is not None:
        secrets += [ln.strip() for ln in secret_file.read_text(encoding="utf-8").splitlines() if ln.strip()]
    if not secrets:
        raise typer.BadParameter("give --secret (repeatable), SETTLEKIT_WEBHOOK_SECRET or --secret-file")
    return secrets


def receive_command(
    port: int = typer.Option(8787, "--port", "-p", help="TCP port (0 = any free port)."),
    host: str = typer.Option("127.0.0.1", "--host", help="Interface to listen on."),
    secret: list[str] | None = typer.Option(
        None,
        "--secret",
        "-s",
        envvar="SETTLEKIT_WEBHOOK_SECRET",
        help="whsec_ secret; repeat for rotation (any one may match).",
    ),
    secret_file: Path | None = typer.Option(
        None, "--secret-file", exists=True, dir_okay=False, help="File with one secret per line."
    ),
    out: Path | None = typer.Option(None, "--out", "-o", help="Directory to store <artifactId>.json files (an id that"
                                     " is not a plain file name: a readable prefix, ~ and 16 hex digits of its"
                                     " sha256)."),
    tolerance: int = typer.Option(300, "--tolerance", help="Allowed timestamp skew in seconds."),
    legacy: bool = typer.Option(False, "--accept-legacy", help="Also accept settld x-proxy-* signatures."),
    no_artifact_check: bool = typer.Option(
        False, "--no-artifact-check", help="Skip artifactHash and settlement-total checks."
    ),
) -> None:
    """Receive signed artifact webhooks: verify, dedupe by webhook-id, store each artifact once."""
    from settlekit.runtime.logging import configure_logging
    from settlekit.runtime.workers import run_receiver

    configure_logging(Settings().log_level)
    secrets = _load_secrets(secret, secret_file)
    stopping = threading.Event()
    # SIGINT/SIGTERM only set a flag: the serving thread is stopped by run_receiver, never interrupted mid-request.
    for signum in (signal.SIGINT, signal.SIGTERM):
        signal.signal(signum, lambda *_: stopping.set())
    run_receiver(stopping, lambda line: typer.echo(line, err=True), secrets=secrets, host=host, port=port,
                 out_dir=out, tolerance_seconds=tolerance, verify_artifact_body=not no_artifact_check,
                 accept_legacy=legacy)


delivery_app.command("receive")(receive_command)
