"""Helpers for the client SDK tests (no tests here): a back office bringing a job to the point where a robot
takes over (quoted, booked, matched, reserved, access plan issued, with windows around now), and the robot's
events."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

from settlekit.client import Client
from settlekit.events.envelope import now_iso

BACK_OFFICE = {"type": "system", "id": "backoffice"}
JOB_CREATED = {"templateId": "reset_lite", "customerId": "cust_1", "siteId": "site_1",
               "constraints": {"zoneId": "zone_a"}}


def _iso(at: datetime) -> str:
    return at.isoformat(timespec="milliseconds").replace("+00:00", "Z")


def dispatch_drafts(job_id: str, robot_id: str) -> list[dict[str, Any]]:
    """QUOTE_PROPOSED … ACCESS_PLAN_ISSUED as server drafts, the windows open now."""
    now = datetime.now(UTC)
    window = {"startAt": _iso(now - timedelta(hours=1)), "endAt": _iso(now + timedelta(hours=8))}
    booked = {**window, "environmentTier": "ENV_MANAGED_BUILDING", "requiresOperatorCoverage": False,
              "zoneId": "zone_a", "sla": {"slaVersion": 1, "mustStartWithinWindow": True, "maxStallMs": 300000,
                      "maxExecutionMs": 28800000}, "customerId": "cust_1",
              "siteId": "site_1", "contractId": "contract_default", "contractVersion": 1}
    plan = {"jobId": job_id, "accessPlanId": "ap_1", "method": "BUILDING_CONCIERGE", "credentialRef": "vault://ap_1",
            "scope": {"areas": ["lobby"], "noGo": []}, "validFrom": window["startAt"], "validTo": window["endAt"],
            "revocable": True, "requestedBy": "system"}
    payloads = [
        ("QUOTE_PROPOSED", {"amountCents": 6500, "currency": "USD",
                            "breakdown": {"coverageFeeCents": 0, "totalCents": 6500}}),
        ("BOOKED", booked),
        ("MATCHED", {"robotId": robot_id}),
        ("RESERVED", {"robotId": robot_id, **window, "reservationId": f"rsv_{job_id}"}),
        ("ACCESS_PLAN_ISSUED", plan),
    ]
    return [{"type": t, "actor": BACK_OFFICE, "payload": p} for t, p in payloads]


def dispatched_job(api: Client, job_id: str, robot_id: str) -> str:
    """Create the job and dispatch it to `robot_id`; returns the head chain hash."""
    created = api.create_job(JOB_CREATED, job_id=job_id)
    answer = api.append_events(job_id, dispatch_drafts(job_id, robot_id),
                               expected_prev_chain_hash=created["headChainHash"])
    return str(answer["headChainHash"])


def heartbeat(job_id: str, robot_id: str, progress: int) -> tuple[str, dict[str, Any], str]:
    """(type, payload, at) of a JOB_HEARTBEAT dated now."""
    at = now_iso()
    return "JOB_HEARTBEAT", {"jobId": job_id, "robotId": robot_id, "t": at, "stage": "TASK",
                             "progress": progress}, at


def start_events(job_id: str) -> list[tuple[str, dict[str, Any]]]:
    """The robot's events from the road to the start of the work."""
    return [("EN_ROUTE", {"etaSeconds": 600}),
            ("ACCESS_GRANTED", {"jobId": job_id, "accessPlanId": "ap_1", "method": "BUILDING_CONCIERGE"}),
            ("EXECUTION_STARTED", {"stage": "TASK"})]
