"""`settlekit consumers …`: list, status and recovery verbs on consumer state rows."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Annotated, Any

import typer
from rich.console import Console
from rich.table import Table

from settlekit.application import consumers as ops
from settlekit.application.consumers import SHARED_INSTANCE, ConsumerState
from settlekit.application.database import Database
from settlekit.cli.common import DbOption, JsonOption, fail, run_with_db
from settlekit.errors import ValidationError

consumers_app = typer.Typer(help="Durable consumers: state, lag and recovery.", no_args_is_help=True)

InstanceOption = Annotated[str, typer.Option("--instance-id", help="state row shard (per-instance consumers)")]
NameArg = Annotated[str, typer.Argument(help="consumer name")]


def _print_state(state: ConsumerState, as_json: bool, **extra: Any) -> None:
    body = {**state.to_json(), **extra}
    if as_json:
        print(json.dumps(body))
        return
    table = Table(show_header=False, box=None)
    for key, value in body.items():
        table.add_row(f"[bold]{key}[/bold]", "—" if value is None else str(value))
    Console().print(table)


@consumers_app.command("list")
def list_cmd(*, db: DbOption = None, as_json: JsonOption = False) -> None:
    """Every consumer state row with status, cursor, high-water mark, lag, attempts and last error."""
    rows = run_with_db(db, lambda d: ops.list_consumers(d), reading=True)
    if as_json:
        print(json.dumps([r.to_json() for r in rows]))
        return
    table = Table(title="consumers")
    for col in (
        "name",
        "instance",
        "status",
        "cursor",
        "hwm",
        "lag",
        "lag s",
        "gaps",
        "attempts",
        "rearms",
        "skipped",
        "last error",
    ):
        table.add_column(
            col,
            justify="right"
            if col in ("cursor", "hwm", "lag", "lag s", "gaps", "attempts", "rearms", "skipped")
            else "left",
        )
    colors = {"idle": "green", "processing": "cyan", "dead": "red", "disabled": "yellow"}
    for r in rows:
        s = r.state
        status = "processing" if s.processing else s.status
        table.add_row(
            s.name,
            s.instance_id,
            f"[{colors.get(status, 'white')}]{status}[/]",
            str(s.cursor),
            str(r.high_water_mark),
            str(r.lag),
            f"{r.lag_seconds:.1f}",
            str(s.pending_gap_positions),
            str(s.attempts),
            str(s.rearm_count),
            str(s.skipped_count),
            s.last_error or "",
        )
    Console(width=200).print(table)


@consumers_app.command()
def status(
    *,
    name: NameArg, db: DbOption = None, instance_id: InstanceOption = SHARED_INSTANCE, as_json: JsonOption = False
) -> None:
    """One consumer row (with a live `processing` flag)."""
    _print_state(run_with_db(db, lambda d: ops.require_state(d, name, instance_id), reading=True), as_json)


def _recovery_command(command: str, op: Callable[[Database, str, str], ConsumerState], summary: str) -> None:
    """Register `consumers <command> NAME`: run `op` on the named consumer and print its new state."""

    def run(
        *,
        name: NameArg, db: DbOption = None, instance_id: InstanceOption = SHARED_INSTANCE, as_json: JsonOption = False
    ) -> None:
        _print_state(run_with_db(db, lambda d: op(d, name, instance_id)), as_json)

    consumers_app.command(command, help=summary)(run)


_recovery_command(
    "restart", ops.restart_consumer, "Revive a dead consumer; the cursor stays, so the failing event is retried."
)
_recovery_command("disable", ops.disable_consumer, "Stop delivering to a consumer (cursor kept) until `enable`.")
_recovery_command("enable", ops.enable_consumer, "Resume a disabled consumer.")


@consumers_app.command()
def skip(
    *,
    name: NameArg, db: DbOption = None, instance_id: InstanceOption = SHARED_INSTANCE, as_json: JsonOption = False
) -> None:
    """Skip the blocking event (the one the last failure was on; else the lowest visible pending-gap position)
    into the dead letters."""
    result = run_with_db(db, lambda d: ops.skip_poison(d, name, instance_id))
    _print_state(result.state, as_json, skippedPosition=result.skipped_position)


@consumers_app.command()
def reset(
    *,
    name: NameArg,
    db: DbOption = None,
    to: Annotated[str, typer.Option("--to", help="a position (0 = replay all) or 'now'")],
    instance_id: InstanceOption = SHARED_INSTANCE,
    as_json: JsonOption = False,
) -> None:
    """Move the cursor; refused while the consumer is in a turn. `now` skips every event committed so far; an
    append still in flight then (among the last 10,000 positions) is delivered once it commits."""
    if to == "now":
        target: int | str = "now"
    else:
        try:
            target = int(to)
        except ValueError:
            fail(ValidationError(f"--to must be a position or 'now', not {to!r}", code="CONSUMER_RESET_INVALID"), 1)
    _print_state(run_with_db(db, lambda d: ops.reset_consumer(d, name, target, instance_id)), as_json)  # type: ignore[arg-type]
