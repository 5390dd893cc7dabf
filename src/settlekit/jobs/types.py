"""Job states, the transition table, every known event type and the signer policy (02-jobs.md, 01-events.md §8)."""

from __future__ import annotations

from typing import Final, Literal

from settlekit.errors import SettlekitError

# --- states ---

CREATED: Final = "CREATED"
QUOTED: Final = "QUOTED"
BOOKED: Final = "BOOKED"
MATCHED: Final = "MATCHED"
RESERVED: Final = "RESERVED"
EN_ROUTE: Final = "EN_ROUTE"
ACCESS_GRANTED: Final = "ACCESS_GRANTED"
EXECUTING: Final = "EXECUTING"
ASSISTED: Final = "ASSISTED"
STALLED: Final = "STALLED"
ABORTING_SAFE_EXIT: Final = "ABORTING_SAFE_EXIT"
COMPLETED: Final = "COMPLETED"
ABORTED: Final = "ABORTED"
SETTLED: Final = "SETTLED"

JOB_STATES: Final[tuple[str, ...]] = (
    CREATED,
    QUOTED,
    BOOKED,
    MATCHED,
    RESERVED,
    EN_ROUTE,
    ACCESS_GRANTED,
    EXECUTING,
    ASSISTED,
    STALLED,
    ABORTING_SAFE_EXIT,
    COMPLETED,
    ABORTED,
    SETTLED,
)
EXECUTION_TERMINAL_STATES: Final = frozenset({COMPLETED, ABORTED})
FINANCIAL_TERMINAL_STATES: Final = frozenset({SETTLED})
TERMINAL_STATES: Final = frozenset({COMPLETED, ABORTED, SETTLED})

# --- transition table (02-jobs.md §2): event type -> {from status: to status} ---

_PRE_TRANSIT = (CREATED, QUOTED, BOOKED, MATCHED, RESERVED)
_IN_FIELD = (EN_ROUTE, ACCESS_GRANTED, EXECUTING, ASSISTED, STALLED)


def _build_transitions() -> dict[str, dict[str, str]]:
    table: dict[str, dict[str, str]] = {}

    def add(froms: tuple[str, ...], types: tuple[str, ...], to: str) -> None:
        for t in types:
            row = table.setdefault(t, {})
            for f in froms:
                row[f] = to

    add((CREATED,), ("QUOTE_PROPOSED",), QUOTED)
    add((QUOTED,), ("BOOKED",), BOOKED)
    add((BOOKED,), ("MATCHED",), MATCHED)
    add((MATCHED,), ("RESERVED",), RESERVED)
    add((RESERVED,), ("EN_ROUTE",), EN_ROUTE)
    add((EN_ROUTE,), ("ACCESS_GRANTED",), ACCESS_GRANTED)
    add((ACCESS_GRANTED,), ("EXECUTION_STARTED", "JOB_EXECUTION_STARTED"), EXECUTING)
    add((EXECUTING,), ("ASSIST_STARTED",), ASSISTED)
    add((ASSISTED,), ("ASSIST_ENDED",), EXECUTING)
    add((EXECUTING, ASSISTED, STALLED), ("EXECUTION_COMPLETED", "JOB_EXECUTION_COMPLETED"), COMPLETED)
    add(
        (EXECUTING, ASSISTED, STALLED, ABORTING_SAFE_EXIT),
        ("EXECUTION_ABORTED", "JOB_EXECUTION_ABORTED"),
        ABORTED,
    )
    add((EXECUTING, ASSISTED), ("JOB_EXECUTION_STALLED",), STALLED)
    add((STALLED,), ("JOB_EXECUTION_RESUMED",), EXECUTING)
    add((BOOKED, MATCHED, RESERVED), ("JOB_RESCHEDULED",), BOOKED)
    add(_PRE_TRANSIT, ("JOB_CANCELLED", "ACCESS_REVOKED", "ACCESS_EXPIRED"), ABORTED)
    add(_IN_FIELD, ("JOB_CANCELLED", "ACCESS_REVOKED", "ACCESS_EXPIRED"), ABORTING_SAFE_EXIT)
    add((ABORTING_SAFE_EXIT,), ("JOB_CANCELLED",), ABORTING_SAFE_EXIT)
    add((COMPLETED, ABORTED), ("SETTLED",), SETTLED)
    return table


