"""Journal entries per event (03-ledger.md §5), a pure function of (job state before, event).

Every rule follows settld 0.1.0's posting rules, including its error cases: a rule raises a LedgerError whose
message is settld's own text. The caller decides what an error means: the offline tools and the live append
path record it as a posting error and go on without an entry (as settld does); nothing here is skipped
silently. Divisions that settld performs in IEEE doubles (`Math.floor(a * b / c)`) are computed with Python
floats (same IEEE-754 semantics), on purpose, so results match settld to the cent even near 2**53.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from typing import Any, Final

from settlekit.events.canonical import is_safe_int
from settlekit.events.js import js_nonblank, js_trim
from settlekit.ledger import accounts as A
from settlekit.ledger.errors import PostingPreconditionFailed, UnbalancedEntry
from settlekit.ledger.splits import SettlementSplits, compute_splits

Entry = dict[str, Any]
Posting = tuple[str, int]


def js_floor_div(a: int, b: int, c: int) -> int:
    """`Math.floor((a * b) / c)` evaluated in IEEE doubles exactly as settld does (Python floats are
    IEEE-754 doubles with the same rounding); deliberately not exact integer arithmetic."""
    return math.floor(float(a) * float(b) / float(c))


def make_entry(entry_id: str, at: str, memo: str, postings: list[Posting]) -> Entry:
    """Build `{id, at, memo, postings}`; raises UnbalancedEntry unless there are >= 2 non-zero safe-integer
    postings on known accounts summing to exactly 0 (settld's messages)."""
    if len(postings) < 2:
        raise UnbalancedEntry("postings must be an array of at least 2 items", entryId=entry_id)
    total = 0
    out = []
    for account_id, amount in postings:
        if account_id not in A.CHART_OF_ACCOUNTS:
            raise UnbalancedEntry(
                f"entry {entry_id} posts to unknown account {account_id}",
                entryId=entry_id,
                accountId=account_id,
            )
        if not is_safe_int(amount):
            raise UnbalancedEntry(
                "amountCents must be a safe integer (cents)", entryId=entry_id, accountId=account_id
            )
        if amount == 0:
            raise UnbalancedEntry("amountCents must be non-zero", entryId=entry_id, accountId=account_id)
        total += amount
        out.append({"accountId": account_id, "amountCents": amount})
    if total != 0:
        raise UnbalancedEntry(
            f"journal entry must balance to zero; got sum={total}", entryId=entry_id, sumCents=total
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
    """A = quote.amountCents; QUOTE_MISSING / AMOUNT_INVALID when absent or not a safe integer."""
    quote = snapshot.get("quote")
    amount: Any = quote.get("amountCents") if type(quote) is dict else None
    if not is_safe_int(amount):
        reason = "QUOTE_MISSING" if type(quote) is not dict else "AMOUNT_INVALID"
        raise PostingPreconditionFailed(
            reason, "job.quote.amountCents must be a safe integer", amountCents=amount
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


def royalties_cents(snapshot: Mapping[str, Any]) -> int:
    """Sum of the job's skill license fees (`pricing.amountCents`, safe integers > 0 only)."""
    total = 0
    licenses: Any = snapshot.get("skillLicenses")
    for lic in licenses if type(licenses) is list else []:
        pricing: Any = lic.get("pricing") if type(lic) is dict else None
        amount: Any = pricing.get("amountCents") if type(pricing) is dict else None
        if is_safe_int(amount) and amount > 0:
            total += amount
    return total


def splits_for(snapshot: Mapping[str, Any], facts: Mapping[str, Any]) -> SettlementSplits:
    return compute_splits(
        quote_amount(snapshot),
        coverage_fee(snapshot),
        bool(facts.get("assistStarted")),
        royalties_cents(snapshot),
    )


def _memo(snapshot: Mapping[str, Any], label: str) -> str:
    return f"job:{snapshot['id']} {label}"


def _payload(event: Mapping[str, Any]) -> Mapping[str, Any]:
    p = event.get("payload")
    return p if type(p) is dict else {}


def _safe_amount(p: Mapping[str, Any], field: str, *, positive: bool) -> int:
    """`p[field]` when a safe integer (> 0 or >= 0), else AMOUNT_INVALID with settld's message."""
    amount: Any = p.get(field)
    if not is_safe_int(amount):
        raise PostingPreconditionFailed(
            "AMOUNT_INVALID", f"payload.{field} must be a safe integer", **{field: amount}
        )
    if positive and amount <= 0:
        raise PostingPreconditionFailed("AMOUNT_INVALID", f"payload.{field} must be positive", **{field: amount})
    if not positive and amount < 0:
        raise PostingPreconditionFailed("AMOUNT_INVALID", f"payload.{field} must be >= 0", **{field: amount})
    return amount


def _require_settled(snapshot: Mapping[str, Any], event_type: str) -> None:
    if snapshot.get("status") != "SETTLED":
        raise PostingPreconditionFailed(
            "JOB_NOT_SETTLED", f"{event_type} requires job to be SETTLED", status=snapshot.get("status")
        )


def _claim_id(p: Mapping[str, Any]) -> str:
    claim_id: Any = p.get("claimId")
    if not js_nonblank(claim_id):
        raise PostingPreconditionFailed("CLAIM_ID_REQUIRED", "payload.claimId is required")
    return claim_id


# --- per event type ---

PostingRule = Callable[[Mapping[str, Any], Mapping[str, Any], Mapping[str, Any]], list[Entry]]


def _booked(s: Mapping[str, Any], f: Mapping[str, Any], e: Mapping[str, Any]) -> list[Entry]:
    amount = quote_amount(s)
    eid, at = f"jnl_{e['id']}", e["at"]
    entries = [make_entry(eid, at, _memo(s, "BOOKED"), [(A.CASH, amount), (A.CUSTOMER_ESCROW, -amount)])]
    fee = coverage_fee(s)
    if fee:
        entries.append(
            make_entry(
                f"{eid}_coverage_fee",
                at,
                _memo(s, "BOOKED coverage fee"),
                [(A.CUSTOMER_ESCROW, fee), (A.COVERAGE_UNEARNED, -fee)],
            )
        )
    return entries


def _return_escrow(s: Mapping[str, Any], e: Mapping[str, Any], label: str, amount: int, fee: int) -> list[Entry]:
    """Refund / no-charge: escrow (and unearned coverage) back to cash. Zero amounts are not dropped: a
    service amount of 0 is a posting error, as in settld."""
    if fee:
        postings: list[Posting] = [
            (A.CUSTOMER_ESCROW, amount - fee),
            (A.COVERAGE_UNEARNED, fee),
            (A.CASH, -amount),
        ]
    else:
        postings = [(A.CUSTOMER_ESCROW, amount), (A.CASH, -amount)]
    return [make_entry(f"jnl_{e['id']}", e["at"], _memo(s, label), postings)]


def _nonblank_str(v: Any) -> str | None:
    return v if js_nonblank(v) else None


def settlement_proof_status(s: Mapping[str, Any], f: Mapping[str, Any], e: Mapping[str, Any]) -> str | None:
    """`payload.settlementProofRef.status` if a non-blank string, else the latest PROOF_EVALUATED status
    for the latest completion anchor, else None."""
    p = e.get("payload")
    ref = p.get("settlementProofRef") if type(p) is dict else None
    status = _nonblank_str(ref.get("status") if type(ref) is dict else None)
    return status if status is not None else fallback_proof_status(f)


def fallback_proof_status(f: Mapping[str, Any]) -> str | None:
    """Status of the latest PROOF_EVALUATED anchored at the latest completion's chain hash, or None."""
    completion = f.get("latestCompletion")
    anchor = _nonblank_str(completion.get("chainHash") if completion else None)
    if anchor is None:
        return None
    found: Any = (f.get("proofStatusByAnchor") or {}).get(js_trim(anchor))
    return found if type(found) is str and found else None


_PROOF_REQUIRED_MSG: Final = "SETTLED requires settlementProofRef (or PROOF_EVALUATED) in strict/holdback mode"
_PROOF_INSUFFICIENT_MSG: Final = "SETTLED cannot proceed with INSUFFICIENT_EVIDENCE in strict/holdback mode"


def _settled(s: Mapping[str, Any], f: Mapping[str, Any], e: Mapping[str, Any]) -> list[Entry]:
    amount = quote_amount(s)
    fee = coverage_fee(s)
    status: Any = s.get("status")
    if status == "ABORTED":
        return _return_escrow(s, e, "SETTLED (refund)", amount, fee)
    if status != "COMPLETED":
        raise PostingPreconditionFailed(
            "JOB_NOT_TERMINAL", "SETTLED ledger entry requires job to be COMPLETED or ABORTED", status=status
        )
    if gate_mode(s) != "warn" and _gated_proof_status(f, e) == "FAIL":
        return _return_escrow(s, e, "SETTLED (no-charge)", amount, fee)
    sp = splits_for(s, f)
    eid, at = f"jnl_{e['id']}", e["at"]
    postings: list[Posting] = [
        (A.CUSTOMER_ESCROW, sp.service),
        (A.PLATFORM_REVENUE, -sp.platform),
        (A.OWNER_PAYABLE, -sp.owner),
        (A.INSURANCE_RESERVE, -sp.insurance),
    ]
    if sp.operator:
        postings.append((A.OPERATOR_PAYABLE, -sp.operator))
    if sp.royalties:
        postings.append((A.DEVELOPER_ROYALTY_PAYABLE, -sp.royalties))
    entries = [make_entry(eid, at, _memo(s, "SETTLED"), postings)]
    if sp.coverage_fee:
        entries.extend(_coverage_recognition(s, eid, at, sp.coverage_fee))
    return entries


def _gated_proof_status(f: Mapping[str, Any], e: Mapping[str, Any]) -> str:
    """The proof status a strict/holdback SETTLED goes by; raises when it is missing or insufficient."""
    p = e.get("payload")
    ref = p.get("settlementProofRef") if type(p) is dict else None
    proof = _nonblank_str(ref.get("status") if type(ref) is dict else None)
    if proof is None:
        # No status on the payload: the proof of the completion decides (settld's fallback).
        proof = fallback_proof_status(f)
        if proof is None:
            raise PostingPreconditionFailed("PROOF_REQUIRED", _PROOF_REQUIRED_MSG)
    if proof == "INSUFFICIENT_EVIDENCE":
        raise PostingPreconditionFailed("PROOF_INSUFFICIENT", _PROOF_INSUFFICIENT_MSG)
    return proof


def _coverage_recognition(s: Mapping[str, Any], eid: str, at: str, fee: int) -> list[Entry]:
    """SETTLED's coverage entries: the unearned fee recognized, then the reserve fund share (if any)."""
    entries = [
        make_entry(
            f"{eid}_coverage_recognize",
            at,
            _memo(s, "SETTLED coverage recognize"),
            [(A.COVERAGE_UNEARNED, fee), (A.COVERAGE_REVENUE, -fee)],
        )
    ]
    fund = js_floor_div(fee, reserve_fund_percent(s), 100)
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


def _claim_for(s: Mapping[str, Any], claim_id: str) -> Mapping[str, Any]:
    claims: Any = s.get("claims")
    for claim in claims if type(claims) is list else []:
        if type(claim) is dict and claim.get("claimId") == claim_id:
            return claim
    raise PostingPreconditionFailed("CLAIM_NOT_FOUND", "claim not found on job", claimId=claim_id)


def _approved_amount(amounts: Any, field: str) -> int:
    v: Any = amounts.get(field) if type(amounts) is dict else None
    if v is None:
        return 0
    if not is_safe_int(v):
        raise PostingPreconditionFailed("CLAIM_AMOUNTS_INVALID", f"claim.{field} must be a safe integer")
    return v


def _job_adjusted(s: Mapping[str, Any], f: Mapping[str, Any], e: Mapping[str, Any]) -> list[Entry]:
    _require_settled(s, "JOB_ADJUSTED")
    claim_id = _claim_id(_payload(e))
    claim = _claim_for(s, claim_id)
    if claim.get("status") != "APPROVED":
        raise PostingPreconditionFailed(
            "CLAIM_NOT_APPROVED", "JOB_ADJUSTED requires claim status APPROVED", claimId=claim_id
        )
    payout, refund = _approved_claim_amounts(claim, claim_id)
    total = payout + refund
    postings: list[Posting] = []
    if payout:
        postings.append((A.CLAIMS_EXPENSE, payout))
    if refund:
        postings.extend(_refund_reversal(s, f, refund, claim_id))
    postings.append((A.CLAIMS_PAYABLE, -total))
    return [make_entry(f"jnl_{e['id']}", e["at"], _memo(s, f"claim:{claim_id} ADJUSTED"), postings)]


def _approved_claim_amounts(claim: Mapping[str, Any], claim_id: str) -> tuple[int, int]:
    """`(payoutCents, refundCents)` of the claim's approval: safe, non-negative, not both zero."""
    approved: Any = claim.get("approved")
    amounts: Any = approved.get("amounts") if type(approved) is dict else None
    payout = _approved_amount(amounts, "payoutCents")
    refund = _approved_amount(amounts, "refundCents")
    if payout < 0 or refund < 0:
        raise PostingPreconditionFailed(
            "CLAIM_AMOUNTS_INVALID", "claim amounts must be non-negative", claimId=claim_id
        )
    if payout + refund <= 0:
        raise PostingPreconditionFailed(
            "CLAIM_AMOUNTS_INVALID", "JOB_ADJUSTED requires non-zero claim amounts", claimId=claim_id
        )
    return payout, refund


def _refund_reversal(s: Mapping[str, Any], f: Mapping[str, Any], refund: int, claim_id: str) -> list[Posting]:
    """The settlement's split reversed in proportion to `refund` (the payable side of JOB_ADJUSTED's refund)."""
    quote_amount(s)
    # settld counts only the legacy EXECUTION_COMPLETED / EXECUTION_ABORTED events here.
    if not f.get("legacyCompletedSeen") or f.get("legacyAbortedSeen"):
        raise PostingPreconditionFailed(
            "REFUND_NOT_ALLOWED",
            "refund adjustments are only supported for settled, completed jobs",
            claimId=claim_id,
        )
    sp = splits_for(s, f)
    amount = sp.amount
    if refund > amount:
        raise PostingPreconditionFailed(
            "CLAIM_AMOUNTS_INVALID", "refundCents exceeds original amount", claimId=claim_id
        )
    # IEEE-double floor(x * refund / amount), exactly as settld (see js_floor_div).
    x_platform = js_floor_div(sp.platform, refund, amount)
    x_operator = js_floor_div(sp.operator, refund, amount)
    x_royalties = js_floor_div(sp.royalties, refund, amount)
    x_insurance = js_floor_div(sp.insurance, refund, amount)
    x_coverage = js_floor_div(sp.coverage_fee, refund, amount)
    owner_rev = refund - (x_platform + x_operator + x_royalties + x_insurance + x_coverage)
    if owner_rev < 0:
        raise PostingPreconditionFailed(
            "CLAIM_AMOUNTS_INVALID",
            "refund reversal splits invalid: owner reversal would be negative",
            claimId=claim_id,
        )
    postings: list[Posting] = []
    for account_id, amt in (
        (A.PLATFORM_REVENUE, x_platform),
        (A.OWNER_PAYABLE, owner_rev),
        (A.INSURANCE_RESERVE, x_insurance),
        (A.COVERAGE_REVENUE, x_coverage),
        (A.OPERATOR_PAYABLE, x_operator),
        (A.DEVELOPER_ROYALTY_PAYABLE, x_royalties),
    ):
        if amt:
            postings.append((account_id, amt))
    if x_coverage and sp.coverage_fee:
        fund = js_floor_div(sp.coverage_fee, reserve_fund_percent(s), 100)
        fund_rev = js_floor_div(fund, x_coverage, sp.coverage_fee)
        if fund_rev > 0:
            postings.append((A.COVERAGE_RESERVE, fund_rev))
            postings.append((A.COVERAGE_PAYOUT_EXPENSE, -fund_rev))
    return postings


def _claim_paid(s: Mapping[str, Any], f: Mapping[str, Any], e: Mapping[str, Any]) -> list[Entry]:
    p = _payload(e)
    claim_id = _claim_id(p)
    amount = _safe_amount(p, "amountCents", positive=True)
    return [
        make_entry(
            f"jnl_{e['id']}",
            e["at"],
            _memo(s, f"claim:{claim_id} PAID"),
            [(A.CLAIMS_PAYABLE, amount), (A.CASH, -amount)],
        )
    ]


def _operator_cost(s: Mapping[str, Any], f: Mapping[str, Any], e: Mapping[str, Any]) -> list[Entry]:
    _require_settled(s, "OPERATOR_COST_RECORDED")
    cost = _safe_amount(_payload(e), "costCents", positive=False)
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
    amount = _safe_amount(_payload(e), "amountCents", positive=True)
    model: Any = _coverage_policy(s).get("creditFundingModel")
    postings: list[Posting] = []
    if model == "COVERAGE_RESERVE":
        postings.append((A.COVERAGE_RESERVE, amount))
    elif model == "OPERATOR_CHARGEBACK":
        from_payable = max(0, min(amount, splits_for(s, f).operator))
        if from_payable > 0:
            postings.append((A.OPERATOR_PAYABLE, from_payable))
        if amount - from_payable > 0:
            postings.append((A.OPERATOR_CHARGEBACK_RECEIVABLE, amount - from_payable))
        if not postings:
            postings.append((A.OPERATOR_CHARGEBACK_RECEIVABLE, amount))
    elif model == "INSURER_RECOVERABLE":
        recv = js_floor_div(amount, recoverable_percent(s), 100)
        if recv > 0:
            postings.append((A.INSURER_RECEIVABLE, recv))
        if amount - recv > 0:
            postings.append((A.SLA_CREDITS_EXPENSE, amount - recv))
        if not postings:
            postings.append((A.SLA_CREDITS_EXPENSE, amount))
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
    amount = _safe_amount(p, "amountCents", positive=True)
    return [
        make_entry(
            f"jnl_{event['id']}",
            event["at"],
            f"finance reimbursement:{p.get('insurerId')}",
            [(A.CASH, amount), (A.INSURER_RECEIVABLE, -amount)],
        )
    ]
