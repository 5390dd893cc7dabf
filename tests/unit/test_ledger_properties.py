"""Property tests over random valid job histories: balanced entries, zero-sum balances, replay."""

from __future__ import annotations

import json
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from settlekit.jobs import process_job_events
from settlekit.ledger import balances_from_entries, trial_balance_total
from support.streams import OPERATOR_ACTOR, ROBOT_ACTOR, StreamBuilder, booking_payload, heartbeat

FUNDING = ["PLATFORM_EXPENSE", "COVERAGE_RESERVE", "OPERATOR_CHARGEBACK", "INSURER_RECOVERABLE"]


@st.composite
def histories(draw: st.DrawFn) -> list[dict[str, Any]]:
    amount = draw(st.integers(min_value=1, max_value=10**12))
    fee = draw(st.integers(min_value=0, max_value=amount))
    service = amount - fee
    royalties = draw(st.integers(min_value=0, max_value=service * 70 // 100))
    model = draw(st.sampled_from(FUNDING))
    insurer = draw(st.sampled_from([None, "ins_1"]))
    b = StreamBuilder()
    b.add("JOB_CREATED", {"tenantId": "tenant_default", "templateId": "t", "customerId": "cust_1"})
    b.add(
        "QUOTE_PROPOSED", {"amountCents": amount, "currency": "USD", "breakdown": {"coverageFeeCents": fee}}
    )
    b.add(
        "BOOKED",
        booking_payload(
            coverage_fee=fee,
            reserve_fund_percent=draw(st.integers(-10, 120)),
            credit_funding_model=model,
            insurer_id=insurer,
            recoverable_percent=draw(st.sampled_from([None, 0, 35, 100, 150])),
        ),
    )
    b.add("MATCHED", {"robotId": "rob_1"})
    if royalties:
        b.add(
            "SKILL_LICENSED",
            {"licenseId": "lic", "skillId": "s", "pricing": {"amountCents": royalties, "currency": "USD"}},
        )
    if draw(st.booleans()):
        b.add(
            "OPERATOR_COVERAGE_RESERVED",
            {"reservationId": "r", "operatorId": "op_1", "startAt": "a", "endAt": "b"},
        )
    path = draw(st.sampled_from(["complete", "complete_new", "abort_field", "cancel_early"]))
    if path == "cancel_early":
        b.add("JOB_CANCELLED", {"reason": "customer"})
    else:
        b.add("RESERVED", {"robotId": "rob_1"})
        b.add("EN_ROUTE", {}, ROBOT_ACTOR)
        b.add("ACCESS_GRANTED", {}, ROBOT_ACTOR)
        b.add("EXECUTION_STARTED", {"stage": "TASK"}, ROBOT_ACTOR)
        for i in range(draw(st.integers(0, 5))):
            heartbeat(b, i)
        if draw(st.booleans()):
            b.add("ASSIST_STARTED", {}, OPERATOR_ACTOR)
            b.add("ASSIST_ENDED", {}, OPERATOR_ACTOR)
        if path == "complete":
            b.add("EXECUTION_COMPLETED", {}, ROBOT_ACTOR)
        elif path == "complete_new":
            b.add("JOB_EXECUTION_COMPLETED", {}, ROBOT_ACTOR)
        else:
            b.add("JOB_CANCELLED", {})
            b.add("JOB_EXECUTION_ABORTED", {}, ROBOT_ACTOR)
    settled = b.add("SETTLED", {})
    completed = path.startswith("complete")
    if draw(st.booleans()):
        b.add("CLAIM_OPENED", {"claimId": "c"})
        payout = draw(st.integers(0, 10**6))
        refund = draw(st.integers(0, amount)) if completed else 0
        if payout + refund == 0:
            payout = 1
        b.add(
            "CLAIM_APPROVED",
            {"claimId": "c", "amounts": {"payoutCents": payout, "refundCents": refund}, "currency": "USD"},
        )
        b.add("JOB_ADJUSTED", {"claimId": "c"})
        b.add("CLAIM_PAID", {"claimId": "c", "amountCents": payout + refund, "currency": "USD"})
    if draw(st.booleans()):
        b.add(
            "SLA_CREDIT_ISSUED",
            {
                "creditId": "cr",
                "amountCents": draw(st.integers(1, 10**6)),
                "currency": "USD",
                "issuedAt": b.next_at,
                "settledEventId": settled["id"],
                "policyHash": "a" * 64,
            },
        )
    if draw(st.booleans()):
        b.add(
            "OPERATOR_COST_RECORDED",
            {"costCents": draw(st.integers(0, 10**6)), "currency": "USD", "settledEventId": settled["id"]},
        )
    return b.events


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(events=histories())
def test_random_histories_post_balanced_entries(events: list[dict[str, Any]]) -> None:
    result = process_job_events(None, events)
    ids = [item["entry"]["id"] for item in result.ledger_entries]
    assert len(ids) == len(set(ids))
    for item in result.ledger_entries:
        postings = item["entry"]["postings"]
        assert len(postings) >= 2
        assert sum(p["amountCents"] for p in postings) == 0
        assert all(type(p["amountCents"]) is int and p["amountCents"] != 0 for p in postings)
        assert item["entry"]["id"].startswith(f"jnl_{item['eventId']}")
    balances = balances_from_entries(result.ledger_entries)
    assert trial_balance_total(balances) == 0
    # Escrow is released by SETTLED unless its posting failed (e.g. a split of 0 cents: settld's
    # "amountCents must be non-zero"), which is then a recorded posting error.
    settled_failed = any(x["eventType"] == "SETTLED" for x in result.ledger_errors)
    if result.snapshot["status"] == "SETTLED" and not settled_failed:
        assert balances.get("acct_customer_escrow", 0) == 0
        assert balances.get("acct_coverage_unearned", 0) == 0
    # allocations: one per posting, same amounts
    postings = [
        (item["entry"]["id"], f"p{i}", p["amountCents"])
        for item in result.ledger_entries
        for i, p in enumerate(item["entry"]["postings"])
    ]
    assert [(a["entryId"], a["postingId"], a["amountCents"]) for a in result.allocations] == postings

    # replay is idempotent, and appending one event at a time gives the same result
    again = process_job_events(None, json.loads(json.dumps(events)))
    assert again.ledger_entries == result.ledger_entries and again.state == result.state
    assert again.ledger_errors == result.ledger_errors
    stored: dict[str, Any] | None = None
    entries: list[dict[str, Any]] = []
    for event in events:
        step = process_job_events(stored, [event])
        stored = json.loads(json.dumps(step.state))
        entries += step.ledger_entries
    assert entries == result.ledger_entries and stored == result.state
