"""Postings per event type (03-ledger.md §4-§5) beyond what the vectors cover."""

from __future__ import annotations

import math
from typing import Any

import pytest

from settlekit.jobs import process_job_events, reduce
from settlekit.ledger import (
    PostingPreconditionFailed,
    SplitsInvalid,
    UnbalancedEntry,
    compute_splits,
    entries_for_finance_event,
    entries_for_job_event,
    make_entry,
)
from support.streams import (
    OPERATOR_ACTOR,
    ROBOT_ACTOR,
    StreamBuilder,
    booking_payload,
    lifecycle_to_executing,
)


def _postings(entry: dict[str, Any]) -> list[tuple[str, int]]:
    return [(p["accountId"], p["amountCents"]) for p in entry["postings"]]


def test_split_examples_from_the_spec() -> None:
    s = compute_splits(6500, 0, False, 0)
    assert (s.platform, s.insurance, s.operator, s.owner) == (1300, 130, 0, 5070)
    s = compute_splits(7399, 500, True, 399)
    assert (s.service, s.platform, s.insurance, s.operator, s.owner) == (6899, 1379, 137, 344, 4640)


def test_split_errors() -> None:
    with pytest.raises(SplitsInvalid):
        compute_splits(100, 0, False, 90)
    with pytest.raises(SplitsInvalid):
        compute_splits(100, 101, False, 0)
    with pytest.raises(SplitsInvalid) as exc:
        compute_splits(2**53, 0, False, 0)
    assert exc.value.code == "LEDGER_POSTING_INVALID" and exc.value.details["code"] == "SPLITS_INVALID"


def test_unbalanced_entries_raise() -> None:
    with pytest.raises(UnbalancedEntry):
        make_entry("jnl_x", "t", "m", [("acct_cash", 5), ("acct_customer_escrow", -4)])
    with pytest.raises(UnbalancedEntry):
        make_entry("jnl_x", "t", "m", [("acct_cash", 5)])
    with pytest.raises(UnbalancedEntry):
        make_entry("jnl_x", "t", "m", [("acct_nope", 5), ("acct_cash", -5)])
    with pytest.raises(UnbalancedEntry):
        make_entry("jnl_x", "t", "m", [("acct_cash", 0), ("acct_customer_escrow", 0)])
    with pytest.raises(UnbalancedEntry):
        make_entry("jnl_x", "t", "m", [("acct_cash", True), ("acct_customer_escrow", -1)])


def _completed(coverage_fee: int = 0, amount: int = 6500, **booking: Any) -> StreamBuilder:
    b = StreamBuilder()
    lifecycle_to_executing(
        b,
        amount=amount,
        coverage_fee=coverage_fee,
        booking=booking_payload(coverage_fee=coverage_fee, **booking),
    )
    b.add("EXECUTION_COMPLETED", {}, ROBOT_ACTOR)
    return b


def _entries_for_last(b: StreamBuilder) -> list[dict[str, Any]]:
    state = reduce(b.events[:-1])
    return entries_for_job_event(state.snapshot, state.facts, b.events[-1])


def test_refund_with_coverage_fee_on_abort() -> None:
    b = StreamBuilder()
    lifecycle_to_executing(b, amount=8000, coverage_fee=500)
    b.add("EXECUTION_ABORTED", {}, ROBOT_ACTOR)
    b.add("SETTLED", {})
    [entry] = _entries_for_last(b)
    assert entry["memo"] == "job:job_test SETTLED (refund)"
    assert _postings(entry) == [
        ("acct_customer_escrow", 7500),
        ("acct_coverage_unearned", 500),
        ("acct_cash", -8000),
    ]


def _proof(b: StreamBuilder, status: str) -> None:
    completed = next(e for e in reversed(b.events) if e["type"] == "EXECUTION_COMPLETED")
    b.add(
        "PROOF_EVALUATED",
        {
            "evaluatedAtChainHash": completed["chainHash"],
            "evaluationId": "e",
            "status": status,
            "factsHash": "0" * 64,
        },
    )


def test_strict_gate_fail_is_no_charge() -> None:
    b = _completed(coverage_fee=500, amount=8000, gate_mode="strict")
    _proof(b, "FAIL")
    b.add("SETTLED", {"settlementProofRef": {"status": "FAIL"}})
    [entry] = _entries_for_last(b)
    assert entry["memo"].endswith("SETTLED (no-charge)")
    assert _postings(entry) == [
        ("acct_customer_escrow", 7500),
        ("acct_coverage_unearned", 500),
        ("acct_cash", -8000),
    ]


def test_strict_gate_pass_uses_proof_status_from_facts_when_ref_has_no_status() -> None:
    b = _completed(gate_mode="holdback")
    _proof(b, "PASS")
    b.add("SETTLED", {"settlementProofRef": {"proofEventId": "x"}})
    entries = _entries_for_last(b)
    assert entries[0]["memo"] == "job:job_test SETTLED"


