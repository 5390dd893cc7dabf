"""The `settlekit` command line."""

from __future__ import annotations

import json
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, NoReturn

import typer

from settlekit.cli import server
from settlekit.cli.api_keys import api_keys_app
from settlekit.cli.artifacts import artifacts_app
from settlekit.cli.common import (
    DbOption,
    JsonOption,
    console,
    database_url,
    error_line,
    events_of,
    exit_code,
    fail,
    print_json,
    read_bytes,
    read_json,
    run_with_db,
    settings_flags,
    watch_connection_errors,
)
from settlekit.cli.consumers import consumers_app
from settlekit.cli.deliveries import delivery_app, receive_command
from settlekit.cli.finance import finance_app
from settlekit.cli.ledger import ledger_app
from settlekit.cli.spool import spool_app
from settlekit.errors import SettlekitError, ValidationError, VerificationError
from settlekit.events.envelope import parse_keys_file, verify_chain

if TYPE_CHECKING:
    from settlekit.application.imports import ImportResult
    from settlekit.application.jobs import Appender

app = typer.Typer(help="settlekit: hash-chained job streams, ledger, artifacts and signed webhooks.",
                  no_args_is_help=True, pretty_exceptions_enable=False)
TenantDefaultOption = Annotated[str, typer.Option("--tenant", envvar="SETTLEKIT_TENANT", help="tenant id")]


@app.command()
def migrate(*, db: DbOption = None, as_json: JsonOption = False) -> None:
    """Create or upgrade the schema (safe to run from several processes at once)."""
    applied = run_with_db(db, lambda database: database.migrate())
    if as_json:
        print_json({"applied": applied})
    else:
        console.print(f"applied {len(applied)} migration(s): {', '.join(applied) or 'none pending'}")


def verify_stream_file(stream: Path, keys: Path | None) -> tuple[list[Any], dict[str, str]]:
    """Load and verify a stream file; raises VerificationError at the first bad index."""
    events = events_of(read_json(stream))
    if not isinstance(events, list):
        raise VerificationError("stream file must be a JSON array of events", code="SCHEMA_INVALID")
    key_map = parse_keys_file(read_json(keys)) if keys is not None else {}
    verify_chain(events, key_map)
    return events, key_map


@app.command()
def verify(
    stream: Annotated[Path | None, typer.Argument(help="JSON array of finalized events (not needed for a "
                                                       "MonthClose.v1 or a consistency proof)")] = None,
    keys: Annotated[Path | None, typer.Option("--keys", help="keyId→PEM object or list of signers; for a "
                                                             "close or a proof: the server keys to pin")] = None,
    artifact: Annotated[Path | None, typer.Option("--artifact", help="artifact JSON to rebuild and compare, or a "
                                                                     "MonthClose.v1 to check")] = None,
    proof: Annotated[Path | None, typer.Option("--proof", help="MerkleInclusionProof.v1 or "
                                                               "MerkleConsistencyProof.v1 JSON")] = None,
    journal: Annotated[Path | None, typer.Option("--journal", help="with a MonthClose.v1: the exported "
                                                                   "JournalCsv.v1 whose SHA-256 it records")] = None,
) -> None:
    """Verify a stream offline (hashes, chain links, signatures); exit 1 naming the first bad index. Also checks a
    MonthClose.v1 (hash, server signature, journal bytes) and the tenant log's inclusion and consistency proofs."""
    close_given = artifact is not None and _is_month_close(artifact)
    if stream is not None and (close_given or (proof is not None and _is_consistency_proof(proof))):
        fail(ValidationError("a MonthClose.v1 or a consistency proof is checked without a stream (its keys are the "
                             "server's): verify the stream in a call of its own", code="SCHEMA_INVALID"), 2)
    if proof is not None or (artifact is not None and (stream is None or close_given)):
        _verify_finance(stream, keys, artifact, proof, journal)
        return
    if stream is None:
        fail(ValidationError("give a stream file (or --artifact / --proof)", code="SCHEMA_INVALID"), 2)
    try:
        events, _ = verify_stream_file(stream, keys)
    except VerificationError as exc:
        print(json.dumps({"ok": False, "index": exc.index, "code": exc.code, "reason": exc.message}))
        raise typer.Exit(code=1) from None
    except SettlekitError as exc:
        fail(exc)
    result: dict[str, Any] = {"ok": True, "events": len(events),
                              "headChainHash": events[-1]["chainHash"] if events else None}
    if artifact is not None:
        from settlekit.artifacts.verify import verify_artifact_against_stream

        report = verify_artifact_against_stream(events, read_json(artifact))
        result.update(report)
        print(json.dumps(result))
        if not report.get("ok", False):
            raise typer.Exit(code=1)
        return
    print(json.dumps(result))


