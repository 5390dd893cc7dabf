"""Streams made here that once came out different from the reference, with the reference's own outputs
(tests/vectors/reference_runs/README.md): settlekit posts the same entries and builds the same outbox and
byte-identical artifacts."""

from __future__ import annotations

import gzip
from pathlib import Path
from typing import Any

import pytest

from conftest import VECTORS
from settlekit.artifacts.build import build_all, derive_outbox
from settlekit.delivery.receiver import verify_artifact
from settlekit.events.canonical import canonical_json, parse_json
from settlekit.jobs import process_job_events
from settlekit.jobs.api_payloads import check_api_payload

RUNS = sorted((VECTORS / "reference_runs").glob("*.json"))
SHAPES_BUNDLE = VECTORS / "reference_runs" / "payload_shapes.json.gz"
WHITESPACE_BUNDLE = VECTORS / "reference_runs" / "js_whitespace.json.gz"


def _load(path: Path) -> dict[str, Any]:
    value: dict[str, Any] = parse_json(path.read_text(encoding="utf-8"))
    return value


def _bundle_runs(path: Path) -> list[dict[str, Any]]:
    bundle: dict[str, Any] = parse_json(gzip.decompress(path.read_bytes()).decode("utf-8"))
    return [{**run, "generatedAt": bundle["generatedAt"]} for run in bundle["runs"]]


SHAPE_RUNS = _bundle_runs(SHAPES_BUNDLE)
WHITESPACE_RUNS = _bundle_runs(WHITESPACE_BUNDLE)


def _assert_the_reference_outputs(run: dict[str, Any]) -> None:
    events = run["events"]
    result = process_job_events(None, events)
    assert canonical_json(result.ledger_entries) == canonical_json(run["ledgerEntries"])
    assert [(x["eventId"], x["error"]["message"]) for x in result.ledger_errors] == [
        (x["eventId"], x["message"]) for x in run["ledgerErrors"]]
    assert derive_outbox(events) == run["artifactOutbox"]
    built = build_all(events, generated_at=run["generatedAt"])
    assert [canonical_json(a) for a in built] == [canonical_json(a) for a in run["artifacts"]]


@pytest.mark.parametrize("path", RUNS, ids=[p.stem for p in RUNS])
def test_ledger_equals_the_reference(path: Path) -> None:
    run = _load(path)
    result = process_job_events(None, run["events"])
    assert canonical_json(result.ledger_entries) == canonical_json(run["ledgerEntries"])
    assert [(x["eventId"], x["error"]["message"]) for x in result.ledger_errors] == [
        (x["eventId"], x["message"]) for x in run["ledgerErrors"]]


@pytest.mark.parametrize("path", RUNS, ids=[p.stem for p in RUNS])
def test_artifacts_equal_the_reference_byte_for_byte(path: Path) -> None:
    run = _load(path)
    assert derive_outbox(run["events"]) == run["artifactOutbox"]
    built = build_all(run["events"], generated_at=run["generatedAt"])
    assert [canonical_json(a) for a in built] == [canonical_json(a) for a in run["artifacts"]]


def test_there_are_runs() -> None:
    assert RUNS


@pytest.mark.parametrize("path", RUNS, ids=[p.stem for p in RUNS])
def test_the_webhook_receiver_verifies_the_reference_artifacts(path: Path) -> None:
    """The receiver's checks (hash, integral totals, balance while the totals are safe integers) take what the
    reference builds, doubles beyond 2^53 included."""
    for artifact in _load(path)["artifacts"]:
        verify_artifact(artifact)


@pytest.mark.parametrize("run", SHAPE_RUNS, ids=[f"shape{i}" for i in range(len(SHAPE_RUNS))])
def test_payload_shapes_the_reference_accepts(run: dict[str, Any]) -> None:
    """Payload fields of other JSON kinds (or removed, or a payload that is not an object) where settld's
    validators, if the type has one, accept them: the offline tools take the stream, as settld's core does, and
    give its ledger, posting errors, outbox and artifacts (`payload_shapes.json.gz`, README there)."""
    _assert_the_reference_outputs(run)


@pytest.mark.parametrize("run", WHITESPACE_RUNS, ids=[f"ws{i}" for i in range(len(WHITESPACE_RUNS))])
def test_blank_strings_are_what_javascripts_trim_leaves_empty(run: dict[str, Any]) -> None:
    """Ids, statuses and zone ids that hold U+FEFF (white space to JavaScript's trim, not to Python's strip) or
    U+001C (the reverse): a claim id, a proof status, a coverage tier, a credit id, zone ids, signatures
    (`js_whitespace.json.gz`, README there)."""
    _assert_the_reference_outputs(run)


def test_the_shape_runs_pass_settlds_validators() -> None:
    """Every event of the shape runs passes settld's API validator of its type: settld accepts the streams."""
    assert len(SHAPE_RUNS) >= 30
    for run in SHAPE_RUNS:
        for event in run["events"]:
            check_api_payload(event)
