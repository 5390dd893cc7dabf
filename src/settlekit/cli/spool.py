"""`settlekit spool`: a client executor's offline spool file. `status` per stream (pending, sent, blocked with the
API's reason), `flush` (one pass to the API now), `export` (every spooled event as JSON lines), `prune` (forget
the events the API has held for a while) and `discard` (give up the waiting events of a blocked stream). The
spool file is the client's, not the server's database."""

from __future__ import annotations

import json
import sys
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Annotated, Any

import typer

from settlekit.cli.common import JsonOption, console, fail, print_json
from settlekit.client import Client
from settlekit.client.errors import SpoolError
from settlekit.client.executor import discard_blocked
from settlekit.client.flusher import Flusher
from settlekit.client.spool import Spool
from settlekit.errors import SettlekitError

spool_app = typer.Typer(help="A client executor's offline spool: status, flush, export, prune, discard.",
                        no_args_is_help=True)

SpoolOption = Annotated[Path, typer.Option("--spool", envvar="SETTLEKIT_SPOOL",
                                           help="the spool file [env SETTLEKIT_SPOOL]")]
UrlOption = Annotated[str, typer.Option("--url", envvar="SETTLEKIT_URL",
                                        help="the API's base URL [env SETTLEKIT_URL]")]
KeyOption = Annotated[str, typer.Option("--api-key", envvar="SETTLEKIT_API_KEY",
                                        help="an API key with jobs:read and jobs:write [env SETTLEKIT_API_KEY]")]


@spool_app.callback()
def spool() -> None:
    """A client executor's offline spool."""


def _open(path: Path) -> Spool:
    if not path.is_file():
        fail(SpoolError(f"no spool file at {path}", path=str(path)))
    try:
        return Spool(path)
    except SettlekitError as exc:
        fail(exc)


@spool_app.command("status")
def status(*, spool_path: SpoolOption, as_json: JsonOption = False) -> None:
    """Per stream: pending and sent events, and whether it is blocked (with the API's code and message)."""
    with _open(spool_path) as opened:
        rows = [s.to_json() for s in opened.status()]
    if as_json:
        print_json({"streams": rows})
        return
    for row in rows:
        blocked = row["blocked"]
        why = f"\t{blocked['code']}: {blocked['message']}" if blocked else ""
        typer.echo(f"{row['streamId']}\t{row['state']}\tpending={row['pending']}\tsent={row['sent']}{why}")


@spool_app.command("flush")
def flush(*, spool_path: SpoolOption, url: UrlOption, api_key: KeyOption, as_json: JsonOption = False) -> None:
    """Send every stream's waiting events now (one pass). Exit 1 when a stream is blocked or the API cannot be
    reached (the events stay in the spool)."""
    with _open(spool_path) as opened, Client(url, api_key) as api:
        report = Flusher(opened, api).flush()
    out: dict[str, Any] = {"sent": report.sent, "blocked": {s: str(e) for s, e in report.blocked.items()},
                           "error": str(report.error) if report.error else None}
    if as_json:
        print_json(out)
    else:
        typer.echo(f"sent {report.total_sent} event(s)")
        for stream_id, error in report.blocked.items():
            console.print(f"[red]blocked[/red] {stream_id}: {error}", highlight=False)
    if report.error is not None:
        fail(report.error)
    if report.blocked:
        raise typer.Exit(code=1)


@spool_app.command("export")
def export(*, spool_path: SpoolOption,
           stream: Annotated[str | None, typer.Option("--stream", help="only this stream")] = None,
           out: Annotated[Path | None, typer.Option("--out", help="write here instead of stdout")] = None) -> None:
    """Every spooled event in spool order as JSON lines: {seq, streamId, state, idempotencyKey, spooledAt,
    sentAt, position, event}."""
    with _open(spool_path) as opened:
        handle = out.open("w", encoding="utf-8") if out is not None else sys.stdout
        try:
            for row in opened.export(stream):
                handle.write(json.dumps(row, ensure_ascii=False) + "\n")
        finally:
            if out is not None:
                handle.close()


@spool_app.command("prune")
def prune(*, spool_path: SpoolOption,
          keep_days: Annotated[float, typer.Option("--keep-days", min=0, help="keep sent events this long")] = 7.0,
          as_json: JsonOption = False) -> None:
    """Delete the events sent more than --keep-days ago (the API holds them); waiting and discarded events stay."""
    cutoff = (datetime.now(UTC) - timedelta(days=keep_days)).isoformat(timespec="milliseconds")
    with _open(spool_path) as opened:
        pruned = opened.prune(cutoff.replace("+00:00", "Z"))
    if as_json:
        print_json({"pruned": pruned})
    else:
        typer.echo(f"pruned {pruned} sent event(s)")


@spool_app.command("discard")
def discard(*, spool_path: SpoolOption, url: UrlOption, api_key: KeyOption,
            stream: Annotated[str, typer.Argument(help="the blocked stream (job id)")]) -> None:
    """Give up the waiting events of a blocked stream (they stay in the file, marked discarded; export them
    first if they are to be re-entered) and follow the API's head of the stream again."""
    with _open(spool_path) as opened, Client(url, api_key) as api:
        if opened.head(stream).blocked_code is None:
            fail(SpoolError(f"stream {stream} is not blocked", streamId=stream))
        try:
            dropped = discard_blocked(api, opened, stream)
        except SettlekitError as exc:
            fail(exc)
    typer.echo(f"discarded {dropped} event(s) of {stream}")