def _is_month_close(path: Path) -> bool:
    from settlekit.ledger.close import MONTH_CLOSE

    doc = read_json(path)
    return isinstance(doc, dict) and doc.get("artifactType") == MONTH_CLOSE


def _is_consistency_proof(path: Path) -> bool:
    from settlekit.ledger.close import CONSISTENCY_PROOF

    doc = read_json(path)
    return isinstance(doc, dict) and doc.get("proofType") == CONSISTENCY_PROOF


def _verify_finance(stream: Path | None, keys: Path | None, artifact: Path | None, proof: Path | None,
                    journal: Path | None) -> None:
    """`verify` of a MonthClose.v1 (and its journal) or of a log proof (and, for an inclusion proof with a stream,
    that the leaf is that stream's head at its event count). Prints one JSON report; exit 1 unless ok."""
    from settlekit.ledger import close as C

    pinned = parse_keys_file(read_json(keys)) if keys is not None else None
    if proof is not None:
        data = read_json(proof)
        kind = data.get("proofType") if isinstance(data, dict) else None
        check = C.verify_consistency_proof if kind == C.CONSISTENCY_PROOF else C.verify_inclusion_proof
        report = check(data, pinned)
        if report["ok"] and stream is not None and kind == C.INCLUSION_PROOF:
            report.update(_leaf_in_stream(data["leaf"], read_json(stream)))
    else:
        assert artifact is not None
        doc = read_json(artifact)
        report = C.verify_close_document(doc, pinned)
        if journal is not None:
            report["journalValid"] = C.journal_hash_matches(doc, read_bytes(journal))
            report["ok"] = report["ok"] and report["journalValid"]
    print(json.dumps(report))
    if not report.get("ok"):
        raise typer.Exit(code=1)


def _leaf_in_stream(leaf: Mapping[str, Any], events: Any) -> dict[str, Any]:
    """{ok, streamMatches}: the stream's first `eventCount` events recompute (payload and chain hashes, links; the
    signatures are `verify STREAM --keys`'s job) and end at the leaf's chain hash."""
    from settlekit.events.envelope import compute_chain_hash, compute_payload_hash

    events = events_of(events)
    count = leaf.get("eventCount")
    ok = isinstance(events, list) and type(count) is int and 0 < count <= len(events)
    prev = None
    for event in events[:count] if ok else []:
        try:
            ok = ok and isinstance(event, dict) and event.get("streamId") == leaf.get("streamId") \
                and event.get("prevChainHash") == prev and event.get("payloadHash") == compute_payload_hash(event) \
                and event.get("chainHash") == compute_chain_hash(prev, event["payloadHash"])
        except (KeyError, TypeError, ValueError, SettlekitError):  # not an event envelope: not the stream's head
            ok = False
        prev = event.get("chainHash") if isinstance(event, dict) else None
    ok = ok and prev == leaf.get("headChainHash")
    return {"ok": ok, "streamMatches": ok}


@app.command()
def export(
    *,
    db: DbOption = None,
    stream: Annotated[str | None, typer.Option("--stream", help="stream id")] = None,
    tenant: TenantDefaultOption = "tenant_default",
    out: Annotated[Path | None, typer.Option("--out", help="file to write; default stdout")] = None,
    proof: Annotated[str | None, typer.Option("--proof", help="job id: its inclusion proof in the close of "
                                                              "--month")] = None,
    consistency: Annotated[str | None, typer.Option("--consistency", help="an earlier closed month: the proof "
                                                                          "that the log of --month extends it")] = None,
    month: Annotated[str | None, typer.Option("--month", help="closed month, YYYY-MM")] = None,
) -> None:
    """Write a stream in the offline verifier's format (a JSON array of events, one a line), or with --proof /
    --consistency and --month a proof over the tenant's Merkle log (for `settlekit verify --proof`)."""
    from settlekit.application.jobs import Streams

    if proof is not None or consistency is not None:
        _export_proof(db, tenant, month, proof, consistency, out)
        return
    if stream is None:
        fail(ValidationError("give --stream, or --proof/--consistency with --month", code="SCHEMA_INVALID"), 2)

    events = run_with_db(db, lambda database: Streams(database).read_stream(tenant, stream), reading=True)
    if not events:
        console.print(f"[red]error[/red] NOT_FOUND: stream {stream} has no events for tenant {tenant}")
        raise typer.Exit(code=1)
    text = _stream_text(events)
    if out is None:
        sys.stdout.write(text)
    else:
        out.write_text(text, encoding="utf-8")
        console.print(f"wrote {len(events)} events to {out}")