@pytest.mark.parametrize(
    ("status", "code"), [(None, "PROOF_REQUIRED"), ("INSUFFICIENT_EVIDENCE", "PROOF_INSUFFICIENT")]
)
def test_strict_gate_errors(status: str | None, code: str) -> None:
    b = _completed(gate_mode="strict")
    if status:
        _proof(b, status)
    b.add("SETTLED", {"settlementProofRef": {"proofEventId": "x"}})
    with pytest.raises(PostingPreconditionFailed) as exc:
        _entries_for_last(b)
    assert exc.value.details["code"] == code
    # Offline and on the live path a posting error is recorded, not raised: the event has no entry.
    result = process_job_events(None, b.events)
    assert [e for e in result.ledger_entries if e["eventId"] == b.events[-1]["id"]] == []
    [err] = result.ledger_errors
    assert err["eventId"] == b.events[-1]["id"] and err["error"]["code"] == code


def test_strict_gate_without_proof_ref_falls_back_to_the_completion_proof() -> None:
    for status, memo in (("PASS", "job:job_test SETTLED"), ("FAIL", "job:job_test SETTLED (no-charge)")):
        b = _completed(gate_mode="strict")
        _proof(b, status)
        b.add("SETTLED", {})
        assert _entries_for_last(b)[0]["memo"] == memo


def _settled_with_assist_royalty_coverage(completion: str = "EXECUTION_COMPLETED") -> StreamBuilder:
    b = StreamBuilder()
    lifecycle_to_executing(
        b,
        amount=8000,
        coverage_fee=500,
        booking=booking_payload(
            coverage_fee=500, reserve_fund_percent=20, credit_funding_model="OPERATOR_CHARGEBACK"
        ),
    )
    b.add(
        "SKILL_LICENSED",
        {"licenseId": "lic", "skillId": "s", "pricing": {"amountCents": 300, "currency": "USD"}},
    )
    b.add("ASSIST_STARTED", {}, OPERATOR_ACTOR)
    b.add("ASSIST_ENDED", {}, OPERATOR_ACTOR)
    b.add(completion, {}, ROBOT_ACTOR)
    b.add("SETTLED", {})
    return b


def test_refund_after_job_execution_completed_only_is_a_posting_error() -> None:
    # settld counts only the legacy EXECUTION_COMPLETED for refund adjustments.
    b = _settled_with_assist_royalty_coverage("JOB_EXECUTION_COMPLETED")
    b.add("CLAIM_OPENED", {"claimId": "c"})
    b.add("CLAIM_APPROVED", {"claimId": "c", "amounts": {"refundCents": 4000}, "currency": "USD"})
    b.add("JOB_ADJUSTED", {"claimId": "c"})
    with pytest.raises(PostingPreconditionFailed) as exc:
        _entries_for_last(b)
    assert exc.value.reason == "REFUND_NOT_ALLOWED"
    assert str(exc.value.message) == "refund adjustments are only supported for settled, completed jobs"


def test_refund_reversal_uses_ieee_double_floor() -> None:
    # floor(platform * refund / amount) in doubles: the product exceeds 2**53 and rounds (settld's result).
    amount = 7_223_209_650_546_942
    b = StreamBuilder()
    lifecycle_to_executing(b, amount=amount)
    b.add("EXECUTION_COMPLETED", {}, ROBOT_ACTOR)
    b.add("SETTLED", {})
    b.add("CLAIM_OPENED", {"claimId": "c"})
    refund = 5_324_635_148_134_706
    b.add("CLAIM_APPROVED", {"claimId": "c", "amounts": {"refundCents": refund}, "currency": "USD"})
    b.add("JOB_ADJUSTED", {"claimId": "c"})
    [entry] = _entries_for_last(b)
    platform = math.floor(amount * 0.2)
    expected = math.floor(float(platform) * float(refund) / float(amount))
    assert dict(_postings(entry))["acct_platform_revenue"] == expected
    assert expected != platform * refund // amount  # exact integer arithmetic would differ by a cent


def test_job_adjusted_refund_with_coverage_reversal() -> None:
    b = _settled_with_assist_royalty_coverage()
    b.add("CLAIM_OPENED", {"claimId": "c"})
    b.add(
        "CLAIM_APPROVED",
        {"claimId": "c", "amounts": {"payoutCents": 100, "refundCents": 4000}, "currency": "USD"},
    )
    b.add("JOB_ADJUSTED", {"claimId": "c"})
    [entry] = _entries_for_last(b)
    # splits: service 7500, platform 1500, insurance 150, operator 375, royalties 300, coverage 500
    # x = split * 4000 // 8000: 750, 75, 187, 150, coverage 250; owner = 4000 - 1412 = 2588; F = 100, f = 50
    assert entry["memo"] == "job:job_test claim:c ADJUSTED"
    assert _postings(entry) == [
        ("acct_claims_expense", 100),
        ("acct_platform_revenue", 750),
        ("acct_owner_payable", 2588),
        ("acct_insurance_reserve", 75),
        ("acct_coverage_revenue", 250),
        ("acct_operator_payable", 187),
        ("acct_developer_royalty_payable", 150),
        ("acct_coverage_reserve", 50),
        ("acct_coverage_payout_expense", -50),
        ("acct_claims_payable", -4100),
    ]


