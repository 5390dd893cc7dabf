"""States, transition table, known types and the signer policy."""

from __future__ import annotations

import pytest

from settlekit.errors import SettlekitError
from settlekit.jobs import (
    JOB_EVENT_TYPES,
    JOB_STATES,
    KNOWN_EVENT_TYPES,
    SIGNER_POLICY,
    TRANSITIONS,
    require_known_event_type,
    required_signer_kind,
    signer_policy,
)


def test_fourteen_states() -> None:
    assert len(JOB_STATES) == 14 and len(set(JOB_STATES)) == 14


def test_transition_types_are_exactly_the_spec_list() -> None:
    assert set(TRANSITIONS) == {
        "QUOTE_PROPOSED",
        "BOOKED",
        "MATCHED",
        "RESERVED",
        "EN_ROUTE",
        "ACCESS_GRANTED",
        "EXECUTION_STARTED",
        "JOB_EXECUTION_STARTED",
        "ASSIST_STARTED",
        "ASSIST_ENDED",
        "EXECUTION_COMPLETED",
        "JOB_EXECUTION_COMPLETED",
        "EXECUTION_ABORTED",
        "JOB_EXECUTION_ABORTED",
        "JOB_EXECUTION_STALLED",
        "JOB_EXECUTION_RESUMED",
        "JOB_RESCHEDULED",
        "JOB_CANCELLED",
        "ACCESS_REVOKED",
        "ACCESS_EXPIRED",
        "SETTLED",
    }


@pytest.mark.parametrize(
    ("from_status", "event_type", "to_status"),
    [
        ("CREATED", "QUOTE_PROPOSED", "QUOTED"),
        ("ACCESS_GRANTED", "JOB_EXECUTION_STARTED", "EXECUTING"),
        ("STALLED", "EXECUTION_COMPLETED", "COMPLETED"),
        ("ABORTING_SAFE_EXIT", "JOB_EXECUTION_ABORTED", "ABORTED"),
        ("RESERVED", "JOB_RESCHEDULED", "BOOKED"),
        ("QUOTED", "ACCESS_EXPIRED", "ABORTED"),
        ("STALLED", "ACCESS_REVOKED", "ABORTING_SAFE_EXIT"),
        ("ABORTING_SAFE_EXIT", "JOB_CANCELLED", "ABORTING_SAFE_EXIT"),
        ("ABORTED", "SETTLED", "SETTLED"),
    ],
)
def test_transition_rows(from_status: str, event_type: str, to_status: str) -> None:
    assert TRANSITIONS[event_type][from_status] == to_status


@pytest.mark.parametrize(
    ("from_status", "event_type"),
    [
        ("ABORTING_SAFE_EXIT", "ACCESS_REVOKED"),
        ("ABORTING_SAFE_EXIT", "ACCESS_EXPIRED"),
        ("ABORTING_SAFE_EXIT", "EXECUTION_COMPLETED"),
        ("SETTLED", "SETTLED"),
        ("EN_ROUTE", "JOB_RESCHEDULED"),
        ("STALLED", "JOB_EXECUTION_STALLED"),
        ("EXECUTING", "ASSIST_ENDED"),
    ],
)
def test_illegal_rows_are_absent(from_status: str, event_type: str) -> None:
    assert from_status not in TRANSITIONS[event_type]


def test_every_state_is_reachable_and_settled_is_a_sink() -> None:
    targets = {to for row in TRANSITIONS.values() for to in row.values()}
    assert targets | {"CREATED"} == set(JOB_STATES)
    assert all("SETTLED" not in row for row in TRANSITIONS.values())


def test_job_types_are_known_and_other_streams_too() -> None:
    assert JOB_EVENT_TYPES <= KNOWN_EVENT_TYPES
    for t in (
        "ROBOT_HEARTBEAT",
        "OPERATOR_SHIFT_OPENED",
        "MONTH_CLOSED",
        "SERVER_SIGNER_KEY_ROTATED",
        "INSURER_REIMBURSEMENT_RECORDED",
        "CORRELATION_RELINKED",
    ):
        assert require_known_event_type(t) == t


@pytest.mark.parametrize("bad", ["NOPE", "job_heartbeat", "", None, 5])
def test_unknown_type_is_rejected(bad: object) -> None:
    with pytest.raises(SettlekitError) as exc:
        require_known_event_type(bad)
    assert exc.value.code == "EVENT_TYPE_UNKNOWN" and exc.value.status == 400


def test_signer_policy_covers_every_known_type() -> None:
    assert set(SIGNER_POLICY) == set(KNOWN_EVENT_TYPES)


@pytest.mark.parametrize(
    ("event_type", "actor_type", "kind"),
    [
        ("JOB_HEARTBEAT", "robot", "robot"),
        ("JOB_HEARTBEAT", "system", "robot"),
        ("ASSIST_STARTED", "operator", "operator"),
        ("ACCESS_GRANTED", "operator", "operator"),
        ("ACCESS_GRANTED", "robot", "robot"),
        ("INCIDENT_REPORTED", "operator", "operator"),
        ("INCIDENT_REPORTED", "system", "server"),
        ("CLAIM_TRIAGED", "robot", "server"),
        ("EVIDENCE_CAPTURED", "robot", "robot"),
        ("JOB_EXECUTION_ABORTED", "system", "server"),
        ("ROBOT_UNHEALTHY", "robot", "robot"),
        ("SETTLED", "robot", "server"),
        ("MONTH_CLOSED", "system", "server"),
        ("ROBOT_HEARTBEAT", "robot", "robot"),
        ("OPERATOR_SHIFT_CLOSED", "operator", "operator"),
    ],
)
def test_required_signer_kind(event_type: str, actor_type: str, kind: str) -> None:
    assert required_signer_kind(event_type, actor_type) == kind


def test_signer_policy_rows() -> None:
    assert signer_policy("SKILL_USED") == "robot_or_operator"
    assert signer_policy("JOB_EXECUTION_RESUMED") == "server_or_robot"
    assert signer_policy("CLAIM_TRIAGED") == "server_or_operator"
    with pytest.raises(SettlekitError):
        required_signer_kind("UNKNOWN_TYPE", "robot")
