"""SQLite form of the ledger writer (store.ledger.write_entries): the entries are inserted one by one (a statement
costs no round trip here), and only those inserted carry their balances, allocations, timeline postings and bucket
sums. The row forms are store/postgres/ledger.py's."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from settlekit.store.database import Tx
from settlekit.store.sql import statements


def write_entries(tx: Tx, tenant_id: str, job_id: str, entries: Sequence[Sequence[Any]],
                  postings: Sequence[Sequence[Any]], allocations: Sequence[Sequence[Any]],
                  sums: Sequence[Sequence[Any]]) -> None:
    """Write the rows of one append (see store/postgres/ledger.py `LedgerRows` for their forms, here without
    the tenant; entries without the job id)."""
    inserted: set[tuple[Any, ...]] = set()
    for entry_id, event_id, event_type, seq, index, at, memo, entry_json in entries:
        row = tx.fetchone(
            "INSERT INTO ledger_entries (tenant_id, entry_id, job_id, source_event_id, event_type, source_seq,"
            " entry_index, at, memo, entry_json) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)"
            " ON CONFLICT DO NOTHING RETURNING entry_id",
            (tenant_id, entry_id, job_id, event_id, event_type, seq, index, at, memo, entry_json))
        if row is not None:
            inserted.add((entry_id, event_id, index))
    new_postings = [p for p in postings if (p[0], p[1], p[5]) in inserted]
    balances: dict[str, int] = {}
    for _entry, _event, party, account, *_rest, amount in new_postings:
        if party == "":
            balances[account] = balances.get(account, 0) + amount
    tx.executemany(
        "INSERT INTO ledger_balances (tenant_id, account_id, balance_cents) VALUES (?, ?, ?)"
        " ON CONFLICT (tenant_id, account_id) DO UPDATE"
        " SET balance_cents = ledger_balances.balance_cents + excluded.balance_cents",
        [(tenant_id, account, cents) for account, cents in sorted(balances.items())])
    tx.executemany(
        "INSERT INTO ledger_allocations (tenant_id, entry_id, posting_id, account_id, party_id, party_role,"
        " currency, amount_cents) VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
        [(tenant_id, a[0], *a[3:]) for a in allocations if (a[0], a[1], a[2]) in inserted])
    timeline = statements("ledger_timeline", tx.dialect)
    tx.executemany(timeline["insert_posting"],
                   [(tenant_id, party, account, position, entry_index, posting_index, entry_id, at_ms, amount)
                    for entry_id, _event, party, account, position, entry_index, posting_index, at_ms, amount
                    in new_postings])
    summed: dict[tuple[Any, ...], int] = {}
    for entry_id, event_id, index, *key, amount in sums:
        if (entry_id, event_id, index) in inserted:
            summed[tuple(key)] = summed.get(tuple(key), 0) + amount
    tx.executemany(timeline["add_sum"], [(tenant_id, *key, amount) for key, amount in sorted(summed.items())])
