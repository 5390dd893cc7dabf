"""settld's API domain rules on the live path, on corpus streams: DECISION_RECORDED (a forfeit decision needs a
completed job, an active hold and a new decisionId), RISK_SCORED features against the quote or booking,
PROOF_EVALUATED's required zone set hash."""

from __future__ import annotations

from typing import Any

import pytest

from conftest import load_differential
from settlekit.events.envelope import finalize
from settlekit.jobs import process_job_events
from support.live_states import live_refusal, state_before

STREAMS = {"d032_proof": 24, "d058_holds": 16, "d059_holds": 19}


def _before_decision(name: str) -> tuple[dict[str, Any], dict[str, Any]]:
    state, event = state_before(name, STREAMS[name])
    assert event["type"] == "DECISION_RECORDED"
    return state, event


@pytest.mark.parametrize("name", sorted(STREAMS))
def test_a_decision_is_recorded_once(name: str) -> None:
    state, decision = _before_decision(name)
    after = process_job_events(state, [decision], live=True).state
    again = {**decision, "id": decision["id"] + "_again"}
    assert live_refusal(after, again) == ("DECISION_ALREADY_RECORDED", "decision already recorded")
    process_job_events(after, [again])  # offline (settld's core) it is accepted


@pytest.mark.parametrize(("change", "expected"), [
    ({"kind": "OTHER"}, ("PAYLOAD_FIELD_INVALID", "payload.kind is not supported")),
    ({"decisionId": " "}, ("PAYLOAD_FIELD_INVALID", "payload.decisionId must be a non-empty string")),
    ({"holdId": "hold_unknown"}, ("SETTLEMENT_HOLD_NOT_ACTIVE", "forfeit decision requires an active hold")),
    ({"reasonCodes": "X"}, ("PAYLOAD_FIELD_INVALID", "payload.reasonCodes must be an array")),
    ({"decidedAt": "2026-01-01T00:00:00.000Z"}, ("EVENT_TIME_MISMATCH", "payload.decidedAt must match event.at")),
])
def test_a_decision_settld_refuses_is_refused_with_its_message(change: dict[str, Any],
                                                               expected: tuple[str, str]) -> None:
    state, decision = _before_decision("d032_proof")
    assert live_refusal(state, {**decision, "payload": {**decision["payload"], **change}}) == expected


def test_a_decision_needs_a_completed_job() -> None:
    events = load_differential("d032_proof")["events"]
    state = process_job_events(None, events[:1], live=True).state
    decision = events[STREAMS["d032_proof"]]
    assert live_refusal(state, decision) == (
        "STATUS_NOT_ALLOWED", "decision can only be recorded after completion and before settlement")


OTHER: dict[str, Any] = {"environmentTier": "ENV_IN_HOME", "zoneId": "zone_other", "siteId": "site_other"}


@pytest.mark.parametrize("feature", ["environmentTier", "requiresOperatorCoverage", "zoneId", "siteId"])
def test_risk_features_must_match_the_booking(feature: str) -> None:
    """(The corpus' quotes carry no `inputs`, so a QUOTE-basis score has nothing to match, in settld too.)"""
    state, risk = state_before("d001_basic", 3)
    assert risk["type"] == "RISK_SCORED" and risk["payload"]["basis"] == "BOOK"
    process_job_events(state, [risk], live=True)
    features = risk["payload"]["features"]
    assert features["environmentTier"] != OTHER["environmentTier"]
    changed = {**features, feature: OTHER.get(feature, not features[feature])}
    assert live_refusal(state, {**risk, "payload": {**risk["payload"], "features": changed}}) == (
        "RISK_FEATURES_MISMATCH", f"payload.features.{feature} must match booking {feature}")


