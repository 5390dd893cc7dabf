"""Party allocations per posting (03-ledger.md §8) and optional split-plan execution.

Default (settld-compatible, used by the vectors and by SettlementStatement.v1): each posting `p<i>` gets
exactly one allocation for the party that owns its account.

Split-plan execution (`execute_split_plan=True`, settlekit extension; 03-ledger.md §10 says v1 only hashes the
plan): when the operator contract has `connect.enabled` and a plan, the operator's payout postings
(acct_owner_payable, acct_operator_payable) are divided over the plan's `gross`/`net_after_credits` rules and
acct_customer_credits_payable postings over its `credits` rules, with `allocate_split`'s rounding (never
loses a cent; leftovers fall to the posting's default party). Allocations of a posting always sum to its amount.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any, Final

from settlekit.events.js import coalesce, get, js_nonblank, js_to_string, js_trim
from settlekit.ledger import accounts as A
from settlekit.ledger.contracts import allocate_split, executable_split_plan
from settlekit.ledger.errors import AllocationError

PartyRole = str
_PAYOUT_ACCOUNTS: Final = frozenset({A.OWNER_PAYABLE, A.OPERATOR_PAYABLE})
_CREDIT_ACCOUNTS: Final = frozenset({A.CUSTOMER_CREDITS_PAYABLE})


def _raw_insurer_id(snapshot: Mapping[str, Any]) -> Any:
    """`booking.policySnapshot.coveragePolicy.insurerId ?? booking.coveragePolicy.insurerId ?? null`."""
    booking = snapshot.get("booking")
    return coalesce(
        get(get(get(booking, "policySnapshot"), "coveragePolicy"), "insurerId"),
        get(get(booking, "coveragePolicy"), "insurerId"),
    )


def insurer_id(snapshot: Mapping[str, Any]) -> str | None:
    """The booking's insurer id when it is a non-blank string (the insurer's party id), else None."""
    value: Any = _raw_insurer_id(snapshot)
    return value if js_nonblank(value) else None


def has_insurer(snapshot: Mapping[str, Any]) -> bool:
    """Whether coverage reserve postings go to the insurer: an insurer id whose `String()` is not blank (settld
    tests the value so; a non-string id then gets the default insurer party)."""
    value: Any = _raw_insurer_id(snapshot)
    return value is not None and js_trim(js_to_string(value)) != ""


def role_for_account(account_id: str, has_insurer: bool) -> PartyRole:
    """First matching rule of the §8 table."""
    if account_id.startswith("acct_customer_"):
        return "customer"
    if "insurer_" in account_id or "coverage_reserve" in account_id:
        return "insurer" if has_insurer else "platform"
    if "developer_" in account_id:
        return "subcontractor"
    if "operator_" in account_id or "owner_" in account_id:
        return "operator"
    return "platform"


PARTY_ROLES: Final = ("platform", "operator", "customer", "subcontractor", "insurer")


def contract_party_id(contract_doc: Any, role: PartyRole) -> str | None:
    """`parties[role].partyId` of an operator contract document when it is a string that JavaScript's `trim`
    leaves non-empty, else None. Any role is read, as settld reads it: its contract validator stores platform,
    operator and customer parties only, but a document handed to the allocations directly may name the
    subcontractor or the insurer too."""
    parties: Any = contract_doc.get("parties") if isinstance(contract_doc, Mapping) else None
    entry: Any = parties.get(role) if type(parties) is dict else None
    party_id: Any = entry.get("partyId") if type(entry) is dict else None
    return party_id if js_nonblank(party_id) else None


def default_party_ids(
    snapshot: Mapping[str, Any], contract_doc: Mapping[str, Any] | None = None
) -> dict[str, str]:
    """Party id per role: the contract document's `parties[role].partyId` (`contract_party_id`), else the
    defaults."""
    # `a ?? b`, then used only when a non-blank string, as settld does
    operator_id: Any = coalesce(get(snapshot.get("operatorCoverage"), "operatorId"),
                                get(snapshot.get("assist"), "operatorId"))
    customer_id: Any = coalesce(snapshot.get("customerId"), get(snapshot.get("booking"), "customerId"))
    insurer = insurer_id(snapshot)
    ids = {
        "platform": "pty_platform",
        "operator": f"pty_operator:{operator_id}" if js_nonblank(operator_id) else "pty_operator",
        "customer": f"pty_customer:{customer_id}" if js_nonblank(customer_id) else "pty_customer",
        "insurer": f"pty_insurer:{insurer}" if insurer else "pty_insurer",
        "subcontractor": "pty_subcontractor",
    }
    for role in PARTY_ROLES:
        from_contract = contract_party_id(contract_doc, role)
        if from_contract is not None:
            ids[role] = from_contract
    return ids


def allocations_for_entry(
    entry: Mapping[str, Any],
    snapshot: Mapping[str, Any],
    *,
    tenant_id: str | None = None,
    contract_doc: Mapping[str, Any] | None = None,
    execute_split_plan: bool = False,
) -> list[dict[str, Any]]:
    """Allocations of one entry against `snapshot` (the projection uses the state after the event)."""
    tenant: Any = tenant_id if tenant_id is not None else snapshot.get("tenantId")
    insured = has_insurer(snapshot)
    parties = default_party_ids(snapshot, contract_doc)
    plan = executable_split_plan(contract_doc) if execute_split_plan else None
    entry_id = entry["id"]
    out: list[dict[str, Any]] = []
    for i, posting in enumerate(entry["postings"]):
        account_id = posting["accountId"]
        amount = posting["amountCents"]
        role = role_for_account(account_id, insured)
        base = {"tenantId": tenant, "entryId": entry_id, "postingId": f"p{i}", "accountId": account_id}
        rules = _plan_rules(plan, account_id) if plan is not None else None
        if not rules:
            out.append(
                {
                    **base,
                    "partyId": parties[role],
                    "partyRole": role,
                    "currency": A.CURRENCY,
                    "amountCents": amount,
                }
            )
            continue
        merged = _split_shares(amount, rules, role, parties)
        if sum(merged.values()) != amount:
            raise AllocationError(
                f"allocations of {entry_id} p{i} do not sum to the posting", entryId=entry_id
            )
        for (party_id, r_role), share in merged.items():
            if share != 0:
                out.append(
                    {
                        **base,
                        "partyId": party_id,
                        "partyRole": r_role,
                        "currency": A.CURRENCY,
                        "amountCents": share,
                    }
                )
    return out


def _split_shares(
    amount: int, rules: list[Mapping[str, Any]], default_role: PartyRole, parties: Mapping[str, str]
) -> dict[tuple[str, str], int]:
    """The posting's amount divided over the plan rules, merged per (party id, role) in first-seen order; a
    rule without a role or party id falls back to the posting's role and that role's party."""
    merged: dict[tuple[str, str], int] = {}
    for rule, share in allocate_split(amount, rules):
        r_role: Any = rule.get("partyRole") or default_role
        r_party: Any = rule.get("partyId") if js_nonblank(rule.get("partyId")) else parties[r_role]
        key = (r_party, r_role)
        merged[key] = merged.get(key, 0) + share
    return merged


def _plan_rules(plan: Mapping[str, Any], account_id: str) -> list[Mapping[str, Any]]:
    if account_id in _PAYOUT_ACCOUNTS:
        return [r for r in plan["rules"] if r.get("appliesTo") in (None, "gross", "net_after_credits")]
    if account_id in _CREDIT_ACCOUNTS:
        return [r for r in plan["rules"] if r.get("appliesTo") == "credits"]
    return []


def allocations_for_entries(
    entries: Iterable[Mapping[str, Any]],
    snapshot: Mapping[str, Any],
    *,
    tenant_id: str | None = None,
    contract_doc: Mapping[str, Any] | None = None,
    execute_split_plan: bool = False,
) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    for entry in entries:
        out.extend(
            allocations_for_entry(
                entry,
                snapshot,
                tenant_id=tenant_id,
                contract_doc=contract_doc,
                execute_split_plan=execute_split_plan,
            )
        )
    return out
