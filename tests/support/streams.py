"""Deterministic job-stream builders for tests and benchmarks (no randomness, no clock)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

from settlekit.events.envelope import finalize, make_draft

SERVER_ACTOR = {"type": "system", "id": "proxy"}
ROBOT_ACTOR = {"type": "robot", "id": "rob_1"}
OPERATOR_ACTOR = {"type": "operator", "id": "op_1"}
_T0 = datetime(2026, 1, 5, 10, 0, tzinfo=UTC)


class StreamBuilder:
    """Appends finalized, hash-chained (unsigned) events to one job stream, 10 s apart."""

    def __init__(self, job_id: str = "job_test", prefix: str = "evt_test"):
        self.job_id = job_id
        self.prefix = prefix
        self.events: list[dict[str, Any]] = []

    @property
    def next_at(self) -> str:
        return (_T0 + timedelta(seconds=10 * len(self.events))).strftime("%Y-%m-%dT%H:%M:%S.000Z")

    def draft(self, type_: str, payload: Any, actor: dict[str, str] | None = None) -> dict[str, Any]:
        """The next event, finalized against the current head, without appending it."""
        n = len(self.events) + 1
        d = make_draft(
            stream_id=self.job_id,
            type=type_,
            actor=actor or SERVER_ACTOR,
            payload=payload,
            at=self.next_at,
            id=f"{self.prefix}_{n:04d}",
        )
        prev = self.events[-1]["chainHash"] if self.events else None
        return finalize(d, prev)

    def add(self, type_: str, payload: Any, actor: dict[str, str] | None = None) -> dict[str, Any]:
        event = self.draft(type_, payload, actor)
        self.events.append(event)
        return event


def booking_payload(
    *,
    coverage_fee: int = 0,
    reserve_fund_percent: int | None = None,
    credit_funding_model: str | None = None,
    insurer_id: str | None = None,
    recoverable_percent: int | None = None,
    gate_mode: str | None = None,
) -> dict[str, Any]:
    coverage: dict[str, Any] = {"required": coverage_fee > 0, "feeCentsPerJob": coverage_fee}
    if reserve_fund_percent is not None:
        coverage["reserveFundPercent"] = reserve_fund_percent
    if credit_funding_model is not None:
        coverage["creditFundingModel"] = credit_funding_model
    if insurer_id is not None:
        coverage["insurerId"] = insurer_id
    if recoverable_percent is not None:
        coverage["recoverablePercent"] = recoverable_percent
    return {
        "startAt": "2026-01-05T10:00:00.000Z",
        "endAt": "2026-01-05T18:00:00.000Z",
        "environmentTier": "ENV_MANAGED_BUILDING",
        "requiresOperatorCoverage": coverage_fee > 0,
        "zoneId": "zone_a",
        "sla": {"slaVersion": 1, "maxStallMs": 300000},
        "customerId": "cust_1",
        "siteId": "site_1",
        "contractId": "contract_default",
        "contractVersion": 1,
        "policySnapshot": {
            "schemaVersion": "PolicySnapshot.v1",
            "contractId": "contract_default",
            "contractVersion": 1,
            "proofPolicy": {"gateMode": gate_mode} if gate_mode else None,
            "coveragePolicy": coverage,
        },
        "policyHash": "a" * 64,
    }


def lifecycle_to_executing(
    b: StreamBuilder, *, amount: int = 6500, coverage_fee: int = 0, booking: dict[str, Any] | None = None
) -> None:
    """JOB_CREATED through EXECUTION_STARTED."""
    b.add(
        "JOB_CREATED",
        {
            "tenantId": "tenant_default",
            "templateId": "reset_lite",
            "customerId": "cust_1",
            "siteId": "site_1",
            "constraints": {"zoneId": "zone_a"},
        },
    )
    b.add(
        "QUOTE_PROPOSED",
        {
            "amountCents": amount,
            "currency": "USD",
            "breakdown": {"coverageFeeCents": coverage_fee, "totalCents": amount},
        },
    )
    b.add("BOOKED", booking or booking_payload(coverage_fee=coverage_fee))
    b.add("MATCHED", {"robotId": "rob_1"})
    b.add("RESERVED", {"robotId": "rob_1", "reservationId": "rsv_1"})
    b.add("EN_ROUTE", {"etaSeconds": 600}, ROBOT_ACTOR)
    b.add("ACCESS_GRANTED", {"accessPlanId": "ap_1"}, ROBOT_ACTOR)
    b.add("EXECUTION_STARTED", {"stage": "TASK"}, ROBOT_ACTOR)


def heartbeat(b: StreamBuilder, progress: int = 0) -> dict[str, Any]:
    return b.add(
        "JOB_HEARTBEAT",
        {"jobId": b.job_id, "robotId": "rob_1", "t": b.next_at, "stage": "TASK", "progress": progress},
        ROBOT_ACTOR,
    )