def test_a_proof_names_the_bookings_required_zone_set() -> None:
    state, proof = state_before("d032_proof", 20)
    assert proof["type"] == "PROOF_EVALUATED" and proof["payload"]["requiredZonesHash"]
    process_job_events(state, [proof], live=True)
    for wrong in ("0" * 64, None):
        assert live_refusal(state, {**proof, "payload": {**proof["payload"], "requiredZonesHash": wrong}}) == (
            "ZONE_SET_MISMATCH", "payload.requiredZonesHash must match booking.requiredZonesHash")


@pytest.mark.parametrize(("change", "expected"), [
    ({"policy": {"heartbeatIntervalMs": 30000, "stallAfterMs": 180000}},
     ("LIVENESS_POLICY_MISMATCH", "payload.policy.heartbeatIntervalMs mismatch")),
    ({"policy": {"heartbeatIntervalMs": 60000, "stallAfterMs": 90000}},
     ("LIVENESS_POLICY_MISMATCH", "payload.policy.stallAfterMs mismatch")),
    ({"lastHeartbeatAt": "2026-01-20T10:00:20.000Z"},
     ("HEARTBEAT_MISMATCH", "payload.lastHeartbeatAt must match projected last heartbeat")),
])
def test_a_stall_follows_the_liveness_policy(change: dict[str, Any], expected: tuple[str, str]) -> None:
    state, stall = state_before("d016_coverage", 13)
    assert stall["type"] == "JOB_EXECUTION_STALLED"
    process_job_events(state, [stall], live=True)
    assert live_refusal(state, {**stall, "payload": {**stall["payload"], **change}}) == expected


def test_a_stall_must_be_past_the_threshold() -> None:
    state, stall = state_before("d016_coverage", 13)
    early = "2026-01-20T10:03:30.000Z"  # 3 min after the last heartbeat: not past 180 s
    refused = {**stall, "at": early, "payload": {**stall["payload"], "detectedAt": early}}
    assert live_refusal(state, refused) == ("STALL_NOT_DUE", "stall rejected: heartbeat is not past stall threshold")


def test_the_server_resumes_only_after_a_new_heartbeat() -> None:
    state, resume = state_before("d016_coverage", 15)
    assert resume["type"] == "JOB_EXECUTION_RESUMED" and resume["actor"]["type"] != "robot"
    process_job_events(state, [resume], live=True)
    stalled, _ = state_before("d016_coverage", 14)  # stalled, before the job's first heartbeat
    assert live_refusal(stalled, resume) == ("RESUME_NOT_ALLOWED", "server resume requires a heartbeat")


def test_a_decision_draft_is_completed_as_settlds_events_route_does() -> None:
    """A DECISION_RECORDED server draft with only its reason is completed (decisionId from the draft id, the latest
    hold, decidedAt = its time, the booking's policy hash) and then passes the rules."""
    from settlekit.jobs.drafts import complete_decision_draft
    from settlekit.jobs.server_rules import latest_hold_id, load_facts

    state, recorded = _before_decision("d032_proof")
    draft = {**recorded, "payload": {"reason": "EVIDENCE_NOT_PROVIDED"}}
    payload = complete_decision_draft(draft, state["snapshot"], latest_hold_id(load_facts(state)))
    assert payload["decisionId"] == f"dec_{draft['id']}" and payload["decidedAt"] == draft["at"]
    assert payload["holdId"] == recorded["payload"]["holdId"]
    assert payload["forfeitureReason"] == "EVIDENCE_NOT_PROVIDED" and payload["kind"] == "SETTLEMENT_FORFEIT"
    process_job_events(state, [{**draft, "payload": payload}], live=True)


_TOGETHER = "payload.operatorContractHash and payload.operatorPolicyHash must be provided together"
_COMPILER = "payload.operatorCompilerId must be a non-empty string"


