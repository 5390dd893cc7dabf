"""`settlekit ledger postings --events STREAM.json`."""

from __future__ import annotations

import json
from pathlib import Path

from typer.testing import CliRunner

from settlekit.events.canonical import parse_json
from settlekit.ledger.cli import ledger_app

VECTORS = Path(__file__).resolve().parent / "vectors"


def test_postings_prints_entries_as_json_lines(tmp_path: Path) -> None:
    v = parse_json((VECTORS / "assist_coverage_royalty.json").read_text(encoding="utf-8"))
    stream = tmp_path / "stream.json"
    stream.write_text(json.dumps(v["events"]), encoding="utf-8")
    result = CliRunner().invoke(ledger_app, ["postings", "--events", str(stream)])
    assert result.exit_code == 0, result.output
    lines = [json.loads(line) for line in result.stdout.splitlines()]
    assert lines == [item["entry"] for item in v["ledgerEntries"]]


def test_postings_reports_errors(tmp_path: Path) -> None:
    v = parse_json((VECTORS / "settle_completed.json").read_text(encoding="utf-8"))
    events = v["events"]
    stream = tmp_path / "stream.json"
    stream.write_text(json.dumps([events[0], events[2]]), encoding="utf-8")  # BOOKED straight after genesis
    result = CliRunner().invoke(ledger_app, ["postings", "--events", str(stream)])
    assert result.exit_code == 1
    assert "INVALID_TRANSITION" in result.output
    stream.write_text("{}", encoding="utf-8")
    assert CliRunner().invoke(ledger_app, ["postings", "--events", str(stream)]).exit_code == 2
