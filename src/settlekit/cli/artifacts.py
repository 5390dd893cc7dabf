"""`settlekit artifacts …`: build artifacts offline from a stream file (canonical JSON on stdout)."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.console import Console

from settlekit.artifacts.build import build_all_report, build_one, derive_outbox
from settlekit.cli.common import events_of, fail, read_json
from settlekit.errors import SettlekitError
from settlekit.events.canonical import canonical_json

artifacts_app = typer.Typer(help="Build job artifacts (WorkCertificate.v1, SettlementStatement.v1, …) offline.",
                            no_args_is_help=True)
_err = Console(stderr=True, soft_wrap=True)

EventsOption = Annotated[Path, typer.Option("--events", help="stream file: a JSON array of events, or an object "
                                                                "with an `events` array (e.g. a vector file)")]
GeneratedAtOption = Annotated[str | None, typer.Option("--generated-at",
                                                       help="ISO time; default: the `at` of the anchor event")]


def load_events(path: Path) -> list[Any]:
    """The events of a stream file (exit 2 when it is unreadable or holds anything but event objects)."""
    data = events_of(read_json(path))
    if not isinstance(data, list) or not all(isinstance(event, dict) for event in data):
        _err.print(f"[red]error[/red] SCHEMA_INVALID: {path} must hold a JSON array of events (objects)")
        raise typer.Exit(code=2)
    return data


def _print(value: Any) -> None:
    """The canonical JSON of an artifact (or a list), with the own "__proto__" keys its payload values hold: settld's
    artifact body keeps them (JSON.parse made them own keys), though its hash, like settlekit's, leaves them out."""
    sys.stdout.write(canonical_json(value, keep_proto=True) + "\n")


@artifacts_app.command("build")
def build_command(
    events: EventsOption,
    artifact_type: Annotated[str, typer.Option("--type", help="artifact type, e.g. WorkCertificate.v1")],
    source_event_id: Annotated[str | None, typer.Option("--source-event-id",
                                                        help="trigger event id; default: the latest trigger")] = None,
    generated_at: GeneratedAtOption = None,
    at_chain_hash: Annotated[str | None, typer.Option("--at-chain-hash", help="override the anchor")] = None,
    tenant: Annotated[str | None, typer.Option("--tenant", help="default: the JOB_CREATED tenantId")] = None,
) -> None:
    """Print the canonical JSON of one artifact built from the stream."""
    stream = load_events(events)
    try:
        artifact = build_one(stream, artifact_type, source_event_id, generated_at, at_chain_hash=at_chain_hash,
                             tenant_id=tenant)
    except SettlekitError as exc:
        fail(exc)
    _print(artifact)


@artifacts_app.command("outbox")
def outbox_command(events: EventsOption) -> None:
    """Print the build requests (ARTIFACT_ENQUEUE messages) the stream triggers, as a canonical JSON array."""
    stream = load_events(events)
    try:
        _print(derive_outbox(stream))
    except SettlekitError as exc:
        fail(exc)


@artifacts_app.command("build-all")
def build_all_command(events: EventsOption, generated_at: GeneratedAtOption = None) -> None:
    """Print every artifact the stream triggers (one fold), as a canonical JSON array in outbox order. Requests
    that give no artifact (an artifact id already built) are reported on stderr, one JSON line each."""
    stream = load_events(events)
    try:
        artifacts, failures = build_all_report(stream, generated_at=generated_at)
    except SettlekitError as exc:
        fail(exc)
    for failure in failures:
        sys.stderr.write("not built: " + canonical_json(failure) + "\n")
    _print(artifacts)
