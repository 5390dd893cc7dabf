"""Every golden vector reproduces exactly: snapshot, ledger entries, allocations and account totals."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from settlekit.events.canonical import canonical_json, parse_json
from settlekit.jobs import postings_for_stream, process_job_events, reduce, serialize_state, server_rules
from settlekit.ledger import balances_from_entries, policy_snapshot_hash

VECTORS = Path(__file__).resolve().parent.parent / "vectors"
SCENARIOS = sorted(p.name for p in VECTORS.glob("*.json") if p.name != "envelope.json")


def _load(name: str) -> dict[str, Any]:
    return parse_json((VECTORS / name).read_text(encoding="utf-8"))


def test_all_five_scenarios_present() -> None:
    assert len(SCENARIOS) == 5


@pytest.mark.parametrize("name", SCENARIOS)
def test_whole_stream_in_one_call(name: str) -> None:
    v = _load(name)
    result = process_job_events(None, v["events"])
    assert result.snapshot == v["job"]
    assert canonical_json(result.snapshot) == canonical_json(v["job"])
    assert result.ledger_entries == v["ledgerEntries"]
    assert result.allocations == v["allocations"]
    assert balances_from_entries(result.ledger_entries) == v["ledgerTotalsByAccountId"]
    assert sum(v["ledgerTotalsByAccountId"].values()) == 0
    assert v["ledgerErrors"] == []


@pytest.mark.parametrize("name", SCENARIOS)
def test_one_event_per_append_through_json_roundtrip(name: str) -> None:
    """The store appends one event at a time and persists the state as JSON between appends."""
    v = _load(name)
    stored: dict[str, Any] | None = None
    entries: list[dict[str, Any]] = []
    allocations: list[dict[str, Any]] = []
    for event in v["events"]:
        result = process_job_events(stored, [event])
        entries += result.ledger_entries
        allocations += result.allocations
        stored = json.loads(json.dumps(result.state))
        assert result.snapshot["lastEventId"] == event["id"]
        assert result.snapshot["lastChainHash"] == event["chainHash"]
    assert stored is not None
    assert stored["snapshot"] == v["job"]
    assert entries == v["ledgerEntries"]
    assert allocations == v["allocations"]


@pytest.mark.parametrize("name", SCENARIOS)
def test_every_prefix_matches_a_fresh_reduce(name: str) -> None:
    v = _load(name)
    events = v["events"]
    stored = None
    for i, event in enumerate(events):
        stored = process_job_events(stored, [event]).state
        fresh = serialize_state(reduce(events[: i + 1]))
        assert {k: v for k, v in stored.items() if k != server_rules.STATE_KEY} == fresh
        assert stored["snapshot"]["revision"] == i


@pytest.mark.parametrize("name", SCENARIOS)
def test_postings_for_stream_matches_vector(name: str) -> None:
    v = _load(name)
    assert postings_for_stream(v["events"]) == [item["entry"] for item in v["ledgerEntries"]]


@pytest.mark.parametrize("name", SCENARIOS)
def test_booking_policy_hash_is_the_policy_snapshot_hash(name: str) -> None:
    v = _load(name)
    booked = next(e for e in v["events"] if e["type"] == "BOOKED")
    assert policy_snapshot_hash(booked["payload"]["policySnapshot"]) == booked["payload"]["policyHash"]


@pytest.mark.parametrize("name", SCENARIOS)
def test_facts_track_signatures(name: str) -> None:
    v = _load(name)
    state = reduce(v["events"])
    assert state.facts["signedEventCount"] == sum(1 for e in v["events"] if e["signature"])
    assert sorted(state.facts["signerKeyIds"]) == sorted({e["signerKeyId"] for e in v["events"]})


def test_input_state_is_not_modified_by_process_job_events() -> None:
    v = _load("claim_adjust_paid.json")
    events = v["events"]
    stored = process_job_events(None, events[:14]).state
    before = canonical_json(stored)
    process_job_events(stored, events[14:])
    assert canonical_json(stored) == before
