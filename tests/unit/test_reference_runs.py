"""Streams made here that once came out different from the reference, with the reference's own outputs
(tests/vectors/reference_runs/README.md): settlekit posts the same entries and builds the same outbox and
byte-identical artifacts."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from conftest import VECTORS
from settlekit.artifacts.build import build_all, derive_outbox
from settlekit.delivery.receiver import verify_artifact
from settlekit.events.canonical import canonical_json, parse_json
from settlekit.jobs import process_job_events

RUNS = sorted((VECTORS / "reference_runs").glob("*.json"))


def _load(path: Path) -> dict[str, Any]:
    value: dict[str, Any] = parse_json(path.read_text(encoding="utf-8"))
    return value


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