TRANSITIONS: Final[dict[str, dict[str, str]]] = _build_transitions()
TRANSITION_TYPES: Final = frozenset(TRANSITIONS)

# --- non-transition job event types (02-jobs.md §3) ---

JOB_CREATED: Final = "JOB_CREATED"
NON_TRANSITION_JOB_TYPES: Final = frozenset(
    {
        JOB_CREATED,
        "ACCESS_PLAN_ISSUED",
        "ACCESS_DENIED",
        "SKILL_LICENSED",
        "SKILL_USED",
        "SKILL_METER_REPORTED",
        "RISK_SCORED",
        "DISPATCH_REQUESTED",
        "DISPATCH_EVALUATED",
        "DISPATCH_CONFIRMED",
        "DISPATCH_FAILED",
        "OPERATOR_COVERAGE_RESERVED",
        "OPERATOR_COVERAGE_RELEASED",
        "ASSIST_REQUESTED",
        "ASSIST_QUEUED",
        "ASSIST_ASSIGNED",
        "ASSIST_ACCEPTED",
        "ASSIST_DECLINED",
        "ASSIST_TIMEOUT",
        "JOB_HEARTBEAT",
        "CHECKPOINT_REACHED",
        "TELEMETRY_HEARTBEAT",
        "INCIDENT_DETECTED",
        "INCIDENT_REPORTED",
        "EVIDENCE_CAPTURED",
        "EVIDENCE_VIEWED",
        "EVIDENCE_EXPIRED",
        "ZONE_COVERAGE_REPORTED",
        "PROOF_EVALUATED",
        "PROOF_OVERRIDDEN",
        "SETTLEMENT_HELD",
        "SETTLEMENT_RELEASED",
        "SETTLEMENT_FORFEITED",
        "DECISION_RECORDED",
        "DISPUTE_OPENED",
        "DISPUTE_CLOSED",
        "CLAIM_OPENED",
        "CLAIM_TRIAGED",
        "CLAIM_APPROVED",
        "CLAIM_DENIED",
        "JOB_ADJUSTED",
        "CLAIM_PAID",
        "OPERATOR_COST_RECORDED",
        "SLA_BREACH_DETECTED",
        "SLA_CREDIT_ISSUED",
        "CORRELATION_LINKED",
        "CORRELATION_RELINKED",
    }
)
JOB_EVENT_TYPES: Final = TRANSITION_TYPES | NON_TRANSITION_JOB_TYPES

# --- other streams (known, reduced elsewhere) ---

ROBOT_EVENT_TYPES: Final = frozenset(
    {
        "ROBOT_REGISTERED",
        "ROBOT_AVAILABILITY_SET",
        "ROBOT_STATUS_CHANGED",
        "ROBOT_UNHEALTHY",
        "ROBOT_QUARANTINED",
        "ROBOT_QUARANTINE_CLEARED",
        "MAINTENANCE_REQUESTED",
        "MAINTENANCE_COMPLETED",
        "ROBOT_HEARTBEAT",
    }
)
OPERATOR_EVENT_TYPES: Final = frozenset(
    {"OPERATOR_REGISTERED", "OPERATOR_SHIFT_OPENED", "OPERATOR_SHIFT_CLOSED"}
)
MONTH_EVENT_TYPES: Final = frozenset({"MONTH_CLOSE_REQUESTED", "MONTH_CLOSED", "MONTH_CLOSE_REOPENED"})
GOVERNANCE_EVENT_TYPES: Final = frozenset(
    {
        "TENANT_POLICY_UPDATED",
        "SERVER_SIGNER_KEY_REGISTERED",
        "SERVER_SIGNER_KEY_ROTATED",
        "SERVER_SIGNER_KEY_REVOKED",
    }
)
FINANCE_EVENT_TYPES: Final = frozenset({"INSURER_REIMBURSEMENT_RECORDED"})
OTHER_STREAM_EVENT_TYPES: Final = (
    ROBOT_EVENT_TYPES
    | OPERATOR_EVENT_TYPES
    | MONTH_EVENT_TYPES
    | GOVERNANCE_EVENT_TYPES
    | FINANCE_EVENT_TYPES
)
KNOWN_EVENT_TYPES: Final = JOB_EVENT_TYPES | OTHER_STREAM_EVENT_TYPES


