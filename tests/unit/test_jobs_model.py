"""Model-based test: random event sequences against the transition table. Legal events are accepted and move
the status as the table says; illegal ones are rejected and leave the stored state unchanged."""

from __future__ import annotations

import json
from typing import Any

from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, rule

from settlekit.errors import SettlekitError
from settlekit.jobs import TRANSITIONS, process_job_events
from support.streams import OPERATOR_ACTOR, ROBOT_ACTOR, StreamBuilder, booking_payload

CANDIDATES: dict[str, tuple[dict[str, Any], dict[str, str] | None]] = {
    "QUOTE_PROPOSED": (
        {"amountCents": 5000, "currency": "USD", "breakdown": {"coverageFeeCents": 200}},
        None,
    ),
    "BOOKED": (booking_payload(coverage_fee=200, reserve_fund_percent=10), None),
    "MATCHED": ({"robotId": "rob_1"}, None),
    "RESERVED": ({"robotId": "rob_1"}, None),
    "EN_ROUTE": ({}, ROBOT_ACTOR),
    "ACCESS_GRANTED": ({"accessPlanId": "ap"}, ROBOT_ACTOR),
    "EXECUTION_STARTED": ({"stage": "TASK"}, ROBOT_ACTOR),
    "JOB_EXECUTION_STARTED": ({"robotId": "rob_2"}, ROBOT_ACTOR),
    "ASSIST_STARTED": ({}, OPERATOR_ACTOR),
    "ASSIST_ENDED": ({}, OPERATOR_ACTOR),
    "EXECUTION_COMPLETED": ({}, ROBOT_ACTOR),
    "JOB_EXECUTION_COMPLETED": ({}, ROBOT_ACTOR),
    "EXECUTION_ABORTED": ({}, ROBOT_ACTOR),
    "JOB_EXECUTION_ABORTED": ({}, ROBOT_ACTOR),
    "JOB_EXECUTION_STALLED": ({"reason": "stuck"}, None),
    "JOB_EXECUTION_RESUMED": ({}, ROBOT_ACTOR),
    "JOB_RESCHEDULED": (
        {"newWindow": {"startAt": "2026-02-01T10:00:00.000Z", "endAt": "2026-02-01T11:00:00.000Z"}},
        None,
    ),
    "JOB_CANCELLED": ({"reason": "r"}, None),
    "ACCESS_REVOKED": ({}, None),
    "ACCESS_EXPIRED": ({}, None),
    "SETTLED": ({}, None),
    "JOB_HEARTBEAT": ({"stage": "TASK", "progress": 1}, ROBOT_ACTOR),
    "RISK_SCORED": ({"basis": "QUOTE", "sourceEventId": "x"}, None),
    "JOB_CREATED": ({"templateId": "t"}, None),
    "NOT_A_TYPE": ({}, None),
}


class JobMachine(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.b = StreamBuilder()
        first = self.b.add("JOB_CREATED", {"templateId": "t", "customerId": "cust_1"})
        self.stored: dict[str, Any] = process_job_events(None, [first]).state
        self.status = "CREATED"
        self.quoted = False
        self.entries = 0
        self.revision = 0

    @rule(event_type=st.sampled_from(sorted(CANDIDATES)))
    def append(self, event_type: str) -> None:
        payload, actor = CANDIDATES[event_type]
        payload = dict(payload)
        if event_type == "JOB_HEARTBEAT":
            payload["t"] = self.b.next_at
        event = self.b.draft(event_type, payload, actor)
        row = TRANSITIONS.get(event_type)
        # As settld's core: a JOB_CREATED restarts the job at CREATED, an unknown type changes no status.
        if event_type == "JOB_CREATED":
            expected: str | None = "CREATED"
        elif row is None:
            expected = self.status
        else:
            expected = row.get(self.status)
        # SETTLED without a quote is a legal transition; its posting fails, which is recorded, not refused.
        before = json.dumps(self.stored, sort_keys=True)
        try:
            result = process_job_events(self.stored, [event])
        except SettlekitError as exc:
            assert expected is None, f"{event_type} from {self.status} rejected: {exc}"
            assert json.dumps(self.stored, sort_keys=True) == before
            return
        assert expected is not None, f"{event_type} from {self.status} accepted"
        self.b.events.append(event)
        self.stored = json.loads(json.dumps(result.state))
        self.status = expected
        self.quoted = (self.quoted or event_type == "QUOTE_PROPOSED") and event_type != "JOB_CREATED"
        self.revision = 0 if event_type == "JOB_CREATED" else self.revision + 1
        self.entries += len(result.ledger_entries)
        if event_type == "SETTLED" and not self.quoted:
            assert [x["error"]["code"] for x in result.ledger_errors] == ["QUOTE_MISSING"]
        for item in result.ledger_entries:
            assert sum(p["amountCents"] for p in item["entry"]["postings"]) == 0

    @invariant()
    def snapshot_matches_model(self) -> None:
        snap = self.stored["snapshot"]
        assert snap["status"] == self.status
        assert snap["revision"] == self.revision
        assert snap["lastEventId"] == self.b.events[-1]["id"]


JobMachine.TestCase.settings = settings(max_examples=60, stateful_step_count=40, deadline=None)
TestJobMachine = JobMachine.TestCase
