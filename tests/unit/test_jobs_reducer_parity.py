"""Snapshot values that follow settld's reducer (issue 10): payload times over `event.at`, what a resume
clears, heartbeat robot ids, assist/access/coverage/hold/dispute/claim/evidence details, and the keyed lists."""

from __future__ import annotations

from typing import Any

from settlekit.jobs import reduce
from support.streams import OPERATOR_ACTOR, ROBOT_ACTOR, SERVER_ACTOR, StreamBuilder, lifecycle_to_executing

T_PAYLOAD = "2026-01-05T09:00:00.000Z"  # a payload time that differs from every event.at


def _executing_new_family() -> StreamBuilder:
    b = StreamBuilder()
    lifecycle_to_executing(b)
    b.events.pop()
    b.add("JOB_EXECUTION_STARTED", {"robotId": "rob_9", "stage": "A", "startedAt": T_PAYLOAD}, ROBOT_ACTOR)
    return b


def build_parity_stream() -> StreamBuilder:
    """One stream touching every class; `test_..._matches_reference` below pins the resulting snapshot."""
    b = _executing_new_family()
    b.add("JOB_HEARTBEAT", {"t": "2026-01-05T09:00:01.000Z", "robotId": "rob_7", "progress": 10}, ROBOT_ACTOR)
    b.add("ASSIST_REQUESTED", {"requestedAt": "2026-01-05T09:00:02.000Z"}, ROBOT_ACTOR)
    b.add("ASSIST_QUEUED", {"queueId": "q_1", "queuedAt": "2026-01-05T09:00:03.000Z"})
    b.add("ASSIST_ASSIGNED", {"operatorId": "op_1", "assignedAt": "2026-01-05T09:00:04.000Z"})
    b.add("ASSIST_TIMEOUT", {"timedOutAt": "2026-01-05T09:00:05.000Z", "reason": "NO_ANSWER"})
    b.add("JOB_EXECUTION_STALLED", {"reason": "stuck", "detectedAt": "2026-01-05T09:00:06.000Z"})
    return b


def test_resume_clears_the_stall_and_the_whole_assist_episode() -> None:
    b = build_parity_stream()
    stalled = reduce(b.events).snapshot
    assert stalled["execution"]["stalledAt"] == "2026-01-05T09:00:06.000Z"
    assert stalled["execution"]["stallReason"] == "stuck"
    assert stalled["assist"] == {
        "status": "timeout",
        "queueId": "q_1",
        "operatorId": "op_1",
        "requestedAt": "2026-01-05T09:00:02.000Z",
        "queuedAt": "2026-01-05T09:00:03.000Z",
        "assignedAt": "2026-01-05T09:00:04.000Z",
        "acceptedAt": None,
        "declinedAt": None,
        "timedOutAt": "2026-01-05T09:00:05.000Z",
        "timeoutReason": "NO_ANSWER",
    }
    b.add("JOB_EXECUTION_RESUMED", {"resumedAt": "2026-01-05T09:00:07.000Z"}, ROBOT_ACTOR)
    s = reduce(b.events).snapshot
    ex = s["execution"]
    assert ex["stalledAt"] is None and ex["stallReason"] is None
    assert ex["resumedAt"] == "2026-01-05T09:00:07.000Z"
    assert s["assist"] == {
        "status": "none",
        "queueId": None,
        "operatorId": None,
        "queuedAt": None,
        "assignedAt": None,
        "acceptedAt": None,
        "declinedAt": None,
        "timedOutAt": None,
        "timeoutReason": None,
    }
    # without a payload time the event's own time is used
    b2 = _executing_new_family()
    b2.add("JOB_EXECUTION_STALLED", {"reason": "stuck"})
    resumed = b2.add("JOB_EXECUTION_RESUMED", {}, ROBOT_ACTOR)
    s2 = reduce(b2.events).snapshot
    assert s2["execution"]["resumedAt"] == resumed["at"] and s2["execution"]["stalledAt"] is None


def test_payload_times_and_heartbeat_robot_id() -> None:
    b = build_parity_stream()
    ex = reduce(b.events).snapshot["execution"]
    assert ex["startedAt"] == T_PAYLOAD  # JOB_EXECUTION_STARTED.startedAt
    assert ex["lastHeartbeatAt"] == "2026-01-05T09:00:01.000Z"
    assert ex["robotId"] == "rob_7"  # the heartbeat's robot replaces the starter's
    assert ex["stage"] == "A" and ex["lastHeartbeatStage"] is None and ex["lastHeartbeatProgress"] == 10
    b.add("JOB_HEARTBEAT", {"t": "2026-01-05T09:00:09.000Z"}, ROBOT_ACTOR)  # no robotId: kept
    assert reduce(b.events).snapshot["execution"]["robotId"] == "rob_7"


