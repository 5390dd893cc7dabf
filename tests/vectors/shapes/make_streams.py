"""Generate `streams.json`: random job streams whose payload fields take any shape (absent, null, "", numbers,
strings with non-ASCII text and lone surrogates, objects) on legal transitions.

    python make_streams.py SEED COUNT > streams.json
    node reference_outputs.mjs SETTLD_CHECKOUT streams.json | gzip -9 > shapes.json.gz

The second step runs settld 0.1.0's reducer and pure artifact builders (a checkout of the reference) on them.
"""

from __future__ import annotations

import json
import random
import sys
from pathlib import Path
from typing import Any

from settlekit.artifacts.build import stream_identity
from settlekit.jobs.types import TRANSITIONS

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
from support.streams import StreamBuilder  # noqa: E402

TYPES = sorted(set(TRANSITIONS) | {
    "ACCESS_PLAN_ISSUED", "ACCESS_DENIED", "JOB_HEARTBEAT", "ASSIST_REQUESTED", "ASSIST_QUEUED", "ASSIST_ASSIGNED",
    "ASSIST_ACCEPTED", "ASSIST_DECLINED", "ASSIST_TIMEOUT", "OPERATOR_COVERAGE_RESERVED", "OPERATOR_COVERAGE_RELEASED",
    "SKILL_LICENSED", "SKILL_USED", "SKILL_METER_REPORTED", "RISK_SCORED", "OPERATOR_COST_RECORDED",
    "SLA_BREACH_DETECTED", "SLA_CREDIT_ISSUED", "INCIDENT_REPORTED", "INCIDENT_DETECTED", "EVIDENCE_CAPTURED",
    "EVIDENCE_EXPIRED", "CLAIM_OPENED", "CLAIM_TRIAGED", "CLAIM_APPROVED", "CLAIM_DENIED", "JOB_ADJUSTED",
    "CLAIM_PAID", "PROOF_EVALUATED", "SETTLEMENT_HELD", "SETTLEMENT_RELEASED", "SETTLEMENT_FORFEITED",
    "DISPUTE_OPENED", "DISPUTE_CLOSED", "ZONE_COVERAGE_REPORTED",
})
ENDING = {"JOB_CANCELLED", "ACCESS_REVOKED", "ACCESS_EXPIRED", "SETTLED", "JOB_EXECUTION_COMPLETED",
          "EXECUTION_COMPLETED", "EXECUTION_ABORTED", "JOB_EXECUTION_ABORTED"}
MIDDLE = [t for t in TYPES if t not in ENDING]
NEXT = {
    "CREATED": ["QUOTE_PROPOSED"], "QUOTED": ["BOOKED"], "BOOKED": ["MATCHED"],
    "MATCHED": ["RESERVED", "JOB_RESCHEDULED"], "RESERVED": ["EN_ROUTE"], "EN_ROUTE": ["ACCESS_GRANTED"],
    "ACCESS_GRANTED": ["EXECUTION_STARTED", "JOB_EXECUTION_STARTED"],
    "EXECUTING": ["JOB_EXECUTION_STALLED", "ASSIST_STARTED", "JOB_EXECUTION_COMPLETED", "EXECUTION_COMPLETED"],
    "STALLED": ["JOB_EXECUTION_RESUMED"], "ASSISTED": ["ASSIST_ENDED", "JOB_EXECUTION_STALLED"],
    "COMPLETED": ["SETTLED"], "ABORTED": ["SETTLED"],
}
FIELDS = [
    "accessPlanId", "reservationId", "operatorId", "queueId", "startAt", "endAt", "requestedAt", "queuedAt",
    "assignedAt", "acceptedAt", "declinedAt", "timedOutAt", "reason", "startedAt", "robotId", "stage", "t", "progress",
    "assistRequested", "detectedAt", "resumedAt", "newWindow", "licenseId", "incidentId", "evidenceId", "claimId",
    "type", "severity", "summary", "evidenceRef", "retentionDays", "triageCode", "notes", "amounts", "currency",
    "reasonCode", "adjustmentId", "amountCents", "paymentRef", "status", "reasonCodes", "missingEvidence",
    "evaluatedAt", "factsHash", "holdId", "heldAt", "exposure", "releasedAt", "releaseReason", "forfeitedAt",
    "disputeId", "openedAt", "closedAt", "openedBy", "settlementProofRef", "customerContractHash", "policyHash",
    "customerId", "siteId", "contractId", "contract", "operatorContractHash", "jobId", "kind", "sizeBytes",
    "contentType", "zoneId", "window", "coveragePct",
]
ACTORS = [{"type": "robot", "id": "rob_x"}, {"type": "operator", "id": "op_x"}, {"type": "system", "id": "s"}]


def _value(rng: random.Random, field: str) -> Any:
    r = rng.random()
    if r < 0.12:
        return None
    if field in ("newWindow", "exposure", "contract", "window"):
        keys = ["startAt", "endAt", "expected", "held", "holdPolicy", "contractId", "currency"]
        return {k: _value(rng, "x") for k in rng.sample(keys, rng.randint(0, 3))}
    if field in ("reasonCodes", "missingEvidence"):
        return rng.choice([[], ["A"], "x"])
    if field == "amounts":
        return rng.choice([{"payoutCents": 5}, {"refundCents": 3}, {"payoutCents": 1, "refundCents": 2}])
    if r < 0.2:
        return rng.randint(0, 3)
    if r < 0.25:
        return ""
    return rng.choice(["a", "b", "c", "\u00e9", "\ud800x", "Z", "\U0001f600"]) + field[:2]


def _payload(rng: random.Random) -> dict[str, Any] | None:
    if rng.random() < 0.05:
        return None
    return {f: _value(rng, f) for f in rng.sample(FIELDS, rng.randint(0, 10))}


def _status_after(status: str, event_type: str) -> str | None:
    row = TRANSITIONS.get(event_type)
    if row is None:
        return status
    return row.get(status)


def stream(seed: int) -> list[dict[str, Any]]:
    rng = random.Random(seed)
    b = StreamBuilder(job_id=f"job_s{seed}", prefix=f"evt_s{seed}")
    b.add("JOB_CREATED", rng.choice([{"templateId": "t"}, {"templateId": "t", "tenantId": "", "constraints": None}]))
    status = "CREATED"
    for _ in range(rng.randint(20, 90)):
        for _attempt in range(20):
            r = rng.random()
            nxt = NEXT.get(status)
            t = rng.choice(nxt) if nxt and r < 0.35 else rng.choice(MIDDLE if r < 0.97 else TYPES)
            after = _status_after(status, t)
            if after is None:
                continue
            b.add(t, _payload(rng), rng.choice(ACTORS))
            status = after
            break
    return b.events


def main() -> None:
    seed, count = int(sys.argv[1]), int(sys.argv[2])
    out = []
    for s in range(seed, seed + count):
        events = stream(s)
        out.append({"seed": s, "tenantId": stream_identity(events)[0], "events": events})
    json.dump(out, sys.stdout)


if __name__ == "__main__":
    main()
