"""Streams settld 0.1.0 accepts that the earlier corpora never held, against settld's own offline answers
(`vectors/reference_runs/offline_parity.json.gz`, made by `tests/reference/offline_parity.py`, README there): a
JOB_CREATED again mid-stream, unknown and other streams' event types, signatures in every base64 spelling node
reads (and empty ones), "__proto__" and integer-like keys, payloads nested thousands of levels deep, `at` spellings
`Date.parse` reads, ids and envelopes the live path refuses. For each: `verify`'s verdict, the ledger entries and
posting errors, the reduced job, the outbox and every artifact, byte for byte (own "__proto__" keys included, as
settld's JSON.stringify writes them)."""

from __future__ import annotations

import functools
import gzip
import json
import re
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from conftest import VECTORS
from settlekit.artifacts.build import build_all, derive_outbox
from settlekit.cli import app
from settlekit.errors import VerificationError
from settlekit.events.canonical import canonical_json, parse_json
from settlekit.events.envelope import verify_chain
from settlekit.jobs import process_job_events

BUNDLE = VECTORS / "reference_runs" / "offline_parity.json.gz"
_INDEX = re.compile(r" at index (\d+)$")
runner = CliRunner()


@functools.cache
def _bundle() -> dict[str, Any]:
    value: dict[str, Any] = parse_json(gzip.decompress(BUNDLE.read_bytes()).decode("utf-8"))
    return value


def _text(value: Any) -> str:
    return canonical_json(value, keep_proto=True)


def _verdict(events: list[dict[str, Any]], keys: dict[str, str]) -> tuple[bool, int | None]:
    try:
        verify_chain(events, keys)
    except VerificationError as exc:
        return False, exc.index
    return True, None


def compare(events: list[dict[str, Any]], answer: dict[str, Any], keys: dict[str, str] | None = None,
            generated_at: str = "2026-02-01T00:00:00.000Z") -> list[str]:
    """What settlekit's offline tools answer differently from settld's answer for one stream."""
    found: list[str] = []
    reference = answer["verify"]
    index = _INDEX.search(reference.get("error") or "")
    if _verdict(events, keys if keys is not None else _bundle()["keys"]) != (
            reference["ok"], int(index.group(1)) if index else None):
        found.append(f"verify ({reference})")
    result = process_job_events(None, events)
    if _text(result.ledger_entries) != _text(answer["entries"]):
        found.append("ledger entries")
    if [(x["eventId"], x["error"]["message"]) for x in result.ledger_errors] != [
            (x["eventId"], x["message"]) for x in answer["errors"]]:
        found.append("posting errors")
    if _text(result.snapshot) != _text(answer["job"]):
        found.append("job")
    if derive_outbox(events) != answer["outbox"]:
        found.append("outbox")
    built = build_all(events, generated_at=generated_at)
    if [_text(a) for a in built] != [_text(a) for a in answer["artifacts"]]:
        found.append("artifacts")
    return found


def _runs() -> list[dict[str, Any]]:
    return list(_bundle()["runs"]) if BUNDLE.exists() else []


RUNS = _runs()


def test_every_dimension_is_there() -> None:
    assert len(RUNS) >= 100
    for dimension in ("restart", "foreign", "signatures", "keys", "deep", "at", "envelope"):
        assert sum(dimension in run["dimensions"] for run in RUNS) >= 10, dimension
    assert any(not run["verify"]["ok"] for run in RUNS)  # a broken signature now and then


@pytest.mark.parametrize("run", RUNS, ids=[f"op{i}" for i in range(len(RUNS))])
def test_the_offline_tools_answer_as_settld(run: dict[str, Any]) -> None:
    assert compare(run["events"], run, generated_at=_bundle()["generatedAt"]) == []


def _cli_runs() -> list[dict[str, Any]]:
    """A few runs for the command line: one whose CoverageCertificate's credit policy holds an own "__proto__" key,
    one with a deeply nested payload, one that restarts, one with foreign types, one that fails verification."""
    def proto(run: dict[str, Any]) -> bool:
        return any(a["artifactType"] == "CoverageCertificate.v1" and "__proto__" in (
            a["coverage"]["creditPolicy"] or {}) for a in run["artifacts"])
    picks = [next(r for r in RUNS if proto(r))]
    for dimension in ("deep", "restart", "foreign"):
        picks.append(next(r for r in RUNS if r["dimensions"] == [dimension]))
    picks.append(next(r for r in RUNS if not r["verify"]["ok"]))
    return picks


@pytest.mark.parametrize("run", _cli_runs() if RUNS else [], ids=["proto", "deep", "restart", "foreign", "broken"])
def test_the_commands_print_what_settld_computes(run: dict[str, Any], tmp_path: Path) -> None:
    """`settlekit verify`, `ledger postings`, `artifacts outbox` and `artifacts build-all` on the stream file: the
    artifacts printed are settld's body (own "__proto__" keys kept), the file read at any depth node reads."""
    stream = tmp_path / "stream.json"
    stream.write_text(_text(run["events"]), encoding="utf-8")
    keys = tmp_path / "keys.json"
    keys.write_text(_text(_bundle()["keys"]), encoding="utf-8")
    verified = runner.invoke(app, ["verify", str(stream), "--keys", str(keys)])
    assert (verified.exit_code == 0) is run["verify"]["ok"], verified.output
    assert json.loads(verified.stdout)["ok"] is run["verify"]["ok"]
    built = runner.invoke(app, ["artifacts", "build-all", "--events", str(stream), "--generated-at",
                                _bundle()["generatedAt"]])
    assert built.exit_code == 0, built.output
    assert built.stdout == _text(run["artifacts"]) + "\n"
    outbox = runner.invoke(app, ["artifacts", "outbox", "--events", str(stream)])
    assert parse_json(outbox.stdout) == run["outbox"]
    if run["verify"]["ok"] and run["artifacts"]:  # settld's artifacts check against the stream, as built
        for artifact in (run["artifacts"][0], run["artifacts"][-1]):
            path = tmp_path / "artifact.json"
            path.write_text(_text(artifact), encoding="utf-8")
            checked = runner.invoke(app, ["verify", str(stream), "--keys", str(keys), "--artifact", str(path)])
            assert checked.exit_code == 0, checked.output
            assert json.loads(checked.stdout)["ok"] is True
    postings = runner.invoke(app, ["ledger", "postings", "--events", str(stream)])
    assert postings.exit_code == 0, postings.output
    lines = [parse_json(line) for line in postings.stdout.splitlines()]
    assert [(x["eventId"], x["entry"]) for x in lines if "entry" in x] == [
        (x["eventId"], x["entry"]) for x in run["entries"]]
