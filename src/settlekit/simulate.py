"""Job lifecycle simulation for the demo and load tests.

Scenario templates (`demo_data/scenarios.json`) are the event sequences of the golden scenarios: completed,
aborted, assisted with coverage and royalties, incident with claim/adjustment/payment, SLA credit. A simulated job
replays one template under fresh ids: its own job id, event ids, robot and operator, every event re-finalized and
signed by the key of its kind (server events by a platform key, robot events by that robot's key, operator events
by that operator's key). References to earlier events inside payloads (ids, chain hashes, payload hashes) are
rewritten to the new values, so the stream is valid and its artifacts and ledger match the template's semantics.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from functools import cache
from importlib import resources
from typing import Any

from settlekit.events.canonical import parse_json
from settlekit.events.envelope import Event, Signer, finalize, make_draft

OUTCOME_BY_SCENARIO = {
    "settle_completed": "completed",
    "settle_aborted": "aborted",
    "assist_coverage_royalty": "assisted with coverage",
    "claim_adjust_paid": "incident and claim",
    "sla_credit": "SLA credit",
}
SCENARIO_ORDER = ("settle_completed", "assist_coverage_royalty", "settle_completed", "claim_adjust_paid",
                  "settle_aborted", "sla_credit", "settle_completed")


@cache
def scenarios() -> dict[str, dict[str, Any]]:
    text = resources.files("settlekit").joinpath("demo_data", "scenarios.json").read_text(encoding="utf-8")
    data: dict[str, dict[str, Any]] = parse_json(text)
    return data


@dataclass
class Fleet:
    """The signing identities of a simulated tenant."""

    server: Signer = field(default_factory=Signer.generate)
    robots: dict[str, Signer] = field(default_factory=dict)
    operators: dict[str, Signer] = field(default_factory=dict)

    @classmethod
    def create(cls, robots: int = 4, operators: int = 2) -> Fleet:
        return cls(robots={f"rob_{i + 1:03d}": Signer.generate() for i in range(robots)},
                   operators={f"op_{i + 1:03d}": Signer.generate() for i in range(operators)})

    def registrations(self) -> list[dict[str, str]]:
        """Key registrations: publicKeyPem, purpose, entityId."""
        out = [{"publicKeyPem": self.server.public_key_pem, "purpose": "server", "keyId": self.server.key_id}]
        out += [{"publicKeyPem": s.public_key_pem, "purpose": "robot", "entityId": rid, "keyId": s.key_id}
                for rid, s in self.robots.items()]
        out += [{"publicKeyPem": s.public_key_pem, "purpose": "operator", "entityId": oid, "keyId": s.key_id}
                for oid, s in self.operators.items()]
        return out

    def public_keys(self) -> dict[str, str]:
        return {k["keyId"]: k["publicKeyPem"] for k in self.registrations()}


def scenario_for(index: int) -> str:
    return SCENARIO_ORDER[index % len(SCENARIO_ORDER)]


def job_stream(scenario: str, job_id: str, fleet: Fleet, index: int, *, tenant_id: str | None = None) -> list[Event]:
    """The finalized, signed events of one simulated job; `tenant_id`: the tenant its JOB_CREATED names (the API
    refuses a job of another tenant than the key's; none: settld's default tenant)."""
    template = scenarios()[scenario]
    robot_id = sorted(fleet.robots)[index % len(fleet.robots)]
    operator_id = sorted(fleet.operators)[index % len(fleet.operators)]
    replacements: dict[str, str] = {'"rob_1"': json.dumps(robot_id), '"op_1"': json.dumps(operator_id)}
    old_job = template["jobId"]
    events: list[Event] = []
    prev: str | None = None
    for n, item in enumerate(template["events"], start=1):
        new_id = f"evt_{job_id[4:]}_{n:04d}"
        replacements[json.dumps(item["id"])] = json.dumps(new_id)
        payload_text = json.dumps(item["payload"], ensure_ascii=False).replace(old_job, job_id)
        for old, new in replacements.items():
            payload_text = payload_text.replace(old, new)
        actor = dict(item["actor"])
        if actor["type"] == "robot":
            actor["id"] = robot_id
            signer = fleet.robots[robot_id]
        elif actor["type"] == "operator":
            actor["id"] = operator_id
            signer = fleet.operators[operator_id]
        else:
            signer = fleet.server
        payload = parse_json(payload_text)
        if tenant_id is not None and item["type"] == "JOB_CREATED":
            payload["tenantId"] = tenant_id
        draft = make_draft(stream_id=job_id, type=item["type"], actor=actor, payload=payload, at=item["at"],
                           id=new_id)
        event = finalize(draft, prev, signer)
        replacements[json.dumps(item["chainHash"])] = json.dumps(event["chainHash"])
        replacements[json.dumps(item["payloadHash"])] = json.dumps(event["payloadHash"])
        events.append(event)
        prev = event["chainHash"]
    return events
