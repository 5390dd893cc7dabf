"""`settlekit ledger postings --events STREAM.json`."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from conftest import load_differential
from settlekit.cli.ledger import ledger_app
from settlekit.events.canonical import parse_json

VECTORS = Path(__file__).resolve().parent.parent / "vectors"


def test_postings_prints_entries_as_json_lines(tmp_path: Path) -> None:
    v = parse_json((VECTORS / "assist_coverage_royalty.json").read_text(encoding="utf-8"))
    stream = tmp_path / "stream.json"
    stream.write_text(json.dumps(v["events"]), encoding="utf-8")
    result = CliRunner().invoke(ledger_app, ["postings", "--events", str(stream)])
    assert result.exit_code == 0, result.output
    lines = [json.loads(line) for line in result.stdout.splitlines()]
    assert lines == v["ledgerEntries"]


def test_postings_refuses_a_stream_the_reducer_refuses(tmp_path: Path) -> None:
    v = parse_json((VECTORS / "settle_completed.json").read_text(encoding="utf-8"))
    events = v["events"]
    stream = tmp_path / "stream.json"
    stream.write_text(json.dumps([events[0], events[2]]), encoding="utf-8")  # BOOKED straight after genesis
    result = CliRunner().invoke(ledger_app, ["postings", "--events", str(stream)])
    assert result.exit_code == 1
    assert "INVALID_TRANSITION" in result.output
    stream.write_text("{}", encoding="utf-8")
    assert CliRunner().invoke(ledger_app, ["postings", "--events", str(stream)]).exit_code == 2


@pytest.mark.parametrize("name", ["d177_walk", "d084_claims", "d145_amounts", "d060_sla", "d123_lifecycle"])
def test_postings_on_corpus_streams_reports_entries_and_errors_in_event_order(name: str, tmp_path: Path) -> None:
    v = load_differential(name)
    stream = tmp_path / "stream.json"
    stream.write_text(json.dumps(v["events"]), encoding="utf-8")
    result = CliRunner().invoke(ledger_app, ["postings", "--events", str(stream)])
    assert result.exit_code == 0, result.output
    lines = [json.loads(line) for line in result.stdout.splitlines()]
    assert [x for x in lines if "entry" in x] == v["ledgerEntries"]
    errors = [x for x in lines if "error" in x]
    assert [(x["eventId"], x["eventType"], x["error"]["message"]) for x in errors] == [
        (x["eventId"], x["eventType"], x["error"]) for x in v["ledgerErrors"]
    ]
    assert all(set(x["error"]) == {"code", "message"} and x["error"]["code"] for x in errors)
    order = {e["id"]: i for i, e in enumerate(v["events"])}
    positions = [order[x["eventId"]] for x in lines]
    assert positions == sorted(positions)
    strict = CliRunner().invoke(ledger_app, ["postings", "--events", str(stream), "--strict"])
    assert strict.exit_code == (1 if v["ledgerErrors"] else 0)
    assert strict.stdout == result.stdout


def test_artifact_commands_accept_a_stream_with_posting_errors(tmp_path: Path) -> None:
    from settlekit.artifacts.build import build_all, derive_outbox
    from settlekit.cli.artifacts import artifacts_app

    v = load_differential("d177_walk")  # OPERATOR_COST_RECORDED / JOB_ADJUSTED before SETTLED: posting errors
    assert v["ledgerErrors"]
    stream = tmp_path / "stream.json"
    stream.write_text(json.dumps(v["events"]), encoding="utf-8")
    at = v["generator"]["artifactGeneratedAt"]
    result = CliRunner().invoke(artifacts_app, ["build-all", "--events", str(stream), "--generated-at", at])
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout) == json.loads(json.dumps(build_all(v["events"], generated_at=at)))
    outbox = CliRunner().invoke(artifacts_app, ["outbox", "--events", str(stream)])
    assert outbox.exit_code == 0, outbox.output
    assert json.loads(outbox.stdout) == json.loads(json.dumps(derive_outbox(v["events"])))
