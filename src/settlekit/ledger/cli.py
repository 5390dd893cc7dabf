"""`settlekit ledger` sub-commands (pure part)."""

from __future__ import annotations

from pathlib import Path

import typer

from settlekit.errors import SettlekitError
from settlekit.events.canonical import canonical_json, parse_json
from settlekit.ledger.stream import postings_for_stream

ledger_app = typer.Typer(help="Double-entry ledger tools.", no_args_is_help=True)


@ledger_app.callback()
def ledger() -> None:
    """Double-entry ledger tools."""


@ledger_app.command("postings")
def postings(
    events: Path = typer.Option(
        ...,
        "--events",
        help="STREAM.json: a JSON array of finalized events",
        exists=True,
        dir_okay=False,
        readable=True,
    ),
) -> None:
    """Print the journal entries of a stream as canonical JSON lines."""
    data = parse_json(events.read_bytes())
    if not isinstance(data, list):
        typer.echo("error: the events file must hold a JSON array of events", err=True)
        raise typer.Exit(2)
    try:
        entries = postings_for_stream(data)
    except SettlekitError as exc:
        typer.echo(f"error: {exc}", err=True)
        raise typer.Exit(1) from exc
    for entry in entries:
        typer.echo(canonical_json(entry))


@ledger_app.command("balances")
def balances(
    db: str = typer.Option(..., "--db", envvar="SETTLEKIT_DB", help="postgresql://… or sqlite:///path.db"),
    tenant: str | None = typer.Option(None, "--tenant", help="only this tenant"),
) -> None:
    """Print balances per tenant and account as JSON lines; the last line per tenant is its total (0)."""
    from settlekit.store import ledger as ledger_rows
    from settlekit.store.db import connect

    database = connect(db)
    try:
        by_tenant = ledger_rows.balances(database, tenant)
    finally:
        database.close()
    for tenant_id, accounts in by_tenant.items():
        for account_id, cents in accounts.items():
            typer.echo(canonical_json({"tenantId": tenant_id, "accountId": account_id, "balanceCents": cents}))
        typer.echo(canonical_json({"tenantId": tenant_id, "totalCents": sum(accounts.values())}))