def test_refund_not_allowed_after_abort() -> None:
    b = StreamBuilder()
    lifecycle_to_executing(b)
    b.add("JOB_EXECUTION_ABORTED", {}, ROBOT_ACTOR)
    b.add("SETTLED", {})
    b.add("CLAIM_OPENED", {"claimId": "c"})
    b.add(
        "CLAIM_APPROVED",
        {"claimId": "c", "amounts": {"payoutCents": 0, "refundCents": 10}, "currency": "USD"},
    )
    b.add("JOB_ADJUSTED", {"claimId": "c"})
    with pytest.raises(PostingPreconditionFailed) as exc:
        _entries_for_last(b)
    assert exc.value.reason == "REFUND_NOT_ALLOWED"


@pytest.mark.parametrize(
    ("model", "extra", "expected"),
    [
        ("PLATFORM_EXPENSE", {}, [("acct_sla_credits_expense", 500)]),
        ("SOMETHING_ELSE", {}, [("acct_sla_credits_expense", 500)]),
        ("COVERAGE_RESERVE", {}, [("acct_coverage_reserve", 500)]),
        (
            "OPERATOR_CHARGEBACK",
            {},
            [("acct_operator_payable", 375), ("acct_operator_chargeback_receivable", 125)],
        ),
        (
            "INSURER_RECOVERABLE",
            {"insurer_id": "ins_1", "recoverable_percent": 80},
            [("acct_insurer_receivable", 400), ("acct_sla_credits_expense", 100)],
        ),
        ("INSURER_RECOVERABLE", {"insurer_id": "ins_1"}, [("acct_insurer_receivable", 500)]),
    ],
)
def test_sla_credit_funding_models(
    model: str, extra: dict[str, Any], expected: list[tuple[str, int]]
) -> None:
    b = StreamBuilder()
    lifecycle_to_executing(
        b,
        amount=8000,
        coverage_fee=500,
        booking=booking_payload(coverage_fee=500, credit_funding_model=model, **extra),
    )
    b.add("ASSIST_STARTED", {}, OPERATOR_ACTOR)
    b.add("EXECUTION_COMPLETED", {}, ROBOT_ACTOR)
    settled = b.add("SETTLED", {})
    b.add(
        "SLA_CREDIT_ISSUED",
        {
            "creditId": "cr",
            "amountCents": 500,
            "currency": "USD",
            "issuedAt": b.next_at,
            "reason": "late",
            "settledEventId": settled["id"],
            "policyHash": "a" * 64,
        },
    )
    [entry] = _entries_for_last(b)
    assert _postings(entry) == [*expected, ("acct_customer_credits_payable", -500)]
    result = process_job_events(None, b.events)
    allocs = [a for a in result.allocations if a["entryId"] == entry["id"]]
    roles = {a["accountId"]: (a["partyRole"], a["partyId"]) for a in allocs}
    if "acct_insurer_receivable" in roles:
        assert roles["acct_insurer_receivable"] == ("insurer", "pty_insurer:ins_1")
    if "acct_coverage_reserve" in roles:
        assert roles["acct_coverage_reserve"] == ("platform", "pty_platform")


def test_operator_cost_zero_posts_nothing() -> None:
    b = _completed()
    settled = b.add("SETTLED", {})
    b.add("OPERATOR_COST_RECORDED", {"costCents": 0, "currency": "USD", "settledEventId": settled["id"]})
    assert _entries_for_last(b) == []


def test_finance_reimbursement() -> None:
    event = {
        "id": "evt_f",
        "at": "2026-01-01T00:00:00.000Z",
        "type": "INSURER_REIMBURSEMENT_RECORDED",
        "payload": {"insurerId": "ins_1", "amountCents": 250},
    }
    [entry] = entries_for_finance_event(event)
    assert entry["memo"] == "finance reimbursement:ins_1"
    assert _postings(entry) == [("acct_cash", 250), ("acct_insurer_receivable", -250)]
    assert entries_for_finance_event({**event, "type": "MONTH_CLOSED"}) == []


def test_booked_without_quote_amount_is_a_posting_error() -> None:
    state = reduce(StreamBuilder().events or [StreamBuilder().add("JOB_CREATED", {"templateId": "t"})])
    with pytest.raises(PostingPreconditionFailed) as exc:
        entries_for_job_event(state.snapshot, state.facts, {"id": "e", "at": "t", "type": "BOOKED"})
    assert exc.value.reason == "QUOTE_MISSING"