def is_known_event_type(event_type: str) -> bool:
    return event_type in KNOWN_EVENT_TYPES


def require_known_event_type(event_type: object) -> str:
    """Return `event_type` or raise EVENT_TYPE_UNKNOWN (400)."""
    if type(event_type) is not str or event_type not in KNOWN_EVENT_TYPES:
        raise SettlekitError(
            f"unknown event type {event_type!r}", code="EVENT_TYPE_UNKNOWN", status=400, eventType=event_type
        )
    return event_type


# --- signer policy (01-events.md §8) ---

SignerPolicy = Literal[
    "robot", "operator", "robot_or_operator", "server_or_operator", "server_or_robot", "server"
]
SignerKind = Literal["robot", "operator", "server"]

_ROBOT_SIGNED = (
    "TELEMETRY_HEARTBEAT",
    "CHECKPOINT_REACHED",
    "EN_ROUTE",
    "ASSIST_REQUESTED",
    "EXECUTION_STARTED",
    "JOB_EXECUTION_STARTED",
    "JOB_HEARTBEAT",
    "EXECUTION_COMPLETED",
    "JOB_EXECUTION_COMPLETED",
    "EXECUTION_ABORTED",
    "INCIDENT_DETECTED",
    "SKILL_METER_REPORTED",
    "ROBOT_HEARTBEAT",
)
_OPERATOR_SIGNED = (
    "ASSIST_STARTED",
    "ASSIST_ENDED",
    "ASSIST_ACCEPTED",
    "ASSIST_DECLINED",
    "OPERATOR_SHIFT_OPENED",
    "OPERATOR_SHIFT_CLOSED",
)
_ROBOT_OR_OPERATOR = ("ACCESS_GRANTED", "ACCESS_DENIED", "SKILL_USED", "ZONE_COVERAGE_REPORTED")
_SERVER_OR_OPERATOR = ("INCIDENT_REPORTED", "CLAIM_TRIAGED")
_SERVER_OR_ROBOT = ("EVIDENCE_CAPTURED", "JOB_EXECUTION_ABORTED", "JOB_EXECUTION_RESUMED", "ROBOT_UNHEALTHY")


def _build_signer_policy() -> dict[str, SignerPolicy]:
    table: dict[str, SignerPolicy] = {t: "server" for t in KNOWN_EVENT_TYPES}
    for t in _ROBOT_SIGNED:
        table[t] = "robot"
    for t in _OPERATOR_SIGNED:
        table[t] = "operator"
    for t in _ROBOT_OR_OPERATOR:
        table[t] = "robot_or_operator"
    for t in _SERVER_OR_OPERATOR:
        table[t] = "server_or_operator"
    for t in _SERVER_OR_ROBOT:
        table[t] = "server_or_robot"
    return table


SIGNER_POLICY: Final[dict[str, SignerPolicy]] = _build_signer_policy()


def signer_policy(event_type: str) -> SignerPolicy:
    """The policy row of a known type; unknown types raise EVENT_TYPE_UNKNOWN."""
    return SIGNER_POLICY[require_known_event_type(event_type)]


def required_signer_kind(event_type: str, actor_type: str) -> SignerKind:
    """Which key must sign an event of `event_type` appended by an actor of `actor_type`.

    `robot_or_operator` resolves to the operator key for operator actors and the robot key otherwise;
    `server_or_X` resolves to X's key when the actor is of type X and to the server key otherwise.
    """
    policy = signer_policy(event_type)
    if policy == "robot" or policy == "operator" or policy == "server":
        return policy
    if policy == "robot_or_operator":
        return "operator" if actor_type == "operator" else "robot"
    if policy == "server_or_operator":
        return "operator" if actor_type == "operator" else "server"
    return "robot" if actor_type == "robot" else "server"
