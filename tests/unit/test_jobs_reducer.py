"""Reducer behaviour: illegal transitions, validation, untouched input on failure, snapshot updates."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from settlekit.errors import SettlekitError
from settlekit.events.canonical import canonical_json
from settlekit.jobs import (
    InvalidJobTransition,
    JobState,
    apply,
    clone_state,
    deserialize_state,
    initial_state,
    process_job_events,
    reduce,
    serialize_state,
    settlement_proof_ref_for,
    validate_payload,
)
from settlekit.jobs.reducer import check_transition
from support.streams import (
    OPERATOR_ACTOR,
    ROBOT_ACTOR,
    StreamBuilder,
    heartbeat,
    lifecycle_to_executing,
)


def _executing() -> tuple[StreamBuilder, JobState]:
    b = StreamBuilder()
    lifecycle_to_executing(b)
    return b, reduce(b.events)


def _frozen(state: JobState) -> str:
    return canonical_json(serialize_state(state))


def test_genesis_must_be_job_created() -> None:
    b = StreamBuilder()
    with pytest.raises(InvalidJobTransition):
        initial_state(b.draft("QUOTE_PROPOSED", {"amountCents": 1, "currency": "USD"}))
    with pytest.raises(SettlekitError) as exc:
        initial_state(b.draft("WHATEVER", {}))
    assert exc.value.code == "EVENT_TYPE_UNKNOWN"


def test_a_second_job_created_restarts_the_job_as_settlds_core_does() -> None:
    """Offline (settld's core): the job starts again at CREATED from the new JOB_CREATED, revision 0, keeping the
    lists its reducer collects over the whole stream. The live path refuses it (`check_transition`)."""
    b, state = _executing()
    b.add("INCIDENT_REPORTED", {"jobId": "job_test", "incidentId": "inc_1", "type": "DAMAGE_PROPERTY",
                                "severity": 2, "summary": "s", "reportedBy": "ops"})
    state = reduce(b.events)
    restart = b.add("JOB_CREATED", {"templateId": "second", "customerId": "cust_2"})
    after = apply(state, restart)
    snap = after.snapshot
    assert (snap["status"], snap["revision"], snap["templateId"], snap["customerId"]) == (
        "CREATED", 0, "second", "cust_2")
    assert snap["createdAt"] == restart["at"] and snap["lastEventId"] == restart["id"]
    assert snap["booking"] is None and snap["quote"] is None and snap["execution"]["startedAt"] is None
    assert [i["incidentId"] for i in snap["incidents"]] == ["inc_1"]
    assert after.facts["completedSeen"] == state.facts["completedSeen"]
    with pytest.raises(InvalidJobTransition) as exc:
        check_transition(state, restart)
    assert exc.value.code == "INVALID_TRANSITION" and exc.value.status == 409


def test_illegal_transition_names_status_and_type_and_leaves_state_untouched() -> None:
    b, state = _executing()
    before = _frozen(state)
    with pytest.raises(InvalidJobTransition) as exc:
        apply(state, b.draft("BOOKED", {}))
    err = exc.value
    assert err.details == {"fromStatus": "EXECUTING", "eventType": "BOOKED", "jobId": "job_test"}
    assert "EXECUTING" in str(err) and "BOOKED" in str(err)
    assert _frozen(state) == before


@pytest.mark.parametrize(("event_type", "actor"), [
    ("MADE_UP", None), ("NOTE_ADDED", None), ("ROBOT_HEARTBEAT", ROBOT_ACTOR), ("SETTLED ", None), ("settled", None),
])
def test_unknown_and_foreign_types_only_count_offline_and_are_refused_live(event_type: str, actor: Any) -> None:
    """settld's reducer takes any type: one outside its transition table is a revision and nothing else. The live
    path refuses it (EVENT_TYPE_UNKNOWN, or EVENT_TYPE_NOT_ALLOWED for another stream's type)."""
    b, state = _executing()
    event = b.draft(event_type, {"jobId": "job_test"}, actor or OPERATOR_ACTOR)
    after = apply(state, event)
    assert after.snapshot["status"] == "EXECUTING" and after.snapshot["revision"] == state.snapshot["revision"] + 1
    assert {k: v for k, v in after.snapshot.items() if k not in ("revision", "updatedAt", "lastChainHash",
                                                                  "lastEventId")} == {
        k: v for k, v in state.snapshot.items() if k not in ("revision", "updatedAt", "lastChainHash",
                                                             "lastEventId")}
    with pytest.raises(SettlekitError) as exc:
        check_transition(state, event)
    assert exc.value.code == ("EVENT_TYPE_NOT_ALLOWED" if event_type == "ROBOT_HEARTBEAT" else "EVENT_TYPE_UNKNOWN")


@pytest.mark.parametrize(
    ("payload", "field"),
    [
        ({"amountCents": -1, "currency": "USD"}, "amountCents"),
        ({"amountCents": True, "currency": "USD"}, "amountCents"),
        ({"amountCents": 1.5, "currency": "USD"}, "amountCents"),
        (
            {"amountCents": 100, "currency": "USD", "breakdown": {"coverageFeeCents": 101}},
            "breakdown.coverageFeeCents",
        ),
    ],
)
def test_quote_validation(payload: dict[str, Any], field: str) -> None:
    """The live path's check of a quote (settld's API has no QUOTE_PROPOSED validator); the reducer, as settld's
    core, takes the payload as sent."""
    b = StreamBuilder()
    state = initial_state(b.add("JOB_CREATED", {"templateId": "t"}))
    event = b.draft("QUOTE_PROPOSED", payload)
    with pytest.raises(SettlekitError) as exc:
        validate_payload(event, state.snapshot, state.facts)
    assert exc.value.code == "SCHEMA_INVALID" and exc.value.details["field"] == field
    assert apply(state, event).snapshot["quote"] == payload


def test_currencies_settld_does_not_check_are_taken_as_sent() -> None:
    """settld checks the currency of operator costs, SLA credits, risk scores and credit policies (USD), not of
    quotes, claims or skill prices: neither does settlekit, and the reducer keeps what was sent."""
    b = StreamBuilder()
    state = initial_state(b.add("JOB_CREATED", {"templateId": "t"}))
    state = apply(state, b.add("QUOTE_PROPOSED", {"amountCents": 100, "currency": "EUR"}))
    assert state.snapshot["quote"]["currency"] == "EUR"


def test_payload_job_id_must_match_stream_where_settld_checks_it() -> None:
    """settld's API refuses a payload.jobId naming another job (or null) for the types whose rules check it, not
    for the others; its core checks none: neither does settlekit offline."""
    b, state = _executing()
    stored = process_job_events(None, b.events).state
    beat = {"robotId": ROBOT_ACTOR["id"], "t": b.next_at, "stage": "TASK", "progress": 10}
    for job_id in ("other", None):
        with pytest.raises(SettlekitError) as exc:
            process_job_events(stored, [b.draft("JOB_HEARTBEAT", {**beat, "jobId": job_id}, ROBOT_ACTOR)], live=True)
        assert exc.value.code in ("JOB_ID_MISMATCH", "SCHEMA_INVALID")
        assert "payload.jobId" in exc.value.message
    apply(state, b.draft("JOB_HEARTBEAT", {**beat, "jobId": "other"}, ROBOT_ACTOR))
    process_job_events(stored, [b.draft("CHECKPOINT_REACHED", {"jobId": "other"}, ROBOT_ACTOR)], live=True)


def test_heartbeat_updates_execution_only() -> None:
    b, state = _executing()
    event = b.draft(
        "JOB_HEARTBEAT",
        {"t": "2026-01-05T11:00:00.000Z", "stage": "S2", "progress": 7, "assistRequested": True},
        ROBOT_ACTOR,
    )
    new = apply(state, event)
    ex = new.snapshot["execution"]
    assert (
        ex["lastHeartbeatAt"],
        ex["lastHeartbeatStage"],
        ex["lastHeartbeatProgress"],
        ex["lastHeartbeatAssistRequested"],
    ) == ("2026-01-05T11:00:00.000Z", "S2", 7, True)
    assert ex["stage"] == "TASK" and new.snapshot["revision"] == state.snapshot["revision"] + 1
    assert state.snapshot["execution"]["lastHeartbeatAt"] is None  # previous state unchanged
    assert new.status == "EXECUTING"


def test_job_execution_family_and_stall_resume() -> None:
    b = StreamBuilder()
    lifecycle_to_executing(b)
    b.events.pop()  # replace EXECUTION_STARTED by the newer family
    b.add("JOB_EXECUTION_STARTED", {"robotId": "rob_9", "stage": "A"}, ROBOT_ACTOR)
    b.add("ASSIST_REQUESTED", {}, ROBOT_ACTOR)
    b.add("JOB_EXECUTION_STALLED", {"reason": "stuck"})
    b.add("JOB_EXECUTION_RESUMED", {}, ROBOT_ACTOR)
    b.add("JOB_EXECUTION_COMPLETED", {}, ROBOT_ACTOR)
    stalled = reduce(b.events[:-2])
    assert stalled.snapshot["execution"]["stallReason"] == "stuck"
    s = reduce(b.events)
    ex = s.snapshot["execution"]
    assert ex["robotId"] == "rob_9" and ex["resumedAt"] is not None
    assert ex["stalledAt"] is None and ex["stallReason"] is None  # cleared on resume
    assert s.snapshot["assist"]["status"] == "none"  # reset on resume
    assert s.facts["completedSeen"] and not s.facts["legacyCompletedSeen"]
    assert s.facts["latestCompletion"]["eventId"] == b.events[-1]["id"]
    assert s.status == "COMPLETED"


def test_reschedule_clears_match_and_operator_state() -> None:
    b = StreamBuilder()
    lifecycle_to_executing(b)
    del b.events[5:]  # up to RESERVED
    b.add(
        "OPERATOR_COVERAGE_RESERVED",
        {"reservationId": "r", "operatorId": "op_1", "startAt": "a", "endAt": "b"},
    )
    b.add("ASSIST_QUEUED", {"queueId": "q1"})
    b.add(
        "JOB_RESCHEDULED",
        {"newWindow": {"startAt": "2026-01-06T10:00:00.000Z", "endAt": "2026-01-06T12:00:00.000Z"}},
    )
    s = reduce(b.events).snapshot
    assert s["status"] == "BOOKED" and s["match"] is None and s["reservation"] is None
    assert s["operatorPolicyHash"] is None and s["operatorCoverage"]["status"] == "none"
    assert s["assist"]["status"] == "none" and s["access"]["status"] == "none"
    assert (s["booking"]["startAt"], s["booking"]["endAt"]) == (
        "2026-01-06T10:00:00.000Z",
        "2026-01-06T12:00:00.000Z",
    )


def test_cancel_in_field_goes_to_safe_exit_then_abort() -> None:
    b, _ = _executing()
    b.add("JOB_CANCELLED", {"reason": "customer"})
    b.add("JOB_CANCELLED", {"reason": "again"})
    b.add("EXECUTION_ABORTED", {}, ROBOT_ACTOR)
    s = reduce(b.events)
    assert s.status == "ABORTED" and s.facts["abortedSeen"] and s.facts["legacyAbortedSeen"]
    assert s.snapshot["cancellation"] == {"reason": "again"}


def test_assist_pair_and_operator_assist_states() -> None:
    b, _ = _executing()
    b.add("ASSIST_ASSIGNED", {"operatorId": "op_2", "queueId": "q"})
    b.add("ASSIST_ACCEPTED", {"operatorId": "op_2"}, OPERATOR_ACTOR)
    b.add("ASSIST_STARTED", {"operatorId": "op_2"}, OPERATOR_ACTOR)
    heartbeat(b)
    b.add("ASSIST_ENDED", {}, OPERATOR_ACTOR)
    s = reduce(b.events)
    assert s.facts["assistStarted"] and s.status == "EXECUTING"
    assert s.snapshot["assist"]["status"] == "accepted" and s.snapshot["assist"]["operatorId"] == "op_2"


# Payloads settld's API validators accept (the live path applies them before the domain rules under test).
INCIDENT = {"type": "DAMAGE_PROPERTY", "severity": 2, "summary": "scratched door", "reportedBy": "ops"}
CLAIM = {"reasonCode": "DAMAGE_PROPERTY"}
OPERATOR_COST = {"costCents": 60, "currency": "USD", "assistSeconds": 60, "rateCentsPerMinute": 60,
                 "basis": "SHIFT_RATE"}


def _settled_with_incident() -> tuple[StreamBuilder, JobState]:
    b, _ = _executing()
    b.add("EXECUTION_COMPLETED", {}, ROBOT_ACTOR)
    b.add("SETTLED", {})
    b.add("INCIDENT_REPORTED", {**INCIDENT, "incidentId": "inc_1"})
    b.add("CLAIM_OPENED", {**CLAIM, "claimId": "clm_1", "incidentId": "inc_1"})
    return b, reduce(b.events)


@pytest.mark.parametrize(
    ("type_", "payload", "code"),
    [
        ("INCIDENT_REPORTED", {**INCIDENT, "incidentId": "inc_1", "severity": 1}, "INCIDENT_DUPLICATE"),
        ("INCIDENT_REPORTED", {**INCIDENT, "incidentId": "inc_2", "severity": 6}, "SCHEMA_INVALID"),
        ("CLAIM_OPENED", {**CLAIM, "claimId": "clm_1", "incidentId": "inc_1"}, "CLAIM_DUPLICATE"),
        ("CLAIM_OPENED", {**CLAIM, "claimId": "clm_2", "incidentId": "nope"}, "INCIDENT_NOT_FOUND"),
        (
            "CLAIM_PAID",
            {"claimId": "clm_1", "amountCents": 10, "currency": "USD", "paymentRef": "pay_1"},
            "CLAIM_TRANSITION_ILLEGAL",
        ),
        ("JOB_ADJUSTED", {"claimId": "clm_1", "adjustmentId": "adj_1"}, "CLAIM_TRANSITION_ILLEGAL"),
        ("JOB_ADJUSTED", {"claimId": "clm_9", "adjustmentId": "adj_1"}, "CLAIM_NOT_FOUND"),
        (
            "CLAIM_APPROVED",
            {"claimId": "clm_1", "amounts": {"payoutCents": 0, "refundCents": 0}, "currency": "USD"},
            "SCHEMA_INVALID",
        ),
        (
            "CLAIM_APPROVED",
            {"claimId": "clm_1", "amounts": {"payoutCents": 0, "refundCents": 6501}, "currency": "USD"},
            "CLAIM_AMOUNTS_INVALID",
        ),
        (
            "EVIDENCE_CAPTURED",
            {
                "evidenceId": "ev",
                "incidentId": "inc_x",
                "evidenceRef": "s3://x",
                "kind": "VIDEO_CLIP",
                "contentType": "video/mp4",
                "sizeBytes": 10,
            },
            "INCIDENT_NOT_FOUND",
        ),
        (
            "OPERATOR_COST_RECORDED",
            {**OPERATOR_COST, "settledEventId": "evt_wrong"},
            "SETTLED_EVENT_MISMATCH",
        ),
    ],
)
def test_domain_rejections_leave_state_untouched(type_: str, payload: dict[str, Any], code: str) -> None:
    """Payload errors are refused on every path; the API's domain rules (server_rules) on the live path only."""
    b, state = _settled_with_incident()
    stored = process_job_events(None, b.events).state
    before = _frozen(state), copy.deepcopy(stored)
    draft = b.draft(type_, payload)
    with pytest.raises(SettlekitError) as exc:
        process_job_events(stored, [draft], live=True)
    assert exc.value.code == code
    assert (_frozen(state), stored) == before
    if code != "SCHEMA_INVALID":
        apply(state, draft)  # offline (settld's core) the event is accepted


def test_claim_lifecycle_and_evidence() -> None:
    b, _ = _settled_with_incident()
    b.add(
        "EVIDENCE_CAPTURED",
        {
            "evidenceId": "ev_1",
            "incidentId": "inc_1",
            "evidenceRef": "s3://e",
            "kind": "photo",
            "contentType": "image/jpeg",
            "sizeBytes": 99,
        },
    )
    b.add("EVIDENCE_EXPIRED", {"evidenceId": "ev_1", "retentionDays": 30})
    b.add("CLAIM_TRIAGED", {"claimId": "clm_1", "triageCode": "OK", "notes": "n"}, OPERATOR_ACTOR)
    b.add("CLAIM_DENIED", {"claimId": "clm_1", "reasonCode": "NO", "notes": "nope"})
    s = reduce(b.events).snapshot
    claim = s["claims"][0]
    assert claim["status"] == "DENIED" and claim["denied"] == {"reasonCode": "NO", "notes": "nope"}
    assert claim["triagedBy"] == OPERATOR_ACTOR
    ev = s["evidence"][0]
    assert (
        ev["expiredAt"] == b.events[-3]["at"]
        and ev["retentionDays"] == 30
        and ev["expiredBy"]["id"] == "proxy"
    )


def test_post_settlement_accounting_once_per_settlement() -> None:
    b, state = _settled_with_incident()
    settled_id = state.snapshot["settlement"]["settledEventId"]
    payload = {**OPERATOR_COST, "settledEventId": settled_id}
    stored = process_job_events(None, b.events).state
    stored = process_job_events(stored, [b.add("OPERATOR_COST_RECORDED", payload)], live=True).state
    with pytest.raises(SettlekitError) as exc:
        process_job_events(stored, [b.draft("OPERATOR_COST_RECORDED", payload)], live=True)
    assert exc.value.code == "ALREADY_RECORDED_FOR_SETTLEMENT"
    # Offline the second cost is accepted and posted too (settld's core and postings).
    result = process_job_events(stored, [b.add("OPERATOR_COST_RECORDED", payload)])
    assert [x["eventType"] for x in result.ledger_entries] == ["OPERATOR_COST_RECORDED"]


def test_post_settlement_accounting_needs_settled_job() -> None:
    b, state = _executing()
    draft = b.draft("OPERATOR_COST_RECORDED", {**OPERATOR_COST, "settledEventId": None})
    with pytest.raises(SettlekitError) as exc:
        process_job_events(process_job_events(None, b.events).state, [draft], live=True)
    assert exc.value.code == "JOB_NOT_SETTLED"
    # Offline: accepted, and its posting is a recorded posting error.
    result = process_job_events(None, [*b.events, draft])
    assert result.ledger_errors == [{
        "eventId": draft["id"], "eventType": "OPERATOR_COST_RECORDED",
        "error": {"code": "JOB_NOT_SETTLED", "message": "OPERATOR_COST_RECORDED requires job to be SETTLED"},
    }]


def test_strict_gate_settlement_needs_proof_ref_and_builds_one() -> None:
    from support.streams import booking_payload

    b = StreamBuilder()
    lifecycle_to_executing(b, booking=booking_payload(gate_mode="strict"))
    completed = b.add("EXECUTION_COMPLETED", {}, ROBOT_ACTOR)
    state = reduce(b.events)
    with pytest.raises(SettlekitError) as exc:
        process_job_events(process_job_events(None, b.events).state, [b.draft("SETTLED", {})], live=True)
    assert exc.value.code == "PROOF_REQUIRED"
    assert settlement_proof_ref_for(state) is None
    state = apply(
        state,
        b.add(
            "PROOF_EVALUATED",
            {
                "evaluatedAt": b.next_at,
                "evaluatedAtChainHash": completed["chainHash"],
                "evaluationId": "ev1",
                "status": "PASS",
                "reasonCodes": [],
                "missingEvidence": [],
                "factsHash": "f" * 64,
            },
        ),
    )
    ref = settlement_proof_ref_for(state)
    assert ref is not None and ref["status"] == "PASS" and ref["proofEventId"] == b.events[-1]["id"]
    assert state.facts["proofStatusByAnchor"][completed["chainHash"]] == "PASS"
    state = apply(state, b.add("SETTLED", {"settlementProofRef": ref}))
    assert state.snapshot["settlement"]["settlementProofRef"] == ref


def test_serialize_roundtrip_and_clone_isolation() -> None:
    b, state = _settled_with_incident()
    data = copy.deepcopy(serialize_state(state))
    again = deserialize_state(data)
    assert again == state
    keep = clone_state(state)
    frozen = _frozen(keep)
    apply(state, b.add("CLAIM_TRIAGED", {"claimId": "clm_1", "triageCode": "X"}))
    assert _frozen(keep) == frozen
    with pytest.raises(SettlekitError) as exc:
        deserialize_state({"v": 99})
    assert exc.value.code == "JOB_STATE_INVALID"


def test_batch_failure_leaves_stored_state_untouched() -> None:
    b, _ = _executing()
    stored = process_job_events(None, b.events).state
    before = canonical_json(stored)
    ok = b.add("SKILL_USED", {"licenseId": "l"}, ROBOT_ACTOR)
    bad = b.draft("BOOKED", {})
    with pytest.raises(InvalidJobTransition):
        process_job_events(stored, [ok, bad])
    assert canonical_json(stored) == before


def test_load_facts_returns_a_private_copy_of_the_stored_rule_history() -> None:
    from settlekit.jobs import server_rules

    stored = {server_rules.STATE_KEY: {"disputes": {"d1": {"open": True, "events": ["e1"]}},
                                       "skillUsed": [{"skill": "s", "n": 1.5}], "tag": "x"}}
    before = copy.deepcopy(stored)
    facts = server_rules.load_facts(stored)
    assert {k: facts[k] for k in stored[server_rules.STATE_KEY]} == stored[server_rules.STATE_KEY]
    facts["disputes"]["d1"]["events"].append("e2")
    facts["skillUsed"][0]["n"] = 2
    facts["disputes"]["d2"] = {}
    assert stored == before