def _stream_text(events: Sequence[Any]) -> str:
    """A JSON array of the events, one a line, each in canonical JSON: written without recursion, so a payload
    nested at any depth (the offline tools read such streams) is written too; own "__proto__" keys are kept, a lone
    surrogate is written as its escape."""
    from settlekit.events.canonical import canonical_json

    return "[\n" + ",\n".join(canonical_json(event, keep_proto=True) for event in events) + "\n]\n"


def _export_proof(db: str | None, tenant: str, month: str | None, job: str | None, since: str | None,
                  out: Path | None) -> None:
    from settlekit.application import finance as fin

    if month is None:
        fail(ValidationError("--proof and --consistency need --month", code="SCHEMA_INVALID"), 2)
    if job is not None:
        value = run_with_db(db, lambda d: fin.inclusion_proof(d, tenant, month, job), reading=True)
    else:
        assert since is not None
        value = run_with_db(db, lambda d: fin.consistency_proof(d, tenant, since, month), reading=True)
    text = json.dumps(value, ensure_ascii=False, indent=2) + "\n"
    if out is None:
        sys.stdout.write(text)
    else:
        out.write_text(text, encoding="utf-8")
        console.print(f"wrote {value['proofType']} to {out}", highlight=False)


@app.command("import")
@settings_flags("import_max_bytes")
def import_stream(
    flags: dict[str, Any],
    *,
    stream: Annotated[Path, typer.Argument(help="exported stream: a JSON array of finalized events")],
    db: DbOption = None,
    keys: Annotated[Path, typer.Option("--keys", help="list of signers {role, keyId, publicKeyPem}")],
    tenant: TenantDefaultOption = "tenant_default",
    strict: Annotated[bool, typer.Option("--strict", help="apply the rules for new input: refuse an unsigned "
                                                           "event and lone surrogates")] = False,
    retenant: Annotated[bool, typer.Option("--retenant", help="import a stream whose JOB_CREATED names another "
                                                              "tenant under --tenant anyway (counted)")] = False,
) -> None:
    """Import a settld stream through the live append path, event by event (ids, hashes and signatures kept).

    Registers the keys for the tenant by role, verifies the file's hash chains and signatures before writing
    (the first failure is refused after the events before it, as settld refused it; with --strict, the file),
    skips events already imported (a re-run resumes), stops at the first refused event. The export is recorded
    history: an unsigned event and lone surrogates are accepted and counted (`--strict` refuses them). A
    JOB_CREATED naming another tenant than --tenant is refused at that event (JOB_TENANT_MISMATCH) unless
    --retenant.
    Prints {"appended", "skipped", "refused", "unsigned", "loneSurrogates", "retenanted"} last on stdout; exit 0
    when nothing was refused, 1 when an event was, 2 when the import could not start or was cut off (files, keys,
    database).
    """
    from settlekit.application.database import opened
    from settlekit.application.imports import forget_signers, parse_import_keys, parse_import_stream, register_signers
    from settlekit.application.jobs import job_appender
    from settlekit.runtime.settings import Settings

    try:
        limit = Settings(**flags).import_max_bytes
        events = parse_import_stream(read_json(stream, limit))
        signers = parse_import_keys(read_json(keys))
    except SettlekitError as exc:
        _stop_import(exc)
    try:
        with opened(database_url(db)) as database:
            store = job_appender(database)
            try:
                registered = register_signers(store, tenant, signers)
            except SettlekitError as exc:
                _stop_import(exc)
            result = _import_with_progress(store, tenant, events, strict, retenant)
            forget_signers(store, tenant, registered, result)
    except SettlekitError as exc:  # the database could not be opened or migrated
        _stop_import(exc)
    _report_import(result)