def test_legacy_start_takes_the_acting_robot_and_keeps_the_stage() -> None:
    b = StreamBuilder()
    lifecycle_to_executing(b)
    b.events.pop()
    started = b.add("EXECUTION_STARTED", {"robotId": "rob_payload"}, {"type": "robot", "id": "rob_actor"})
    ex = reduce(b.events).snapshot["execution"]
    assert ex["robotId"] == "rob_actor" and ex["startedAt"] == started["at"] and ex["stage"] is None


def test_assist_assignment_replaces_the_operator_and_acceptance_keeps_it() -> None:
    b = _executing_new_family()
    b.add("ASSIST_QUEUED", {"queueId": "q_1"})
    b.add("ASSIST_ACCEPTED", {"operatorId": "op_1"}, OPERATOR_ACTOR)
    b.add("ASSIST_DECLINED", {}, OPERATOR_ACTOR)
    assist = reduce(b.events).snapshot["assist"]
    assert assist["operatorId"] == "op_1" and assist["queueId"] == "q_1" and assist["status"] == "declined"
    b.add("ASSIST_ASSIGNED", {"operatorId": "op_2"})
    b.add("ASSIST_TIMEOUT", {})
    last = b.events[-1]
    assist = reduce(b.events).snapshot["assist"]
    assert assist["operatorId"] == "op_2" and assist["queueId"] == "q_1"
    assert assist["timedOutAt"] == last["at"] and assist["timeoutReason"] is None


def test_access_plan_reissue_and_coverage_release_of_another_reservation() -> None:
    b = _executing_new_family()
    b.add("ACCESS_PLAN_ISSUED", {"accessPlanId": "ap_1"})  # the granted plan again: status stays granted
    assert reduce(b.events).snapshot["access"]["status"] == "granted"
    b.add("ACCESS_PLAN_ISSUED", {"accessPlanId": "ap_2"})
    assert reduce(b.events).snapshot["access"] | {"grantedAt": None} == {
        "status": "planned", "accessPlanId": "ap_2", "grantedAt": None, "deniedAt": None, "revokedAt": None,
        "expiredAt": None,
    }
    cov = {"reservationId": "cr_1", "operatorId": "op_1", "startAt": T_PAYLOAD, "endAt": T_PAYLOAD}
    b.add("OPERATOR_COVERAGE_RESERVED", cov)
    b.add("OPERATOR_COVERAGE_RELEASED", {"reservationId": "cr_other"})
    assert reduce(b.events).snapshot["operatorCoverage"]["status"] == "reserved"
    released = b.add("OPERATOR_COVERAGE_RELEASED", {"reservationId": "cr_1"})
    coverage = reduce(b.events).snapshot["operatorCoverage"]
    assert coverage["status"] == "released" and coverage["releasedAt"] == released["at"]


def _settled_stream() -> StreamBuilder:
    b = _executing_new_family()
    b.add("JOB_EXECUTION_COMPLETED", {}, ROBOT_ACTOR)
    return b


def test_settlement_hold_reads_the_exposure_and_release_keeps_the_hold_fields() -> None:
    b = _settled_stream()
    exposure = {
        "expected": {"amountCents": 6500, "currency": "USD"},
        "held": {"amountCents": 3250, "currency": "USD"},
        "holdPolicy": {"mode": "HOLD_PERCENT", "percent": 50},
    }
    hold = {"holdId": "hold_1", "heldAt": "2026-01-05T09:10:00.000Z", "reasonCodes": ["X"], "exposure": exposure}
    b.add("SETTLEMENT_HELD", hold)
    b.add("SETTLEMENT_HELD", hold | {"heldAt": "2026-01-05T09:20:00.000Z"})  # an update of the open hold
    h = reduce(b.events).snapshot["settlementHold"]
    assert h["heldAt"] == "2026-01-05T09:10:00.000Z" and h["lastUpdatedAt"] == "2026-01-05T09:20:00.000Z"
    assert h["currency"] == "USD" and h["expectedExposure"] == exposure["expected"]
    assert h["heldExposure"] == exposure["held"] and h["holdPolicy"] == exposure["holdPolicy"]
    assert h["missingEvidence"] is None
    released = b.add("SETTLEMENT_RELEASED", {"holdId": "hold_1", "releaseReason": "PROOF_UPDATED"})
    r = reduce(b.events).snapshot["settlementHold"]
    assert r["status"] == "RELEASED" and r["releasedAt"] == released["at"]
    assert r["lastUpdatedAt"] == "2026-01-05T09:20:00.000Z"  # a release does not touch lastUpdatedAt
    assert r["heldExposure"] == exposure["held"] and r["releasingProofRef"] is None


