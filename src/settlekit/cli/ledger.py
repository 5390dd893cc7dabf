"""`settlekit ledger` sub-commands."""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import Any

import typer
from rich.markup import escape

from settlekit.application import ledger as timeline
from settlekit.application.database import Database
from settlekit.application.ledger import RebuildReport
from settlekit.cli.common import (
    USAGE_EXIT,
    DbOption,
    JsonOption,
    TenantOption,
    console,
    events_of,
    fail,
    print_json,
    read_json,
    run_with_db,
)
from settlekit.errors import NotFoundError, SettlekitError, ValidationError
from settlekit.events.canonical import canonical_json
from settlekit.jobs.stream_postings import posting_records
from settlekit.ledger.timeline import Axis, decode_cursor, encode_cursor, parse_instant

MAX_POSITION = 2**63 - 1

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
    data = events_of(read_json(events))
    if not isinstance(data, list) or not all(
            isinstance(e, dict) and isinstance(e.get("streamId"), str) and isinstance(e.get("type"), str)
            for e in data):
        typer.echo("error: SCHEMA_INVALID: the events file must hold a JSON array of events (objects with a"
                   " streamId and a type)", err=True)
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
    as_of: str | None = typer.Option(None, "--as-of", help="as of this instant (ISO-8601 with an offset)"),
    position: int | None = typer.Option(None, "--position", min=0, max=2**63 - 1,
                                        help="as of this event-store position"),
    party: str | None = typer.Option(None, "--party", help="this party's allocations instead of the accounts"),
) -> None:
    """Print balances per tenant and account as JSON lines; the last line per tenant is its total (0 for the
    accounts). --as-of or --position: the postings at or before that instant or position; --party: one party's."""
    from settlekit.application import ledger as ledger_rows

    axis_value = _as_of(as_of, position, party)

    def read(database: Database) -> dict[str, dict[str, int]]:
        now = ledger_rows.balances(database, tenant)
        if axis_value is None:
            return now
        return {t: timeline.balances_as_of(database, t, *axis_value, party_id=party or timeline.ACCOUNT)
                for t in now}

    by_tenant = run_with_db(db, read, reading=True)
    for tenant_id, accounts in by_tenant.items():
        for account_id, cents in accounts.items():
            typer.echo(canonical_json({"tenantId": tenant_id, "accountId": account_id, "balanceCents": cents}))
        typer.echo(canonical_json({"tenantId": tenant_id, "totalCents": sum(accounts.values())}))


def _as_of(as_of: str | None, position: int | None, party: str | None) -> tuple[Axis, int] | None:
    """The (axis, value) the options ask for; None for the current balances."""
    if as_of is not None and position is not None:
        fail(ValidationError("give --as-of or --position, not both", code="LEDGER_AS_OF_INVALID"), USAGE_EXIT)
    if as_of is not None:
        millis = parse_instant(as_of)
        if millis is None:
            fail(ValidationError(f"--as-of {as_of!r} is not an ISO-8601 instant with an offset",
                                 code="LEDGER_AS_OF_INVALID"), USAGE_EXIT)
        return "t", millis
    if position is not None or party is not None:
        return "p", MAX_POSITION if position is None else position
    return None


@ledger_app.command("history")
def history(
    account: str = typer.Argument(..., help="account id, e.g. acct_cash"),
    *,
    db: DbOption = None,
    tenant: TenantOption = "tenant_default",
    party: str | None = typer.Option(None, "--party", help="this party's allocations to the account"),
    limit: int | None = typer.Option(None, "--limit", min=1, max=10_000, help="one page of this many postings"),
    cursor: str | None = typer.Option(None, "--cursor", help="the nextCursor of the previous page"),
) -> None:
    """Print an account's postings in ledger order as JSON lines (every page, or one page with --limit, then a
    `{"nextCursor": …}` line)."""
    party_id = party or timeline.ACCOUNT
    after = None
    if cursor is not None:
        after = decode_cursor(cursor, account, party_id)
        if after is None:
            fail(ValidationError("invalid cursor", code="CURSOR_INVALID"), USAGE_EXIT)

    def read(database: Database) -> None:
        if not timeline.account_known(database, tenant, account):
            raise NotFoundError(f"no ledger account {account!r}", code="LEDGER_ACCOUNT_NOT_FOUND")
        key = after
        while True:
            page = timeline.account_postings(database, tenant, account, after=key, limit=limit or 500,
                                             party_id=party_id)
            for posting in page.postings:
                typer.echo(canonical_json(posting))
            key = page.last_key
            if limit is not None:
                more = page.more and key is not None
                typer.echo(canonical_json({"nextCursor": encode_cursor(account, party_id, key) if more and key
                                           else None}))
                return
            if not page.more:
                return

    run_with_db(db, read, reading=True)


@ledger_app.command("rebuild")
def rebuild(
    *,
    db: DbOption = None,
    tenant: str | None = typer.Option(None, "--tenant", help="only this tenant (default: every tenant)"),
    apply: bool = typer.Option(False, "--apply", help="swap the rebuilt ledger in (one transaction) when it differs"),
    as_json: JsonOption = False,
) -> None:
    """Recompute every journal entry and party allocation from the job streams into shadow tables and report any
    difference from the stored ledger (none expected). Exit 0 when there is none or --apply swapped the rebuilt
    ledger in; 1 when differences were found and left as they are."""
    from settlekit.application.ledger import rebuild as run_rebuild

    def action(database: Database) -> RebuildReport:
        with _progress_bar() as advance:
            return run_rebuild(database, tenant_id=tenant, apply=apply, progress=advance)

    report = run_with_db(db, action)
    if as_json:
        print_json(report.to_json())
    else:
        _print_rebuild(report)
    if report.differences and not report.applied:
        raise typer.Exit(1)


@contextlib.contextmanager
def _progress_bar() -> Iterator[Callable[[int, int], None]]:
    """A rich progress bar over the streams replayed (on a terminal only)."""
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeRemainingColumn

    with Progress(TextColumn("rebuilding"), BarColumn(), MofNCompleteColumn(), TimeRemainingColumn(),
                  console=console, transient=True, disable=not console.is_terminal) as bar:
        task = bar.add_task("rebuild", total=None)

        def advance(done: int, total: int) -> None:
            bar.update(task, completed=done, total=total)

        yield advance


def _print_rebuild(report: RebuildReport) -> None:
    from rich.console import Console
    from rich.table import Table

    out = Console(soft_wrap=True)
    out.print(f"{report.streams} stream(s), {report.entries} entries, {report.allocations} allocations rebuilt for "
              f"{len(report.tenants)} tenant(s): {len(report.differences)} difference(s)"
              + (", applied" if report.applied else ""), highlight=False)
    if not report.differences:
        return
    table = Table("tenant", "kind", "change", "key", "stored", "rebuilt")
    for d in report.differences:
        table.add_row(d.tenant_id, d.kind, d.change, d.key, _brief(d.stored), _brief(d.rebuilt))
    out.print(table)


def _brief(values: Mapping[str, Any] | None) -> str:
    if values is None:
        return "-"
    return escape(", ".join(f"{k}={str(v)[:60]}" for k, v in values.items()))
