"""Offline tools read payloads as settld's core does: no schema check (the live path keeps settlekit's own for the
types settld's API does not validate). The reference's outputs for such streams are in
tests/vectors/reference_runs/payload_shapes.json.gz (test_reference_runs.py); these tests pin the pieces."""

from __future__ import annotations

from typing import Any

import pytest

from settlekit.artifacts.proof import summary_from_settlement_ref
from settlekit.errors import SettlekitError
from settlekit.events.js import js_to_string
from settlekit.jobs import process_job_events
from settlekit.ledger.allocations import default_party_ids, has_insurer, insurer_id
from support.streams import ROBOT_ACTOR, StreamBuilder, lifecycle_to_executing


def _settled_stream(ref: Any) -> list[dict[str, Any]]:
    b = StreamBuilder()
    lifecycle_to_executing(b)
    b.add("EXECUTION_COMPLETED", {}, ROBOT_ACTOR)
    b.add("SETTLED", {"settlementProofRef": ref})
    return b.events


@pytest.mark.parametrize("ref", [[], "x", 7, True, "", ["x", 7]])
def test_a_settlement_proof_ref_of_any_kind_is_taken_offline_and_refused_live(ref: Any) -> None:
    events = _settled_stream(ref)
    result = process_job_events(None, events)
    assert result.snapshot["settlement"]["settlementProofRef"] == ref
    assert [e["eventType"] for e in result.ledger_entries] == ["BOOKED", "SETTLED"]
    state = process_job_events(None, events[:-1]).state
    with pytest.raises(SettlekitError) as exc:
        process_job_events(state, events[-1:], live=True)
    assert exc.value.details["field"] == "settlementProofRef"


def test_matched_fields_of_other_kinds_are_taken_offline() -> None:
    b = StreamBuilder()
    lifecycle_to_executing(b)
    events = b.events
    events[3] = {**events[3], "payload": {"robotId": 7, "operatorCompilerId": 7, "operatorPolicyHash": "x"}}
    b2 = StreamBuilder()
    for e in events:
        b2.add(e["type"], e["payload"], e["actor"])
    snapshot = process_job_events(None, b2.events).snapshot
    assert snapshot["operatorCompilerId"] == 7 and snapshot["operatorPolicyHash"] == "x"
    state = process_job_events(None, b2.events[:3]).state
    with pytest.raises(SettlekitError):
        process_job_events(state, b2.events[3:4], live=True)


@pytest.mark.parametrize("payload", ["x", [], None, 7, {"constraints": 7, "customerId": 7}])
def test_a_job_created_payload_of_any_kind_is_taken_offline_and_refused_live(payload: Any) -> None:
    b = StreamBuilder()
    event = b.add("JOB_CREATED", payload)
    snapshot = process_job_events(None, [event]).snapshot
    assert "templateId" not in snapshot  # undefined in settld's job
    assert snapshot["tenantId"] == "tenant_default"
    with pytest.raises(SettlekitError):
        process_job_events(None, [event], live=True)


def test_an_array_settlement_proof_ref_is_an_object_without_fields() -> None:
    summary = summary_from_settlement_ref(["x"])
    assert summary is not None and summary["status"] is None and summary["reasonCodes"] == []
    assert summary["source"]["disposition"] is None
    assert summary_from_settlement_ref("x") is None
    forfeit = summary_from_settlement_ref({"forfeit": []})
    assert forfeit is not None and forfeit["source"]["disposition"]["kind"] == "FORFEIT"


def test_party_ids_take_non_blank_string_ids_only() -> None:
    snapshot: dict[str, Any] = {
        "customerId": 7, "booking": {"customerId": "cust_b"},
        "operatorCoverage": {"operatorId": None}, "assist": {"operatorId": "op_1"},
    }
    ids = default_party_ids(snapshot)
    assert ids["customer"] == "pty_customer"  # 7 ?? "cust_b" is 7: not a string
    assert ids["operator"] == "pty_operator:op_1"
    assert default_party_ids({**snapshot, "customerId": None})["customer"] == "pty_customer:cust_b"


@pytest.mark.parametrize(
    ("insurer", "insured", "party"),
    [("ins_1", True, "ins_1"), (7, True, None), ([], False, None), ([" "], False, None), ({}, True, None),
     (" ", False, None), (None, False, None)],
)
def test_the_insurer_role_follows_string_conversion(insurer: Any, insured: bool, party: str | None) -> None:
    snapshot = {"booking": {"policySnapshot": {"coveragePolicy": {"insurerId": insurer}}}}
    assert has_insurer(snapshot) is insured
    assert insurer_id(snapshot) == party


def test_js_to_string() -> None:
    assert js_to_string([None, 1, [2, "a"], {}]) == ",1,2,a,[object Object]"
    assert js_to_string(0.5) == "0.5" and js_to_string(2.0) == "2" and js_to_string(False) == "false"
