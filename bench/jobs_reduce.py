"""Reduce + post a 10,000-event job stream (mostly heartbeats) and report µs per event.

Run: python bench/jobs_reduce.py [--events N] [--repeat R]
"""

from __future__ import annotations

import argparse
import hashlib
import time
from datetime import UTC, datetime, timedelta
from typing import Any

from settlekit.jobs import process_job_events

TARGET_US = 30.0
JOB_ID = "job_bench"
ROBOT = {"type": "robot", "id": "rob_1"}
SERVER = {"type": "system", "id": "proxy"}
OPERATOR = {"type": "operator", "id": "op_1"}


def build_stream(n: int) -> list[dict[str, Any]]:
    t0 = datetime(2026, 1, 5, 10, 0, tzinfo=UTC)
    events: list[dict[str, Any]] = []

    def add(type_: str, actor: dict[str, str], payload: dict[str, Any]) -> None:
        i = len(events)
        at = (t0 + timedelta(seconds=i)).strftime("%Y-%m-%dT%H:%M:%S.000Z")
        chain = hashlib.sha256(f"{JOB_ID}:{i}".encode()).hexdigest()
        events.append(
            {
                "v": 1,
                "id": f"evt_bench_{i:06d}",
                "at": at,
                "streamId": JOB_ID,
                "type": type_,
                "actor": actor,
                "payload": payload,
                "payloadHash": chain,
                "prevChainHash": None,
                "chainHash": chain,
                "signature": "c2ln",
                "signerKeyId": "key_bench",
            }
        )

    add(
        "JOB_CREATED",
        SERVER,
        {
            "tenantId": "tenant_default",
            "templateId": "reset_lite",
            "customerId": "cust_1",
            "siteId": "site_1",
            "constraints": {"zoneId": "zone_a"},
        },
    )
    add(
        "QUOTE_PROPOSED",
        SERVER,
        {"amountCents": 8000, "currency": "USD", "breakdown": {"baseCents": 7500, "coverageFeeCents": 500}},
    )
    add(
        "BOOKED",
        SERVER,
        {
            "startAt": "2026-01-05T10:00:00.000Z",
            "endAt": "2026-01-05T18:00:00.000Z",
            "environmentTier": "ENV_MANAGED_BUILDING",
            "requiresOperatorCoverage": True,
            "zoneId": "zone_a",
            "sla": {"maxStallMs": 300000},
            "customerId": "cust_1",
            "siteId": "site_1",
            "contractId": "contract_default",
            "contractVersion": 1,
            "policySnapshot": {
                "schemaVersion": "PolicySnapshot.v1",
                "proofPolicy": None,
                "coveragePolicy": {"required": True, "reserveFundPercent": 20},
            },
            "policyHash": "d" * 64,
        },
    )
    add("MATCHED", SERVER, {"robotId": "rob_1"})
    add("RESERVED", SERVER, {"robotId": "rob_1", "reservationId": "rsv_1"})
    add(
        "OPERATOR_COVERAGE_RESERVED",
        SERVER,
        {
            "reservationId": "ocr_1",
            "operatorId": "op_1",
            "startAt": "2026-01-05T10:00:00.000Z",
            "endAt": "2026-01-05T18:00:00.000Z",
        },
    )
    add(
        "SKILL_LICENSED",
        SERVER,
        {
            "licenseId": "lic_1",
            "skill": {"skillId": "skill_1"},
            "pricing": {"amountCents": 300, "currency": "USD"},
        },
    )
    add("EN_ROUTE", ROBOT, {"etaSeconds": 600})
    add("ACCESS_GRANTED", ROBOT, {"accessPlanId": "ap_1"})
    add("EXECUTION_STARTED", ROBOT, {"stage": "TASK"})
    tail = 3
    k = 0
    while len(events) < n - tail:
        k += 1
        if k % 2000 == 0:
            add("ASSIST_STARTED", OPERATOR, {"operatorId": "op_1"})
            add("ASSIST_ENDED", OPERATOR, {"operatorId": "op_1"})
            continue
        at = (t0 + timedelta(seconds=len(events))).strftime("%Y-%m-%dT%H:%M:%S.000Z")
        add(
            "JOB_HEARTBEAT",
            ROBOT,
            {"jobId": JOB_ID, "robotId": "rob_1", "t": at, "stage": "TASK", "progress": k % 100},
        )
    add("EXECUTION_COMPLETED", ROBOT, {"report": {"tasksCompleted": 1}})
    add("SETTLED", SERVER, {"settlement": "bench"})
    while len(events) < n:
        add(
            "OPERATOR_COST_RECORDED",
            SERVER,
            {"costCents": 500, "currency": "USD", "settledEventId": events[-1]["id"]},
        )
    return events


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--events", type=int, default=10_000)
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args()
    events = build_stream(args.events)
    best = float("inf")
    for _ in range(args.repeat):
        start = time.perf_counter()
        result = process_job_events(None, events)
        best = min(best, time.perf_counter() - start)
    assert result.snapshot["status"] == "SETTLED", result.snapshot["status"]
    assert len(result.ledger_entries) == 6, len(result.ledger_entries)
    us = best / len(events) * 1e6
    print(f"jobs.reduce_post_us_per_event={us:.2f} target<={TARGET_US:g} ratio={us / TARGET_US:.3f}")


if __name__ == "__main__":
    main()
