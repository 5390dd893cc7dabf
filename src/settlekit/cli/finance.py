"""`settlekit finance …`: close a month, read a close, export a closed period, the tenant's GL mapping."""

from __future__ import annotations

import sys
from collections.abc import Callable, Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Annotated, Any, Literal

import typer

from settlekit.application.database import Database
from settlekit.cli.common import (
    DbOption,
    JsonOption,
    console,
    error_line,
    print_json,
    read_json,
    run_with_db,
    settings_flags,
)
from settlekit.errors import ConfigurationError, SettlekitError
from settlekit.events.canonical import canonical_json

finance_app = typer.Typer(help="Month close, the tenant Merkle log and journal exports.", no_args_is_help=True)
MonthOption = Annotated[str, typer.Option("--month", help="period, YYYY-MM")]
TenantArg = Annotated[str, typer.Option("--tenant", "-t", envvar="SETTLEKIT_TENANT", help="tenant id")]


def _signer(flags: dict[str, Any]) -> Any:
    from settlekit.runtime.settings import Settings
    from settlekit.runtime.workers import load_server_signer

    path = Settings(**flags).server_key_file
    if path is None:
        raise ConfigurationError("a close is signed with the server key: give --server-key-file or "
                                 "SETTLEKIT_SERVER_KEY_FILE", code="SETTINGS_INVALID")
    return load_server_signer(path)


@finance_app.command("close")
@settings_flags("server_key_file")
def close(*, month: MonthOption, tenant: Annotated[str | None, typer.Option(
              "--tenant", "-t", help="tenant id (default: every tenant with journal entries or job streams)")] = None,
          db: DbOption = None, as_json: JsonOption = False, flags: dict[str, Any]) -> None:
    """Close a month: assign its entries, grow the tenant log, sign and store the MonthClose.v1, enqueue its
    deliveries. Re-running prints the stored document (checked against a rebuild). Without --tenant every tenant
    is closed; one that cannot be (e.g. a later month already closed) is reported and the others go on (exit 1)."""
    from settlekit.application.finance import close_month, tenants_to_close

    def action(database: Database) -> tuple[list[dict[str, Any]], list[SettlekitError]]:
        signer = _signer(flags)
        tenants = [tenant] if tenant is not None else tenants_to_close(database)
        now = datetime.now(UTC)
        out, refused = [], []
        for t in tenants:
            try:
                result = close_month(database, t, month, signer, now=now)
            except SettlekitError as exc:
                if tenant is not None:
                    raise
                refused.append(exc)
                continue
            out.append({"tenantId": t, "created": result.created, "deliveries": result.deliveries,
                        "artifactHash": result.document["artifactHash"], "document": result.document})
        return out, refused

    results, refused = run_with_db(db, action)
    _print_closes(month, results, as_json)
    for exc in refused:
        console.print(error_line(exc), highlight=False)
    if refused:
        raise typer.Exit(code=1)


def _print_closes(month: str, results: list[dict[str, Any]], as_json: bool) -> None:
    if as_json:
        print_json(results)
        return
    for r in results:
        log = r["document"]["merkleLog"]
        state = "closed" if r["created"] else "already closed (identical)"
        console.print(f"{r['tenantId']} {month}: {state}; {r['document']['statement']['entries']} entries, tree "
                      f"size {log['treeSize']} root {log['rootHash'][:16]}…, {r['deliveries']} deliveries",
                      highlight=False)


@finance_app.command("show")
def show(*, month: MonthOption, tenant: TenantArg = "tenant_default", db: DbOption = None) -> None:
    """Print a stored MonthClose.v1 as canonical JSON (ready for `settlekit verify --artifact`)."""
    from settlekit.application.finance import get_close

    doc = run_with_db(db, lambda database: get_close(database, tenant, month), reading=True)
    sys.stdout.write(canonical_json(doc) + "\n")


def _progress_bar(total: int, label: str) -> Any:
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, ProgressColumn, TextColumn, TimeRemainingColumn
    from rich.text import Text

    class RowRate(ProgressColumn):
        def render(self, task: Any) -> Text:
            return Text(f"{task.speed:,.0f} rows/s" if task.speed else "", style="progress.data.speed")

    return Progress(TextColumn(label), BarColumn(), MofNCompleteColumn(), TextColumn("rows"), RowRate(),
                    TimeRemainingColumn(), console=console, transient=True,
                    disable=not console.is_terminal or total < 1000)


@finance_app.command("export")
def export(*, month: MonthOption, fmt: Annotated[Literal["journal-csv", "gl-batch"], typer.Option(
               "--format", help="journal-csv (JournalCsv.v1) or gl-batch (GlBatch.v1)")] = "journal-csv",
           tenant: TenantArg = "tenant_default", out: Annotated[Path | None, typer.Option(
               "--out", help="file to write; default stdout")] = None, db: DbOption = None) -> None:
    """Stream a closed period's journal (or GL batch) in constant memory, with a progress bar on a terminal."""
    from settlekit.application import finance as fin

    def action(database: Database) -> dict[str, Any]:
        total = fin.journal_rows(database, tenant, month)
        chunks: Callable[..., Iterator[bytes]] = fin.iter_journal if fmt == "journal-csv" else fin.iter_gl_batch
        target = out.open("wb") if out is not None else sys.stdout.buffer
        try:
            with _progress_bar(total, f"exporting {month}") as bar:
                task = bar.add_task("export", total=total)
                for chunk in chunks(database, tenant, month, lambda n: bar.update(task, completed=n)):
                    target.write(chunk)
        finally:
            if out is not None:
                target.close()
        return {"rows": total}

    result = run_with_db(db, action, reading=True)
    if out is not None:
        console.print(f"wrote {result['rows']} rows to {out}", highlight=False)


gl_app = typer.Typer(help="The tenant's chart-of-accounts mapping (GlMapping.v1) for GL batches.",
                     no_args_is_help=True)


@gl_app.command("set")
def gl_set(document: Annotated[Path, typer.Argument(help="GlMapping.v1 JSON file")], *,
           tenant: TenantArg = "tenant_default", db: DbOption = None, as_json: JsonOption = False) -> None:
    """Validate and store the tenant's mapping; prints its hash."""
    from settlekit.application.finance import put_gl_mapping

    body = read_json(document)
    digest = run_with_db(db, lambda database: put_gl_mapping(database, tenant, body), error_exit=1)
    print_json({"tenantId": tenant, "mappingHash": digest}) if as_json else print(digest)


@gl_app.command("show")
def gl_show(*, tenant: TenantArg = "tenant_default", db: DbOption = None) -> None:
    """Print the tenant's stored mapping."""
    from settlekit.application.finance import get_gl_mapping

    sys.stdout.write(canonical_json(run_with_db(db, lambda d: get_gl_mapping(d, tenant), reading=True)) + "\n")


finance_app.add_typer(gl_app, name="gl-mapping")
