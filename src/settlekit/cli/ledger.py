"""`settlekit ledger` sub-commands."""

from __future__ import annotations

from pathlib import Path

import typer

from settlekit.cli.common import DbOption, run_with_db
from settlekit.errors import SettlekitError
from settlekit.events.canonical import canonical_json, parse_json
from settlekit.jobs.stream_postings import posting_records

ledger_app = typer.Typer(help="Double-entry ledger tools.", no_args_is_help=True)


@ledger_app.callback()
def ledger() -> None:
    """Double-entry ledger tools."""


@ledger_app.command("postings")
def postings(
    events: Path = typer.Option(
        ...,
        "--events",
        help="STREAM.json: a JSON array of finalized events (or an object with an `events` array)",
        exists=True,
        dir_okay=False,
        readable=True,
    ),
    strict: bool = typer.Option(False, "--strict", help="exit 1 when any posting error was reported"),
) -> None:
    """Print one canonical JSON line per journal entry `{eventId, eventType, entry}` and per posting error
    `{eventId, eventType, error: {code, message}}`, in event order. Every event is evaluated; posting errors
    do not stop the run (exit 0) unless --strict. An event the job reducer refuses exits 1."""
    data = parse_json(events.read_bytes())
    if isinstance(data, dict) and isinstance(data.get("events"), list):
        data = data["events"]
    if not isinstance(data, list):
        typer.echo("error: the events file must hold a JSON array of events", err=True)
        raise typer.Exit(2)
    try:
        records = posting_records(data)
    except SettlekitError as exc:
        typer.echo(f"error: {exc}", err=True)
        raise typer.Exit(1) from exc
    errors = 0
    for record in records:
        if "error" in record:
            errors += 1
        typer.echo(canonical_json(record))
    if strict and errors:
        typer.echo(f"error: {errors} posting error(s)", err=True)
        raise typer.Exit(1)


@ledger_app.command("balances")
def balances(
    *,
    db: DbOption = None,
    tenant: str | None = typer.Option(None, "--tenant", help="only this tenant"),
) -> None:
    """Print balances per tenant and account as JSON lines; the last line per tenant is its total (0)."""
    from settlekit.store import ledger as ledger_rows

    by_tenant = run_with_db(db, lambda database: ledger_rows.balances(database, tenant), reading=True)
    for tenant_id, accounts in by_tenant.items():
        for account_id, cents in accounts.items():
            typer.echo(canonical_json({"tenantId": tenant_id, "accountId": account_id, "balanceCents": cents}))
        typer.echo(canonical_json({"tenantId": tenant_id, "totalCents": sum(accounts.values())}))
