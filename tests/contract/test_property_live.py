"""Property test through the live path: random signed job streams (a walk over the job state machine with
random amounts up to MAX_SAFE_INTEGER, claims, adjustments, SLA credits, operator costs, royalties, coverage and
proof gate modes) are imported event by event; for whatever the live path accepts, every ledger entry it wrote
balances, the stored balances are the sum of the entries, and each SettlementStatement's totals equal the sum of
the entries it lists. On both backends, with a bounded number of examples."""

from __future__ import annotations

import itertools
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from conftest import backend_database
from settlekit.append import Appender, job_appender
from settlekit.application.imports import import_events
from settlekit.artifacts.build import build_all
from settlekit.artifacts.state import fold
from settlekit.errors import SettlekitError
from settlekit.events.canonical import MAX_SAFE_INTEGER, canonical_hash
from settlekit.events.envelope import Signer, finalize, make_draft
from settlekit.jobs import deserialize_state, process_job_events, settlement_proof_ref_for
from settlekit.jobs.zone_coverage import zone_coverage_facts
from settlekit.store import ledger as ledger_rows
from settlekit.store.db import Database

SIGNERS = {role: Signer.from_private_key(Ed25519PrivateKey.from_private_bytes(bytes([n]) * 32))
           for n, role in enumerate(("server", "robot", "operator"), start=41)}
PROXY = {"type": "system", "id": "proxy"}
ADMIN = {"type": "system", "id": "proxy_admin"}
ROBOT = {"type": "robot", "id": "rob_1"}
OPERATOR = {"type": "operator", "id": "op_1"}
PROOF = {"type": "proof", "id": "proof_verifier_v1"}
T0 = datetime(2026, 1, 5, 9, 0, tzinfo=UTC)
WINDOW = {"startAt": "2026-01-05T10:00:00.000Z", "endAt": "2026-01-05T18:00:00.000Z"}
SLA = {"slaVersion": 1, "mustStartWithinWindow": True, "maxStallMs": 300000, "maxExecutionMs": 28800000}
_examples = itertools.count()


class Walk:
    """A signed, hash-chained job stream: robot actors sign with the robot key, operators with the operator
    key, everything else with the server key (as settld streams are)."""

    def __init__(self, job_id: str):
        self.job_id = job_id
        self.events: list[dict[str, Any]] = []
        self.t = T0

    def at(self) -> str:
        return self.t.strftime("%Y-%m-%dT%H:%M:%S.") + f"{self.t.microsecond // 1000:03d}Z"

    def add(self, type_: str, payload: dict[str, Any], actor: dict[str, str] = PROXY, *,
            at_fields: tuple[str, ...] = ()) -> dict[str, Any]:
        self.t += timedelta(seconds=7)
        at = self.at()
        body = {**payload, **{f: at for f in at_fields}}
        if type_ not in ("QUOTE_PROPOSED", "BOOKED", "MATCHED", "RESERVED", "EN_ROUTE", "EXECUTION_STARTED",
                         "EXECUTION_COMPLETED", "EXECUTION_ABORTED", "SETTLED", "JOB_CREATED"):
            body.setdefault("jobId", self.job_id)
        signer = SIGNERS[actor["type"] if actor["type"] in ("robot", "operator") else "server"]
        draft = make_draft(stream_id=self.job_id, type=type_, actor=actor, payload=body, at=at,
                           id=f"evt_{self.job_id}_{len(self.events) + 1:04d}")
        finalized = finalize(draft, self.events[-1]["chainHash"] if self.events else None, signer)
        self.events.append(finalized)
        return finalized


