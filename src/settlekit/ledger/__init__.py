"""Pure double-entry ledger: chart of accounts, splits, postings per event, allocations, contracts, balances."""

from settlekit.ledger.accounts import (
    ACCOUNT_IDS,
    CHART_OF_ACCOUNTS,
    MAX_AMOUNT_CENTS,
    chart_rows,
    is_known_account,
)
from settlekit.ledger.allocations import (
    allocations_for_entries,
    allocations_for_entry,
    default_party_ids,
    insurer_id,
    role_for_account,
)
from settlekit.ledger.balances import apply_entry, balances_from_entries, trial_balance_total
from settlekit.ledger.contracts import (
    allocate_split,
    compile_contract_policy,
    contract_hash,
    contract_split_plan_hash,
    executable_split_plan,
    normalize_contract_document,
    normalize_policy_snapshot,
    normalize_split_plan,
    policy_snapshot_hash,
    split_plan_hash,
)
from settlekit.ledger.errors import (
    AllocationError,
    ContractInvalid,
    LedgerError,
    PostingPreconditionFailed,
    SplitsInvalid,
    UnbalancedEntry,
)
from settlekit.ledger.postings import (
    JOB_POSTING_RULES,
    POSTING_EVENT_TYPES,
    entries_for_finance_event,
    entries_for_job_event,
    make_entry,
    settlement_proof_status,
    splits_for,
)
from settlekit.ledger.splits import SettlementSplits, compute_splits

__all__ = [
    "ACCOUNT_IDS",
    "CHART_OF_ACCOUNTS",
    "JOB_POSTING_RULES",
    "MAX_AMOUNT_CENTS",
    "POSTING_EVENT_TYPES",
    "AllocationError",
    "ContractInvalid",
    "LedgerError",
    "PostingPreconditionFailed",
    "SettlementSplits",
    "SplitsInvalid",
    "UnbalancedEntry",
    "allocate_split",
    "allocations_for_entries",
    "allocations_for_entry",
    "apply_entry",
    "balances_from_entries",
    "chart_rows",
    "compile_contract_policy",
    "compute_splits",
    "contract_hash",
    "contract_split_plan_hash",
    "default_party_ids",
    "entries_for_finance_event",
    "entries_for_job_event",
    "executable_split_plan",
    "insurer_id",
    "is_known_account",
    "make_entry",
    "normalize_contract_document",
    "normalize_policy_snapshot",
    "normalize_split_plan",
    "policy_snapshot_hash",
    "role_for_account",
    "settlement_proof_status",
    "split_plan_hash",
    "splits_for",
    "trial_balance_total",
]