def test_dispute_actors_are_the_event_actors() -> None:
    b = _settled_stream()
    b.add("DISPUTE_OPENED", {"disputeId": "d_1", "openedBy": "someone_else"}, OPERATOR_ACTOR)
    d = reduce(b.events).snapshot["dispute"]
    assert d["openedBy"] == OPERATOR_ACTOR
    b.add("DISPUTE_CLOSED", {"disputeId": "d_1", "closedAt": T_PAYLOAD})
    d = reduce(b.events).snapshot["dispute"]
    assert d["closedBy"] == SERVER_ACTOR and d["closedAt"] == T_PAYLOAD


def test_proof_without_missing_evidence_keeps_null() -> None:
    b = _settled_stream()
    done = b.events[-1]
    b.add("PROOF_EVALUATED", {"evaluatedAtChainHash": done["chainHash"], "evaluationId": "ev_1", "status": "PASS"})
    proof = reduce(b.events).snapshot["proof"]
    assert proof["missingEvidence"] is None and proof["reasonCodes"] == []
    assert proof["evaluatedAt"] == b.events[-1]["at"]


def _incident(b: StreamBuilder, inc: str = "inc_1") -> None:
    b.add("INCIDENT_REPORTED", {"incidentId": inc, "type": "DAMAGE", "severity": 2})


def test_evidence_retention_comes_from_the_expiry_only() -> None:
    b = _settled_stream()
    _incident(b)
    b.add(
        "EVIDENCE_CAPTURED",
        {"evidenceId": "ev_1", "incidentId": "inc_1", "evidenceRef": "obj://a", "kind": "VIDEO",
         "contentType": "video/mp4", "sizeBytes": 10, "retentionDays": 30},
        ROBOT_ACTOR,
    )
    assert reduce(b.events).snapshot["evidence"][0]["retentionDays"] is None
    expired = b.add("EVIDENCE_EXPIRED", {"evidenceId": "ev_1", "evidenceRef": "obj://b", "retentionDays": 7})
    ev = reduce(b.events).snapshot["evidence"][0]
    assert ev["retentionDays"] == 7 and ev["evidenceRef"] == "obj://b" and ev["expiredAt"] == expired["at"]


def test_claim_triage_and_adjustment_keep_earlier_values() -> None:
    b = _settled_stream()
    _incident(b)
    b.add("CLAIM_OPENED", {"claimId": "clm_1", "incidentId": "inc_1"})
    b.add("CLAIM_TRIAGED", {"claimId": "clm_1", "triageCode": "T1", "notes": "first"})
    b.add("CLAIM_TRIAGED", {"claimId": "clm_1"})
    claim = reduce(b.events).snapshot["claims"][0]
    assert claim["status"] == "TRIAGED" and claim["triageCode"] == "T1" and claim["triageNotes"] == "first"


def test_snapshot_matches_reference_for_the_parity_stream() -> None:
    b = build_parity_stream()
    b.add("JOB_EXECUTION_RESUMED", {"resumedAt": "2026-01-05T09:00:07.000Z"}, ROBOT_ACTOR)
    s: dict[str, Any] = reduce(b.events).snapshot
    # the settld 0.1.0 reducer gives these exact sub-objects for this stream
    assert s["execution"] == {
        "startedAt": T_PAYLOAD,
        "robotId": "rob_7",
        "stage": "A",
        "lastHeartbeatAt": "2026-01-05T09:00:01.000Z",
        "lastHeartbeatStage": None,
        "lastHeartbeatProgress": 10,
        "lastHeartbeatAssistRequested": None,
        "stalledAt": None,
        "stallReason": None,
        "resumedAt": "2026-01-05T09:00:07.000Z",
        "completedAt": None,
        "abortedAt": None,
    }
    assert s["status"] == "EXECUTING" and s["revision"] == len(b.events) - 1


def test_claim_approval_keeps_the_amounts_object_as_sent() -> None:
    b = _settled_stream()
    _incident(b)
    b.add("CLAIM_OPENED", {"claimId": "clm_1", "incidentId": "inc_1"})
    amounts = {"payoutCents": 100, "refundCents": 0, "basis": "manual"}
    b.add("CLAIM_APPROVED", {"claimId": "clm_1", "amounts": amounts, "currency": "USD"})
    assert reduce(b.events).snapshot["claims"][0]["approved"] == {"amounts": amounts, "currency": "USD", "notes": None}