def _proof_then_ref(w: Walk, draw: st.DrawFn, booked: dict[str, Any], policy_hash: str) -> dict[str, Any] | None:
    """PROOF_EVALUATED (PASS or FAIL) at the completion, with the facts hash of the zone-coverage facts, and the
    settlementProofRef pointing at it; None when the stream so far is one settlekit refuses."""
    completion = next(e for e in reversed(w.events) if e["type"].endswith("COMPLETED"))
    try:
        facts = zone_coverage_facts(fold(w.events), booked["payload"], completion["chainHash"])
    except SettlekitError:
        return None
    w.add("PROOF_EVALUATED", {"evaluatedAtChainHash": completion["chainHash"],
                              "evaluationId": canonical_hash({"n": len(w.events)}),
                              "customerPolicyHash": policy_hash, "operatorPolicyHash": policy_hash,
                              "requiredZonesHash": None, "factsHash": canonical_hash(facts),
                              "status": draw(st.sampled_from(["PASS", "FAIL"])), "reasonCodes": [],
                              "missingEvidence": []}, PROOF, at_fields=("evaluatedAt",))
    try:
        state = process_job_events(None, w.events).state
    except SettlekitError:
        return None
    return settlement_proof_ref_for(deserialize_state(state))


FIELD_ACTIVITIES = ("heartbeat", "heartbeat", "assist", "assist_queue", "stall", "incident")
LIVENESS = {"type": "liveness", "id": "liveness_v0"}


def _field_activity(w: Walk, activity: str, n: int) -> None:
    """One stretch of execution that starts and ends in EXECUTING."""
    if activity == "heartbeat":
        w.add("JOB_HEARTBEAT", {"robotId": "rob_1", "stage": "TASK", "progress": n / 8}, ROBOT, at_fields=("t",))
    elif activity == "assist":
        w.add("ASSIST_STARTED", {"operatorId": "op_1", "reason": "robot_uncertain"}, OPERATOR)
        w.add("ASSIST_ENDED", {"operatorId": "op_1", "outcome": "resolved"}, OPERATOR)
    elif activity == "assist_queue":
        q = f"q_{n}"
        w.add("ASSIST_REQUESTED", {"robotId": "rob_1", "reason": "robot_uncertain", "priority": "NORMAL"}, ROBOT,
              at_fields=("requestedAt",))
        w.add("ASSIST_QUEUED", {"queueId": q, "reason": "robot_uncertain", "priority": "HIGH"},
              at_fields=("queuedAt",))
        w.add("ASSIST_ASSIGNED", {"queueId": q, "operatorId": "op_1"}, at_fields=("assignedAt",))
        w.add("ASSIST_ACCEPTED", {"queueId": q, "operatorId": "op_1"}, OPERATOR, at_fields=("acceptedAt",))
    elif activity == "stall":
        try:
            execution = process_job_events(None, w.events).snapshot.get("execution") or {}
        except SettlekitError:  # a stream settlekit refuses; the live path will refuse it too
            execution = {}
        last = execution.get("lastHeartbeatAt") or execution.get("startedAt")
        w.add("JOB_EXECUTION_STALLED", {"robotId": "rob_1", "reason": "NO_HEARTBEAT", "lastHeartbeatAt": last,
                                        "policy": {"heartbeatIntervalMs": 60000, "stallAfterMs": 180000}},
              LIVENESS, at_fields=("detectedAt",))
        w.add("JOB_EXECUTION_RESUMED", {"robotId": "rob_1"}, LIVENESS, at_fields=("resumedAt",))
    else:
        w.add("INCIDENT_DETECTED", {"incidentId": f"inc_d{n}", "type": "ROBOT_STUCK", "severity": 2,
                                    "summary": "needs review"}, ROBOT)
        w.add("EVIDENCE_CAPTURED", {"incidentId": f"inc_d{n}", "evidenceId": f"ev_{n}",
                                    "evidenceRef": f"https://evidence.example.com/{w.job_id}/ev_{n}.mp4",
                                    "kind": "SENSOR_SNAPSHOT", "sizeBytes": 1024, "contentType": "video/mp4"}, ROBOT)


amounts = st.one_of(st.integers(1, 20_000), st.integers(20_000, 10**9), st.integers(10**12, MAX_SAFE_INTEGER))


