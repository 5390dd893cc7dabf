"""Chart of accounts and sign convention (03-ledger.md §1-§2).

Positive amounts are debits, negative amounts are credits; every entry sums to exactly zero.
"""

from __future__ import annotations

from typing import Final, Literal

AccountType = Literal["asset", "liability", "revenue", "reserve", "expense"]
NormalSide = Literal["debit", "credit"]

# Amounts may use the whole JS safe-integer range, as settld 0.1.0 accepts (no lower business cap).
MAX_AMOUNT_CENTS: Final = 2**53 - 1  # every JS safe integer is an amount, as in settld 0.1.0 (no business cap)
CURRENCY: Final = "USD"

CASH: Final = "acct_cash"
CUSTOMER_ESCROW: Final = "acct_customer_escrow"
PLATFORM_REVENUE: Final = "acct_platform_revenue"
OWNER_PAYABLE: Final = "acct_owner_payable"
OPERATOR_PAYABLE: Final = "acct_operator_payable"
DEVELOPER_ROYALTY_PAYABLE: Final = "acct_developer_royalty_payable"
INSURANCE_RESERVE: Final = "acct_insurance_reserve"
COVERAGE_RESERVE: Final = "acct_coverage_reserve"
COVERAGE_UNEARNED: Final = "acct_coverage_unearned"
COVERAGE_REVENUE: Final = "acct_coverage_revenue"
COVERAGE_PAYOUT_EXPENSE: Final = "acct_coverage_payout_expense"
INSURER_RECEIVABLE: Final = "acct_insurer_receivable"
OPERATOR_CHARGEBACK_RECEIVABLE: Final = "acct_operator_chargeback_receivable"
CLAIMS_EXPENSE: Final = "acct_claims_expense"
CLAIMS_PAYABLE: Final = "acct_claims_payable"
OPERATOR_LABOR_EXPENSE: Final = "acct_operator_labor_expense"
OPERATOR_COST_ACCRUED: Final = "acct_operator_cost_accrued"
SLA_CREDITS_EXPENSE: Final = "acct_sla_credits_expense"
CUSTOMER_CREDITS_PAYABLE: Final = "acct_customer_credits_payable"

# id -> (type, normal side), in chart order.
CHART_OF_ACCOUNTS: Final[dict[str, tuple[AccountType, NormalSide]]] = {
    CASH: ("asset", "debit"),
    CUSTOMER_ESCROW: ("liability", "credit"),
    PLATFORM_REVENUE: ("revenue", "credit"),
    OWNER_PAYABLE: ("liability", "credit"),
    OPERATOR_PAYABLE: ("liability", "credit"),
    DEVELOPER_ROYALTY_PAYABLE: ("liability", "credit"),
    INSURANCE_RESERVE: ("reserve", "credit"),
    COVERAGE_RESERVE: ("reserve", "credit"),
    COVERAGE_UNEARNED: ("liability", "credit"),
    COVERAGE_REVENUE: ("revenue", "credit"),
    COVERAGE_PAYOUT_EXPENSE: ("expense", "debit"),
    INSURER_RECEIVABLE: ("asset", "debit"),
    OPERATOR_CHARGEBACK_RECEIVABLE: ("asset", "debit"),
    CLAIMS_EXPENSE: ("expense", "debit"),
    CLAIMS_PAYABLE: ("liability", "credit"),
    OPERATOR_LABOR_EXPENSE: ("expense", "debit"),
    OPERATOR_COST_ACCRUED: ("liability", "credit"),
    SLA_CREDITS_EXPENSE: ("expense", "debit"),
    CUSTOMER_CREDITS_PAYABLE: ("liability", "credit"),
}
ACCOUNT_IDS: Final = tuple(CHART_OF_ACCOUNTS)


def is_known_account(account_id: str) -> bool:
    return account_id in CHART_OF_ACCOUNTS


def chart_rows() -> list[dict[str, str]]:
    """The chart as rows `{accountId, type, normalSide}` (created with each tenant)."""
    return [{"accountId": a, "type": t, "normalSide": n} for a, (t, n) in CHART_OF_ACCOUNTS.items()]
