"""A robot reporting a job end to end with the settlekit client SDK (the README shows `robot_reports`).

Against a running server (the key needs `jobs:write`, and `admin` to register the robot's signer key):

    SETTLEKIT_URL=http://127.0.0.1:8080 SETTLEKIT_API_KEY=sk_… python examples/robot_job.py
"""

from __future__ import annotations

import os
import uuid
from datetime import UTC, datetime, timedelta

from settlekit.client import Client
from settlekit.client.executor import Executor
from settlekit.events import Signer
from settlekit.events.envelope import now_iso


def back_office(api: Client, job_id: str, robot_id: str) -> None:
    """The operator's side before the robot takes over: the job created, quoted, booked, matched to the robot,
    reserved and given an access plan (server drafts: the server signs them)."""
    now = datetime.now(UTC)
    start, end = (f"{t.isoformat(timespec='milliseconds')[:-6]}Z" for t in (now - timedelta(hours=1),
                                                                             now + timedelta(hours=8)))
    job = api.create_job({"templateId": "reset_lite", "customerId": "cust_1", "siteId": "site_1",
                          "constraints": {"zoneId": "zone_a"}}, job_id=job_id)
    steps = [
        ("QUOTE_PROPOSED", {"amountCents": 6500, "currency": "USD",
                            "breakdown": {"coverageFeeCents": 0, "totalCents": 6500}}),
        ("BOOKED", {"startAt": start, "endAt": end, "environmentTier": "ENV_MANAGED_BUILDING",
                    "requiresOperatorCoverage": False, "zoneId": "zone_a", "customerId": "cust_1",
                    "siteId": "site_1", "sla": {"slaVersion": 1, "mustStartWithinWindow": True,
                                                "maxStallMs": 300000, "maxExecutionMs": 28800000},
                    "contractId": "contract_default", "contractVersion": 1}),
        ("MATCHED", {"robotId": robot_id}),
        ("RESERVED", {"robotId": robot_id, "startAt": start, "endAt": end, "reservationId": f"rsv_{job_id}"}),
        ("ACCESS_PLAN_ISSUED", {"jobId": job_id, "accessPlanId": "ap_1", "method": "BUILDING_CONCIERGE",
                                "credentialRef": "vault://ap_1", "scope": {"areas": ["lobby"], "noGo": []},
                                "validFrom": start, "validTo": end, "revocable": True, "requestedBy": "system"}),
    ]
    drafts = [{"type": t, "actor": {"type": "system", "id": "backoffice"}, "payload": p} for t, p in steps]
    api.append_events(job_id, drafts, expected_prev_chain_hash=job["headChainHash"])


def robot_reports(url: str, api_key: str, job_id: str, spool: str) -> str:
    # --- README: robot
    api = Client(url, api_key)
    signer = Signer.generate()  # a real robot loads its key: Signer.from_pem(open("rob_7.pem").read())
    robot = Executor(api, signer, actor_type="robot", actor_id="rob_7", spool=spool)
    robot.register_key()  # its public key, so the API can check the robot's signatures
    robot.start()  # sends in the background whatever waits in the spool while the API is unreachable
    back_office(api, job_id, "rob_7")  # created → quoted → booked → matched → reserved, access plan issued

    robot.append(job_id, "EN_ROUTE", {"etaSeconds": 600})
    robot.append(job_id, "ACCESS_GRANTED", {"jobId": job_id, "accessPlanId": "ap_1", "method": "BUILDING_CONCIERGE"})
    robot.append(job_id, "EXECUTION_STARTED", {"stage": "TASK"})
    for progress in (25, 50, 75):
        at = now_iso()  # a heartbeat's t is its own time
        beat = {"jobId": job_id, "robotId": "rob_7", "t": at, "stage": "TASK", "progress": progress}
        robot.append(job_id, "JOB_HEARTBEAT", beat, at=at)  # sent now, or spooled and sent later
    robot.append(job_id, "EXECUTION_COMPLETED", {"report": {"tasksCompleted": 1}})

    status = api.get_job(job_id)["job"]["status"]  # "COMPLETED"
    robot.close()
    # --- README: end
    api.close()
    return str(status)


if __name__ == "__main__":
    print(robot_reports(os.environ.get("SETTLEKIT_URL", "http://127.0.0.1:8080"), os.environ["SETTLEKIT_API_KEY"],
                        f"job_{uuid.uuid4().hex[:12]}", "rob_7.spool"))