@st.composite
def job_streams(draw: st.DrawFn) -> list[dict[str, Any]]:
    w = Walk(f"job_p{next(_examples)}")
    amount = draw(amounts)
    fee = draw(st.sampled_from([0, 0, min(amount, 250), amount // 10]))
    gate = draw(st.sampled_from([None, "warn", "strict", "holdback"]))
    credit_max = draw(st.integers(1, 10**6))
    w.add("JOB_CREATED", {"tenantId": "tenant_default", "templateId": "reset_lite", "customerId": "cust_1",
                          "siteId": "site_1", "constraints": {"zoneId": "zone_a"}})
    w.add("QUOTE_PROPOSED", {"pricingVersion": 1, "currency": "USD", "amountCents": amount,
                             "breakdown": {"coverageFeeCents": fee, "totalCents": amount}})
    coverage = {"required": fee > 0, "feeCentsPerJob": fee}
    model = draw(st.sampled_from([None, "PLATFORM_EXPENSE", "COVERAGE_RESERVE", "OPERATOR_CHARGEBACK"]))
    if model is not None:
        coverage["creditFundingModel"] = model
    credit_policy = {"enabled": True, "defaultAmountCents": 500, "maxAmountCents": credit_max, "currency": "USD"}
    snapshot = {"schemaVersion": "PolicySnapshot.v1", "contractId": "contract_default", "contractVersion": 1,
                "environmentTier": "ENV_MANAGED_BUILDING", "requiresOperatorCoverage": fee > 0, "sla": SLA,
                "proofPolicy": {"gateMode": gate} if gate else None, "creditPolicy": credit_policy,
                "evidencePolicy": {"retentionDays": 7}, "claimPolicy": None, "coveragePolicy": coverage}
    policy_hash = canonical_hash(snapshot)
    booked = w.add("BOOKED", {"paymentHoldId": f"hold_{w.job_id}", **WINDOW, "environmentTier": "ENV_MANAGED_BUILDING",
                              "requiresOperatorCoverage": fee > 0, "zoneId": "zone_a", "sla": SLA,
                              "customerId": "cust_1", "siteId": "site_1", "contractId": "contract_default",
                              "contractVersion": 1, "creditPolicy": credit_policy,
                              "evidencePolicy": {"retentionDays": 7}, "policySnapshot": snapshot,
                              "policyHash": policy_hash})
    w.add("MATCHED", {"robotId": "rob_1", "score": 0.5, "algorithm": "trust_x_distance_v1"})
    royalty = draw(st.sampled_from([0, 0, 99, amount // 20]))
    if royalty:
        w.add("SKILL_LICENSED", {"skill": {"skillId": "skill_fold", "version": "1.0.0", "developerId": "dev_7"},
                                 "pricing": {"model": "PER_JOB", "amountCents": royalty, "currency": "USD"},
                                 "licenseId": "lic_1"})
    w.add("RESERVED", {"robotId": "rob_1", **WINDOW, "reservationId": "rsv_1"})
    if fee > 0:
        w.add("OPERATOR_COVERAGE_RESERVED", {"reservationId": "ocr_1", "operatorId": "op_1", **WINDOW})
    w.add("DISPATCH_CONFIRMED", {}, at_fields=("confirmedAt",))
    w.add("ACCESS_PLAN_ISSUED", {"accessPlanId": "ap_1", "method": "BUILDING_CONCIERGE",
                                 "credentialRef": "vault://access/site_1/ap_1",
                                 "validFrom": "2026-01-05T09:00:00.000Z", "validTo": "2026-01-08T10:00:00.000Z",
                                 "revocable": True, "requestedBy": "system"})
    path = draw(st.sampled_from(["complete", "complete", "complete_new", "abort_in_field", "robot_abort",
                                 "cancel_early"]))
    executed = path != "cancel_early"
    if path == "cancel_early":
        w.add("JOB_CANCELLED", {"reason": "ACCESS_FAILURE", "requestedBy": "cust_1"}, at_fields=("cancelledAt",))
    else:
        w.add("EN_ROUTE", {"etaSeconds": 300}, ROBOT)
        w.add("ACCESS_GRANTED", {"accessPlanId": "ap_1", "method": "BUILDING_CONCIERGE"}, ROBOT)
        if path == "complete_new":
            w.add("JOB_EXECUTION_STARTED", {"robotId": "rob_1", "stage": "TASK"}, ROBOT, at_fields=("startedAt",))
        else:
            w.add("EXECUTION_STARTED", {}, ROBOT)
        for n, activity in enumerate(draw(st.lists(st.sampled_from(FIELD_ACTIVITIES), max_size=5))):
            _field_activity(w, activity, n)
        if path in ("complete", "complete_new"):
            if path == "complete":
                w.add("EXECUTION_COMPLETED", {"report": {"tasksCompleted": 2}}, ROBOT)
            else:
                w.add("JOB_EXECUTION_COMPLETED", {"robotId": "rob_1"}, ROBOT, at_fields=("completedAt",))
        elif path == "abort_in_field":
            w.add("ACCESS_REVOKED", {"accessPlanId": "ap_1", "reason": "site_closed"})
            w.add("JOB_EXECUTION_ABORTED", {"robotId": "rob_1", "reason": "safe_exit"}, at_fields=("abortedAt",))
        else:
            w.add("EXECUTION_ABORTED", {"reason": "ROBOT_FAILURE"}, ROBOT)
    completed = path in ("complete", "complete_new")

    claim: dict[str, Any] | None = None
    if draw(st.booleans()):
        w.add("INCIDENT_REPORTED", {"incidentId": "inc_1", "type": "DAMAGE_PROPERTY" if executed else "ACCESS_FAILURE",
                                    "severity": draw(st.integers(1, 5)), "summary": "customer claim",
                                    "reportedBy": "ops"})
        w.add("CLAIM_OPENED", {"claimId": "clm_1", "incidentId": "inc_1", "reasonCode": "DAMAGE_PROPERTY"})
        if draw(st.booleans()):
            w.add("CLAIM_TRIAGED", {"claimId": "clm_1", "triageCode": "REVIEW"})
        kind = draw(st.sampled_from(["payout", "refund", "both", "deny"] if completed else ["payout", "deny"]))
        if kind == "deny":
            w.add("CLAIM_DENIED", {"claimId": "clm_1", "reasonCode": "NO_EVIDENCE"})
        else:
            split: dict[str, int] = {}
            if kind in ("payout", "both"):
                split["payoutCents"] = draw(st.one_of(st.integers(1, 9_000), st.integers(1, MAX_SAFE_INTEGER // 4)))
            if kind in ("refund", "both"):
                split["refundCents"] = draw(st.integers(1, amount))
            claim = split
            total = sum(split.values())
            before_settled = draw(st.booleans())
            if before_settled:
                w.add("CLAIM_APPROVED", {"claimId": "clm_1", "amounts": split, "currency": "USD"},
                      ADMIN if total > 10_000 else PROXY)

    ref = _proof_then_ref(w, draw, booked, policy_hash) if completed and gate in ("strict", "holdback") else None
    settled = w.add("SETTLED", {"settlementProofRef": ref} if ref is not None else {})

    if claim is not None:
        if not any(e["type"] == "CLAIM_APPROVED" for e in w.events):
            w.add("CLAIM_APPROVED", {"claimId": "clm_1", "amounts": claim, "currency": "USD"},
                  ADMIN if sum(claim.values()) > 10_000 else PROXY)
        if draw(st.booleans()):
            w.add("JOB_ADJUSTED", {"claimId": "clm_1", "adjustmentId": "adj_1"})
            if draw(st.booleans()):
                w.add("CLAIM_PAID", {"claimId": "clm_1", "amountCents": sum(claim.values()), "currency": "USD",
                                     "paymentRef": "pay_1"})
    if draw(st.booleans()):
        breach = w.add("SLA_BREACH_DETECTED", {"settledEventId": settled["id"], "policyHash": policy_hash,
                                               "window": WINDOW, "policy": SLA,
                                               "breaches": [{"type": "START_LATE", "latenessMs": 1000}]},
                       at_fields=("detectedAt",))
        if draw(st.booleans()):
            w.add("SLA_CREDIT_ISSUED", {"creditId": "cred_1", "amountCents": draw(st.integers(1, credit_max)),
                                        "currency": "USD", "reason": "SLA_BREACH", "settledEventId": settled["id"],
                                        "policyHash": policy_hash,
                                        "trigger": {"type": "SLA_BREACH", "breachEventId": breach["id"]}},
                  at_fields=("issuedAt",))
    if draw(st.booleans()):
        w.add("OPERATOR_COST_RECORDED", {"operatorId": "op_1", "assistSeconds": 60, "rateCentsPerMinute": 10,
                                         "costCents": draw(st.integers(0, 10**6)), "currency": "USD",
                                         "basis": "SHIFT_RATE", "zoneId": "zone_a",
                                         "settledEventId": settled["id"]})
    return w.events


@pytest.fixture(scope="module", params=["sqlite", "postgres"])
def live_db(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Database]:
    with backend_database(request, tmp_path_factory, request.param) as database:
        yield database


def _check_live_stream(db: Database, events: list[dict[str, Any]]) -> None:
    tenant = f"tenant_{events[0]['streamId']}"
    store: Appender = job_appender(db)
    for role, signer in SIGNERS.items():
        store.signer_keys.register(tenant, signer.public_key_pem, role)
    result = import_events(store, tenant, events, retenant=True)  # a tenant per stream; its JOB_CREATED names another
    event("accepted in full" if result.refused is None else f"refused {result.refused.code}")
    stored = store.streams.read_stream(tenant, events[0]["streamId"])
    assert stored == events[: result.appended]
    entries = ledger_rows.entries_for_job(db, tenant, events[0]["streamId"])
    sums: dict[str, int] = {}
    for item in entries:
        postings = item["entry"]["postings"]
        assert sum(p["amountCents"] for p in postings) == 0, item
        for p in postings:
            assert type(p["amountCents"]) is int
            sums[p["accountId"]] = sums.get(p["accountId"], 0) + p["amountCents"]
    balances = ledger_rows.balances(db, tenant).get(tenant, {})
    assert {a: c for a, c in balances.items() if c} == {a: c for a, c in sums.items() if c}
    assert sum(balances.values()) == 0
    if not stored:
        return
    by_id = {item["entry"]["id"]: item["entry"] for item in entries}
    for artifact in build_all(stored, generated_at="2026-02-01T00:00:00.000Z"):
        if artifact["artifactType"] != "SettlementStatement.v1":
            continue
        settlement = artifact["settlement"]
        listed = settlement["ledgerEntryIds"]
        assert set(listed) <= set(by_id), "a statement lists an entry the live path did not write"
        totals: dict[str, int] = {}
        for entry_id in listed:
            for p in by_id[entry_id]["postings"]:
                totals[p["accountId"]] = totals.get(p["accountId"], 0) + p["amountCents"]
        stated = settlement["totalsByAccountId"]
        accounts = set(totals) | set(stated)
        assert {a: stated.get(a, 0) for a in accounts} == {a: totals.get(a, 0) for a in accounts}


@settings(max_examples=40, deadline=None, derandomize=True,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture,
                                 HealthCheck.data_too_large])
@given(events=job_streams())
def test_live_streams_balance_and_statements_sum_their_entries(live_db: Database,
                                                                events: list[dict[str, Any]]) -> None:
    _check_live_stream(live_db, events)
