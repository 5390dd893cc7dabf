"""Ledger errors (03-ledger.md §9). At append they surface as 409 LEDGER_POSTING_INVALID with `details.code`."""

from __future__ import annotations

from typing import Any

from settlekit.errors import SettlekitError, ValidationError


class LedgerError(SettlekitError):
    """Base class: `code` is LEDGER_POSTING_INVALID, `reason` (also `details["code"]`) the specific cause."""

    code = "LEDGER_POSTING_INVALID"
    status = 409
    reason = "LEDGER_ERROR"

    def __init__(self, message: str, *, reason: str | None = None, **details: Any):
        super().__init__(message, **details)
        if reason is not None:
            self.reason = reason
        self.details["code"] = self.reason


class UnbalancedEntry(LedgerError):
    reason = "UNBALANCED_ENTRY"


class SplitsInvalid(LedgerError):
    reason = "SPLITS_INVALID"


class PostingPreconditionFailed(LedgerError):
    """`reason` is one of QUOTE_MISSING, JOB_NOT_SETTLED, CLAIM_NOT_APPROVED, CLAIM_NOT_FOUND,
    CLAIM_AMOUNTS_INVALID, REFUND_NOT_ALLOWED, PROOF_REQUIRED, PROOF_INSUFFICIENT, AMOUNT_INVALID, JOB_NOT_TERMINAL."""

    def __init__(self, reason: str, message: str, **details: Any):
        super().__init__(message, reason=reason, **details)


class AllocationError(LedgerError):
    reason = "ALLOCATION_INVALID"


class ContractInvalid(ValidationError):
    """A ContractDocument.v1 or SplitPlan.v1 does not validate (400)."""

    code = "CONTRACT_INVALID"