@pytest.mark.parametrize(("change", "expected"), [
    ({}, None),
    ({"operatorCompilerId": None}, None),
    ({"operatorCompilerId": "\u001c"}, None),  # not white space to JavaScript's trim
    ({"operatorCompilerId": " "}, _COMPILER),
    ({"operatorCompilerId": ""}, _COMPILER),
    ({"operatorCompilerId": "\ufeff"}, _COMPILER),
    ({"operatorCompilerId": "\u00a0"}, _COMPILER),
    ({"operatorCompilerId": 7}, _COMPILER),
    ({"operatorCompilerId": False}, _COMPILER),
    ({"operatorContractHash": None, "operatorPolicyHash": None, "operatorCompilerId": None}, None),
    ({"operatorContractHash": None, "operatorPolicyHash": None}, _TOGETHER),  # the compiler id stays
    ({"operatorContractHash": None, "operatorPolicyHash": None, "operatorCompilerId": 7}, _TOGETHER),
    ({"operatorContractHash": None, "operatorCompilerId": " "}, _TOGETHER),
    ({"operatorPolicyHash": "x"}, "payload.operatorPolicyHash must be a 64-byte hex sha256"),
    ({"robotId": "\u001c"}, None),
    ({"robotId": "\ufeff"}, "payload.robotId must be a non-empty string"),
])
def test_a_match_is_judged_as_settlds_events_route_judges_it(change: dict[str, Any], expected: str | None) -> None:
    """settld 0.1.0's verdicts on MATCHED (d006_basic's, with an operator contract) so changed: a compiler id or
    either hash needs both hashes, and a compiler id is then a string JavaScript's trim leaves non-empty."""
    state, match = state_before("d006_basic", 7)
    assert match["type"] == "MATCHED" and match["payload"]["operatorCompilerId"]
    event = {**match, "payload": {**match["payload"], **change}}
    if expected is None:
        process_job_events(state, [event], live=True)
    else:
        assert live_refusal(state, event)[1] == expected


def _without_zone(events: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The stream re-chained (unsigned) with no zone on the job: none in JOB_CREATED's constraints or the booking."""
    out, prev = [], None
    for e in events:
        payload = e["payload"]
        if e["type"] == "JOB_CREATED":
            payload = {**payload, "constraints": {k: v for k, v in payload["constraints"].items() if k != "zoneId"}}
        elif e["type"] == "BOOKED":
            payload = {k: v for k, v in payload.items() if k != "zoneId"}
        event = finalize({**{k: e[k] for k in ("v", "id", "at", "streamId", "type", "actor")}, "payload": payload},
                         prev)
        prev = event["chainHash"]
        out.append(event)
    return out


@pytest.mark.parametrize(("zone", "zoned", "unzoned"), [
    (None, True, True),
    ("zone_a", True, False),
    (" zone_a ", True, False),
    ("\ufeffzone_a", True, False),  # white space to JavaScript's trim
    ("zone_a\u001c", False, False),  # not white space to it
    ("zone_default", False, True),  # settld's zone of a job without one
    (" zone_default ", False, True),
    ("zone_b", False, False),
])
def test_an_operator_costs_zone_is_the_jobs_as_settld_normalizes_zone_ids(zone: str | None, zoned: bool,
                                                                            unzoned: bool) -> None:
    """settld 0.1.0's verdicts on d064_sla's OPERATOR_COST_RECORDED with `payload.zoneId` so set, on the stream
    (job zone zone_a) and on it without a zone: a zone id is trimmed as by JavaScript, none is `zone_default`."""
    events = load_differential("d064_sla")["events"][:18]
    assert events[17]["type"] == "OPERATOR_COST_RECORDED"
    for stream, accepted in ((events, zoned), (_without_zone(events), unzoned)):
        state = None
        for event in stream[:17]:
            state = process_job_events(state, [event], live=True).state
        assert state is not None
        cost = stream[17]
        cost = {**cost, "payload": {**cost["payload"], "zoneId": zone}}
        if accepted:
            process_job_events(state, [cost], live=True)
        else:
            assert live_refusal(state, cost) == ("ZONE_MISMATCH", "payload.zoneId must match job zone")
