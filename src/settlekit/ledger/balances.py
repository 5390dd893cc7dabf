"""Pure in-memory balance aggregation (the database projection keeps its own table)."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from settlekit.ledger.errors import UnbalancedEntry


def apply_entry(balances: dict[str, int], entry: Mapping[str, Any]) -> None:
    """Add an entry's postings to `balances` in place; the entry must balance."""
    total = 0
    for posting in entry["postings"]:
        amount = posting["amountCents"]
        total += amount
        balances[posting["accountId"]] = balances.get(posting["accountId"], 0) + amount
    if total != 0:
        raise UnbalancedEntry(
            f"entry {entry.get('id')} does not balance", entryId=entry.get("id"), sumCents=total
        )


def balances_from_entries(entries: Iterable[Mapping[str, Any]]) -> dict[str, int]:
    """Σ postings per account, sorted by account id, keeping accounts that net to 0 (like
    `ledgerTotalsByAccountId`). Accepts entry dicts or vector-style `{eventId, eventType, entry}` items."""
    balances: dict[str, int] = {}
    for item in entries:
        apply_entry(balances, item.get("entry", item))
    return {k: balances[k] for k in sorted(balances)}


def trial_balance_total(balances: Mapping[str, int]) -> int:
    """Sum over all accounts; 0 for any set of balanced entries."""
    return sum(balances.values())
