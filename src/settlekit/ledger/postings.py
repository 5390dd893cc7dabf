"""Journal entries per event (03-ledger.md §5), a pure function of (job state before, event)."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any, Final

from settlekit.events.canonical import is_safe_int
from settlekit.ledger import accounts as A
from settlekit.ledger.errors import PostingPreconditionFailed, UnbalancedEntry
from settlekit.ledger.splits import SettlementSplits, compute_splits

Entry = dict[str, Any]
Posting = tuple[str, int]


def make_entry(entry_id: str, at: str, memo: str, postings: list[Posting]) -> Entry:
    """Build `{id, at, memo, postings}`; raises UnbalancedEntry unless there are >= 2 non-zero integer
    postings on known accounts, each within the amount cap, summing to exactly 0."""
    if len(postings) < 2:
        raise UnbalancedEntry(f"entry {entry_id} needs at least two postings", entryId=entry_id)
    total = 0
    out = []
    for account_id, amount in postings:
        if account_id not in A.CHART_OF_ACCOUNTS:
            raise UnbalancedEntry(
                f"entry {entry_id} posts to unknown account {account_id}",
                entryId=entry_id,
                accountId=account_id,
            )
        if type(amount) is not int or amount == 0 or abs(amount) > A.MAX_AMOUNT_CENTS:
            raise UnbalancedEntry(
                f"entry {entry_id} has an invalid amount {amount!r} on {account_id}",
                entryId=entry_id,
                accountId=account_id,
            )
        total += amount
        out.append({"accountId": account_id, "amountCents": amount})
    if total != 0:
        raise UnbalancedEntry(
            f"entry {entry_id} does not balance (sum {total})", entryId=entry_id, sumCents=total
        )
    return {"id": entry_id, "at": at, "memo": memo, "postings": out}


# --- inputs (§3) ---


def _coverage_policy(snapshot: Mapping[str, Any]) -> Mapping[str, Any]:
    booking = snapshot.get("booking")
    if type(booking) is not dict:
        return {}
    ps = booking.get("policySnapshot")
    cp = ps.get("coveragePolicy") if type(ps) is dict else None
    return cp if type(cp) is dict else {}


def _percent(v: Any, default: int) -> int:
    return min(max(v, 0), 100) if is_safe_int(v) else default


def quote_amount(snapshot: Mapping[str, Any]) -> int:
    """A = quote.amountCents; QUOTE_MISSING / AMOUNT_INVALID when absent or not a safe non-negative int."""
    quote = snapshot.get("quote")
    if type(quote) is not dict:
        raise PostingPreconditionFailed("QUOTE_MISSING", "the job has no quote")
    amount: Any = quote.get("amountCents")
    if not is_safe_int(amount) or amount < 0 or amount > A.MAX_AMOUNT_CENTS:
        raise PostingPreconditionFailed(
            "AMOUNT_INVALID", "quote.amountCents is not a valid amount", amountCents=amount
        )
    return amount


def coverage_fee(snapshot: Mapping[str, Any]) -> int:
    quote = snapshot.get("quote")
    breakdown = quote.get("breakdown") if type(quote) is dict else None
    fee: Any = breakdown.get("coverageFeeCents") if type(breakdown) is dict else None
    return fee if is_safe_int(fee) and fee >= 0 else 0


def reserve_fund_percent(snapshot: Mapping[str, Any]) -> int:
    return _percent(_coverage_policy(snapshot).get("reserveFundPercent"), 0)


def recoverable_percent(snapshot: Mapping[str, Any]) -> int:
    return _percent(_coverage_policy(snapshot).get("recoverablePercent"), 100)


def gate_mode(snapshot: Mapping[str, Any]) -> str:
    """`booking.policySnapshot.proofPolicy.gateMode` when strict/holdback, else "warn"."""
    booking = snapshot.get("booking")
    ps = booking.get("policySnapshot") if type(booking) is dict else None
    pp = ps.get("proofPolicy") if type(ps) is dict else None
    mode: Any = pp.get("gateMode") if type(pp) is dict else None
    return mode if mode in ("strict", "holdback") else "warn"


def splits_for(snapshot: Mapping[str, Any], facts: Mapping[str, Any]) -> SettlementSplits:
    return compute_splits(
        quote_amount(snapshot),
        coverage_fee(snapshot),
        bool(facts.get("assistStarted")),
        int(facts.get("royaltiesCents") or 0),
    )


def _memo(snapshot: Mapping[str, Any], label: str) -> str:
    return f"job:{snapshot['id']} {label}"


def _payload(event: Mapping[str, Any]) -> Mapping[str, Any]:
    p = event.get("payload")
    return p if type(p) is dict else {}


def _positive_amount(p: Mapping[str, Any], message: str) -> int:
    """`p.amountCents` when a safe int > 0, else AMOUNT_INVALID with `message`."""
    amount: Any = p.get("amountCents")
    if not is_safe_int(amount) or amount <= 0:
        raise PostingPreconditionFailed("AMOUNT_INVALID", message, amountCents=amount)
    return amount


def _require_settled(snapshot: Mapping[str, Any], event_type: str) -> None:
    if snapshot.get("status") != "SETTLED":
        raise PostingPreconditionFailed(
            "JOB_NOT_SETTLED", f"{event_type} needs a settled job", status=snapshot.get("status")
        )


# --- per event type ---

PostingRule = Callable[[Mapping[str, Any], Mapping[str, Any], Mapping[str, Any]], list[Entry]]


def _booked(s: Mapping[str, Any], f: Mapping[str, Any], e: Mapping[str, Any]) -> list[Entry]:
    amount = quote_amount(s)
    fee = coverage_fee(s)
    eid, at = f"jnl_{e['id']}", e["at"]
    entries = [make_entry(eid, at, _memo(s, "BOOKED"), [(A.CASH, amount), (A.CUSTOMER_ESCROW, -amount)])]
    if fee > 0:
        entries.append(
            make_entry(
                f"{eid}_coverage_fee",
                at,
                _memo(s, "BOOKED coverage fee"),
                [(A.CUSTOMER_ESCROW, fee), (A.COVERAGE_UNEARNED, -fee)],
            )
        )
    return entries


def _refund(s: Mapping[str, Any], e: Mapping[str, Any], label: str) -> list[Entry]:
    amount = quote_amount(s)
    fee = coverage_fee(s)
    if fee > amount:
        raise PostingPreconditionFailed("AMOUNT_INVALID", "coverage fee exceeds the quoted amount")
    if fee > 0:
        postings: list[Posting] = [
            (A.CUSTOMER_ESCROW, amount - fee),
            (A.COVERAGE_UNEARNED, fee),
            (A.CASH, -amount),
        ]
        postings = [p for p in postings if p[1] != 0]
    else:
        postings = [(A.CUSTOMER_ESCROW, amount), (A.CASH, -amount)]
    return [make_entry(f"jnl_{e['id']}", e["at"], _memo(s, label), postings)]


def settlement_proof_status(s: Mapping[str, Any], f: Mapping[str, Any], e: Mapping[str, Any]) -> str | None:
    """`payload.settlementProofRef.status` if a non-empty string, else the latest PROOF_EVALUATED status
    for the latest completion anchor, else None."""
    p = e.get("payload")
    ref = p.get("settlementProofRef") if type(p) is dict else None
    status: Any = ref.get("status") if type(ref) is dict else None
    if type(status) is str and status:
        return status
    completion = f.get("latestCompletion")
    if not completion:
        return None
    found = (f.get("proofStatusByAnchor") or {}).get(completion.get("chainHash"))
    return found if type(found) is str else None


def _settled(s: Mapping[str, Any], f: Mapping[str, Any], e: Mapping[str, Any]) -> list[Entry]:
    status: Any = s.get("status")
    if status == "ABORTED":
        return _refund(s, e, "SETTLED (refund)")
    if status != "COMPLETED":
        raise PostingPreconditionFailed(
            "JOB_NOT_TERMINAL", f"SETTLED needs a COMPLETED or ABORTED job, not {status}", status=status
        )
    if gate_mode(s) != "warn":
        proof = settlement_proof_status(s, f, e)
        if proof is None:
            raise PostingPreconditionFailed("PROOF_REQUIRED", "settlement needs a proof evaluation")
        if proof == "INSUFFICIENT_EVIDENCE":
            raise PostingPreconditionFailed(
                "PROOF_INSUFFICIENT", "proof evaluation has insufficient evidence"
            )
        if proof == "FAIL":
            return _refund(s, e, "SETTLED (no-charge)")
        if proof != "PASS":
            raise PostingPreconditionFailed(
                "PROOF_REQUIRED", f"unknown proof status {proof!r}", proofStatus=proof
            )
    sp = splits_for(s, f)
    eid, at = f"jnl_{e['id']}", e["at"]
    postings: list[Posting] = [
        (A.CUSTOMER_ESCROW, sp.service),
        (A.PLATFORM_REVENUE, -sp.platform),
        (A.OWNER_PAYABLE, -sp.owner),
        (A.INSURANCE_RESERVE, -sp.insurance),
    ]
    if sp.operator > 0:
        postings.append((A.OPERATOR_PAYABLE, -sp.operator))
    if sp.royalties > 0:
        postings.append((A.DEVELOPER_ROYALTY_PAYABLE, -sp.royalties))
    postings = [p for p in postings if p[1] != 0]
    entries = [make_entry(eid, at, _memo(s, "SETTLED"), postings)] if postings else []
    fee = sp.coverage_fee
    if fee > 0:
        entries.append(
            make_entry(
                f"{eid}_coverage_recognize",
                at,
                _memo(s, "SETTLED coverage recognize"),
                [(A.COVERAGE_UNEARNED, fee), (A.COVERAGE_REVENUE, -fee)],
            )
        )
        fund = fee * reserve_fund_percent(s) // 100
        if fund > 0:
            entries.append(
                make_entry(
                    f"{eid}_coverage_reserve_fund",
                    at,
                    _memo(s, "SETTLED coverage reserve fund"),
                    [(A.COVERAGE_PAYOUT_EXPENSE, fund), (A.COVERAGE_RESERVE, -fund)],
                )
            )
    return entries


def _claim_for(s: Mapping[str, Any], f: Mapping[str, Any], claim_id: Any) -> Mapping[str, Any]:
    idx = (f.get("claimIndex") or {}).get(claim_id) if type(claim_id) is str else None
    if idx is None:
        raise PostingPreconditionFailed(
            "CLAIM_NOT_FOUND", f"claim {claim_id!r} does not exist", claimId=claim_id
        )
    claim: Mapping[str, Any] = s["claims"][idx]
    return claim


def _job_adjusted(s: Mapping[str, Any], f: Mapping[str, Any], e: Mapping[str, Any]) -> list[Entry]:
    p = _payload(e)
    _require_settled(s, "JOB_ADJUSTED")
    claim_id: Any = p.get("claimId")
    claim = _claim_for(s, f, claim_id)
    if claim.get("status") != "APPROVED":
        raise PostingPreconditionFailed(
            "CLAIM_NOT_APPROVED", f"claim {claim_id} is {claim.get('status')}", claimId=claim_id
        )
    amounts: Any = (claim.get("approved") or {}).get("amounts") or {}
    payout: Any = amounts.get("payoutCents") if amounts.get("payoutCents") is not None else 0
    refund: Any = amounts.get("refundCents") if amounts.get("refundCents") is not None else 0
    if not (is_safe_int(payout) and is_safe_int(refund) and payout >= 0 and refund >= 0 and payout + refund > 0):
        raise PostingPreconditionFailed(
            "CLAIM_AMOUNTS_INVALID", "approved amounts are invalid", claimId=claim_id
        )
    postings: list[Posting] = []
    if payout > 0:
        postings.append((A.CLAIMS_EXPENSE, payout))
    if refund > 0:
        # settlekit: both execution families count (03-ledger.md §11/§12 item 1).
        if not f.get("completedSeen") or f.get("abortedSeen"):
            raise PostingPreconditionFailed(
                "REFUND_NOT_ALLOWED", "refunds need a completed, not aborted job", claimId=claim_id
            )
        sp = splits_for(s, f)
        amount = sp.amount
        if amount <= 0 or refund > amount:
            raise PostingPreconditionFailed(
                "CLAIM_AMOUNTS_INVALID",
                "refund exceeds the quoted amount",
                claimId=claim_id,
                refundCents=refund,
                amountCents=amount,
            )
        x_platform = sp.platform * refund // amount
        x_operator = sp.operator * refund // amount
        x_royalties = sp.royalties * refund // amount
        x_insurance = sp.insurance * refund // amount
        x_coverage = sp.coverage_fee * refund // amount
        owner_rev = refund - (x_platform + x_operator + x_royalties + x_insurance + x_coverage)
        if owner_rev < 0:
            raise PostingPreconditionFailed(
                "CLAIM_AMOUNTS_INVALID", "owner reversal would be negative", claimId=claim_id
            )
        for account_id, amt in (
            (A.PLATFORM_REVENUE, x_platform),
            (A.OWNER_PAYABLE, owner_rev),
            (A.INSURANCE_RESERVE, x_insurance),
            (A.COVERAGE_REVENUE, x_coverage),
            (A.OPERATOR_PAYABLE, x_operator),
            (A.DEVELOPER_ROYALTY_PAYABLE, x_royalties),
        ):
            if amt > 0:
                postings.append((account_id, amt))
        if x_coverage > 0 and sp.coverage_fee > 0:
            fund = sp.coverage_fee * reserve_fund_percent(s) // 100
            fund_rev = fund * x_coverage // sp.coverage_fee
            if fund_rev > 0:
                postings.append((A.COVERAGE_RESERVE, fund_rev))
                postings.append((A.COVERAGE_PAYOUT_EXPENSE, -fund_rev))
    postings.append((A.CLAIMS_PAYABLE, -(payout + refund)))
    return [make_entry(f"jnl_{e['id']}", e["at"], _memo(s, f"claim:{claim_id} ADJUSTED"), postings)]


def _claim_paid(s: Mapping[str, Any], f: Mapping[str, Any], e: Mapping[str, Any]) -> list[Entry]:
    p = _payload(e)
    amount = _positive_amount(p, "CLAIM_PAID.amountCents must be > 0")
    return [
        make_entry(
            f"jnl_{e['id']}",
            e["at"],
            _memo(s, f"claim:{p.get('claimId')} PAID"),
            [(A.CLAIMS_PAYABLE, amount), (A.CASH, -amount)],
        )
    ]


def _operator_cost(s: Mapping[str, Any], f: Mapping[str, Any], e: Mapping[str, Any]) -> list[Entry]:
    _require_settled(s, "OPERATOR_COST_RECORDED")
    p = _payload(e)
    cost: Any = p.get("costCents")
    if not is_safe_int(cost) or cost < 0:
        raise PostingPreconditionFailed("AMOUNT_INVALID", "costCents must be >= 0", costCents=cost)
    if cost == 0:
        return []
    return [
        make_entry(
            f"jnl_{e['id']}",
            e["at"],
            _memo(s, "OPERATOR_COST_RECORDED"),
            [(A.OPERATOR_LABOR_EXPENSE, cost), (A.OPERATOR_COST_ACCRUED, -cost)],
        )
    ]


CREDIT_FUNDING_MODELS: Final = (
    "PLATFORM_EXPENSE",
    "COVERAGE_RESERVE",
    "OPERATOR_CHARGEBACK",
    "INSURER_RECOVERABLE",
)


def _sla_credit(s: Mapping[str, Any], f: Mapping[str, Any], e: Mapping[str, Any]) -> list[Entry]:
    _require_settled(s, "SLA_CREDIT_ISSUED")
    p = _payload(e)
    amount = _positive_amount(p, "SLA credit amountCents must be > 0")
    model: Any = _coverage_policy(s).get("creditFundingModel")
    postings: list[Posting] = []
    if model == "COVERAGE_RESERVE":
        postings.append((A.COVERAGE_RESERVE, amount))
    elif model == "OPERATOR_CHARGEBACK":
        from_payable = max(min(amount, splits_for(s, f).operator), 0)
        if from_payable > 0:
            postings.append((A.OPERATOR_PAYABLE, from_payable))
        if amount - from_payable > 0:
            postings.append((A.OPERATOR_CHARGEBACK_RECEIVABLE, amount - from_payable))
    elif model == "INSURER_RECOVERABLE":
        recv = amount * recoverable_percent(s) // 100
        if recv > 0:
            postings.append((A.INSURER_RECEIVABLE, recv))
        if amount - recv > 0:
            postings.append((A.SLA_CREDITS_EXPENSE, amount - recv))
    else:
        postings.append((A.SLA_CREDITS_EXPENSE, amount))
    postings.append((A.CUSTOMER_CREDITS_PAYABLE, -amount))
    return [make_entry(f"jnl_{e['id']}", e["at"], _memo(s, "SLA_CREDIT_ISSUED"), postings)]


JOB_POSTING_RULES: Final[dict[str, PostingRule]] = {
    "BOOKED": _booked,
    "SETTLED": _settled,
    "JOB_ADJUSTED": _job_adjusted,
    "CLAIM_PAID": _claim_paid,
    "OPERATOR_COST_RECORDED": _operator_cost,
    "SLA_CREDIT_ISSUED": _sla_credit,
}
POSTING_EVENT_TYPES: Final = frozenset(JOB_POSTING_RULES) | {"INSURER_REIMBURSEMENT_RECORDED"}


def entries_for_job_event(
    snapshot_before: Mapping[str, Any], facts_before: Mapping[str, Any], event: Mapping[str, Any]
) -> list[Entry]:
    """Journal entries caused by a job event, from the job state just before it. Empty for non-posting types."""
    rule = JOB_POSTING_RULES.get(event["type"])
    if rule is None:
        return []
    return rule(snapshot_before, facts_before, event)


def entries_for_finance_event(event: Mapping[str, Any]) -> list[Entry]:
    """INSURER_REIMBURSEMENT_RECORDED (finance stream): Dr cash N; Cr insurer_receivable N. Other types: none."""
    if event.get("type") != "INSURER_REIMBURSEMENT_RECORDED":
        return []
    p = _payload(event)
    amount = _positive_amount(p, "reimbursement amountCents must be > 0")
    return [
        make_entry(
            f"jnl_{event['id']}",
            event["at"],
            f"finance reimbursement:{p.get('insurerId')}",
            [(A.CASH, amount), (A.INSURER_RECEIVABLE, -amount)],
        )
    ]