def _stop_import(exc: SettlekitError, note: str = "") -> NoReturn:
    """End `import` with exit code 2: the import could not start or was cut off."""
    fail(exc, 2, note)


def _import_with_progress(store: Appender, tenant: str, events: Sequence[Mapping[str, Any]],
                          strict: bool, retenant: bool) -> ImportResult:
    """Run the import, with a progress bar on a terminal for 100 events or more."""
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeRemainingColumn

    from settlekit.application.imports import import_events

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
            return import_events(store, tenant, events, strict=strict, retenant=retenant, progress=advance)
        except SettlekitError as exc:
            _stop_import(exc, f" (stopped after event {done}; a re-run resumes)")


def _report_import(result: ImportResult) -> None:
    """Print the refusal (if any) and the counts; exit 1 when an event was refused."""
    from rich.markup import escape

    from settlekit.events.canonical import storable_text

    if result.refused is not None:
        r = result.refused
        console.print(f"[red]refused[/red] event {r.index} ({escape(str(r.event_id))}): {r.code}: "
                      f"{escape(storable_text(r.message))}")
    print(storable_text(json.dumps(result.to_json(), ensure_ascii=False)))  # a refusal may quote a lone surrogate
    if result.refused is not None:
        raise typer.Exit(code=1)


contracts_app = typer.Typer(help="Contract documents (ContractDocument.v1) that jobs pin by hash.",
                            no_args_is_help=True)


@contracts_app.command("add")
def contracts_add(
    *,
    document: Annotated[Path, typer.Argument(help="ContractDocument.v1 JSON file")],
    db: DbOption = None,
    tenant: TenantDefaultOption = "tenant_default",
    as_json: JsonOption = False,
) -> None:
    """Validate and store a contract document; prints its hash (the operatorContractHash jobs pin)."""
    from settlekit.application.contracts import put_contract

    body = read_json(document)
    digest = run_with_db(db, lambda database: put_contract(database, tenant, body), error_exit=1)
    if as_json:
        print_json({"tenantId": tenant, "contractHash": digest})
    else:
        print(digest)


app.add_typer(contracts_app, name="contracts")
app.add_typer(ledger_app, name="ledger")
app.add_typer(finance_app, name="finance")
app.add_typer(consumers_app, name="consumers")
app.add_typer(artifacts_app, name="artifacts")
app.add_typer(delivery_app, name="deliveries")
app.add_typer(api_keys_app, name="api-keys")
app.add_typer(spool_app, name="spool")
app.add_typer(api_keys_app, name="keys", hidden=True)  # the earlier name of `api-keys`, still accepted
app.command("receive", help="Run the reference webhook receiver (verifies, dedupes, stores).")(receive_command)
app.command()(server.serve)
app.command()(server.worker)


@app.command("settings")
def show_settings(
    as_json: JsonOption = False,
    markdown: Annotated[bool, typer.Option("--markdown", help="the table of every setting (variable, flag, "
                                           "default, meaning) instead of the values")] = False,
) -> None:
    """Print the settings in effect (from the environment), or with --markdown the table of every setting."""
    from settlekit.runtime.settings import Settings, env_var, settings_table

    if markdown:
        sys.stdout.write(settings_table())
        return
    values = Settings().model_dump(mode="json")
    if as_json:
        print_json(values)
        return
    for name, value in values.items():
        print(f"{env_var(name)}={'' if value is None else value}")


@app.command()
def demo(
    jobs: Annotated[int, typer.Option("--jobs", help="number of jobs to simulate")] = 200,
    db: Annotated[str | None, typer.Option("--db", help="database URL; default: SQLite in a temp dir")] = None,
) -> None:
    """Run the end-to-end demo on embedded SQLite (or --db)."""
    from settlekit.demo import run_demo

    code = run_demo(jobs=jobs, db_url=db)
    raise typer.Exit(code=code)


def main() -> None:
    watch_connection_errors()
    try:
        app()
    except SettlekitError as exc:
        console.print(error_line(exc), highlight=False)
        sys.exit(exit_code(exc))


if __name__ == "__main__":
    main()
