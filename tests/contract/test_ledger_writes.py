"""The ledger writer on both backends: with the source events' positions given (the append) or read, and on
PostgreSQL (one statement, gathered over a whole group commit) as on SQLite (row by row), it stores the same rows,
including when an entry id is already stored or repeats within one write."""

from __future__ import annotations

import uuid
from pathlib import Path
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from settlekit.append import job_appender
from settlekit.events.envelope import Signer, finalize, make_draft
from settlekit.ledger import accounts as A
from settlekit.ledger.postings import make_entry
from settlekit.store import ledger as ledger_rows
from settlekit.store.db import Database, connect
from settlekit.store.postgres.backend import PostgresTx
from settlekit.store.postgres.ledger import LedgerRows

ACCOUNTS = (A.CASH, A.CUSTOMER_ESCROW, A.PLATFORM_REVENUE, A.OPERATOR_PAYABLE)
TABLES = {
    "ledger_entries": "entry_id, job_id, source_event_id, event_type, source_seq, entry_index, at, memo, entry_json",
    "ledger_balances": "account_id, balance_cents",
    "ledger_allocations": "entry_id, posting_id, account_id, party_id, party_role, currency, amount_cents",
    "ledger_postings": "party_id, account_id, position, entry_index, posting_index, entry_id, at_ms, amount_cents",
    "ledger_sums": "party_id, axis, level, bucket, account_id, amount_cents",
}

SERVER_SIGNER = Signer.generate()


def _source_events(db: Database, tenant: str, count: int) -> dict[str, int]:
    """`count` stored events (the timeline places entries at their source event's position): {event id: position}."""
    stream = f"src_{uuid.uuid4().hex[:8]}"
    ids = [f"evt_{stream}_{i}" for i in range(count)]
    prev = None
    for i, event_id in enumerate(ids):
        draft = make_draft(stream_id=stream, type="MONTH_CLOSE_REQUESTED", actor={"type": "system", "id": "t"},
                           payload={}, at=f"2026-05-0{1 + i % 9}T10:00:00.000Z", id=event_id)
        event = finalize(draft, prev, SERVER_SIGNER)
        prev = event["chainHash"]
        job_appender(db, server_rules=False, server_signer=SERVER_SIGNER).append(tenant, stream, [event])
    with db.read() as tx:
        rows = tx.fetchall("SELECT event_id, position FROM events WHERE tenant_id = ?", (tenant,))
    return {str(r[0]): int(r[1]) for r in rows}


def _items(event_ids: list[str], amounts: list[int], repeat: bool) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """One or two entries per event (the second with its own id), allocations on the escrow side; `repeat`: the
    last entry reuses the first one's id (it must add nothing)."""
    items: list[dict[str, Any]] = []
    allocations: list[dict[str, Any]] = []
    for i, amount in enumerate(amounts):
        event_id = event_ids[i % len(event_ids)]
        entry_id = f"jnl_{event_id}_{i}"
        debit, credit = ACCOUNTS[i % 2], ACCOUNTS[2 + i % 2]
        entry = make_entry(entry_id, f"2026-05-0{1 + i % 9}T1{i % 10}:00:00.000Z", f"memo {i}",
                           [(debit, amount), (credit, -amount)])
        items.append({"eventId": event_id, "eventType": "MONTH_CLOSE_REQUESTED", "entry": entry})
        allocations.append({"entryId": entry_id, "postingId": "p1", "accountId": credit, "partyId": f"pty_{i % 3}",
                            "partyRole": "operator", "currency": "USD", "amountCents": -amount})
    if repeat and len(items) > 1:
        last_id = items[-1]["entry"]["id"]
        items[-1] = {**items[-1], "entry": {**items[-1]["entry"], "id": items[0]["entry"]["id"]}}
        allocations = [a for a in allocations if a["entryId"] != last_id]
    return items, allocations


def _tables(db: Database, tenant: str) -> dict[str, list[tuple[Any, ...]]]:
    with db.read() as tx:
        return {table: sorted(tuple(r) for r in tx.fetchall(f"SELECT {columns} FROM {table} WHERE tenant_id = ?",
                                                               (tenant,)))
                for table, columns in TABLES.items()}


def _write(db: Database, tenant: str, items: list[dict[str, Any]], allocations: list[dict[str, Any]],
           seqs: dict[str, int], positions: dict[str, int] | None) -> None:
    with db.transaction() as tx:
        ledger_rows.write_entries(tx, tenant, "job_1", items, allocations, seqs, positions)


@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(amounts=st.lists(st.integers(min_value=1, max_value=10**9), min_size=1, max_size=7), repeat=st.booleans(),
       stored_first=st.booleans())
def test_positions_known_or_read_store_the_same_rows(db: Database, tmp_path: Path, amounts: list[int], repeat: bool,
                                                     stored_first: bool) -> None:
    """The same entries with their positions given and read, in two tenants: the stored rows are identical (a
    repeated id adds nothing; with `stored_first` the first entry is already stored, written alone before). On
    PostgreSQL (one statement) they are also those the SQLite writer (row by row) stores."""
    tables = []
    for given_positions in (False, True):
        tables.append(_written(db, amounts, repeat, stored_first, given_positions))
    assert tables[0] == tables[1]
    if db.dialect == "postgres":
        reference = connect(f"sqlite:///{tmp_path / uuid.uuid4().hex}.db")
        try:
            reference.migrate()
            assert _written(reference, amounts, repeat, stored_first, True) == tables[1]
        finally:
            reference.close()


def _written(db: Database, amounts: list[int], repeat: bool, stored_first: bool,
             given_positions: bool) -> dict[str, list[Any]]:
    """The normalised ledger rows of a new tenant after writing the entries of `amounts` (see the test above)."""
    tenant = f"t_{uuid.uuid4().hex[:10]}"
    positions = _source_events(db, tenant, 3)
    ordered = sorted(positions, key=positions.get)  # type: ignore[arg-type]
    items, allocations = _items(ordered, amounts, repeat)
    seqs = {event_id: i + 1 for i, event_id in enumerate(ordered)}
    known = positions if given_positions else None
    if stored_first:
        _write(db, tenant, items[:1], [a for a in allocations if a["entryId"] == items[0]["entry"]["id"]],
               seqs, known)
    _write(db, tenant, items, allocations, seqs, known)
    return _normalised(_tables(db, tenant), ordered)


def _normalised(tables: dict[str, list[tuple[Any, ...]]], ordered: list[str]) -> dict[str, list[Any]]:
    """The rows with each tenant's own event ids and positions replaced by their rank."""
    rank = {event_id: f"e{i}" for i, event_id in enumerate(ordered)}

    def swap(value: Any) -> Any:
        if isinstance(value, str):
            for event_id, name in rank.items():
                value = value.replace(event_id, name)
        return value

    out: dict[str, list[Any]] = {}
    for table, rows in tables.items():
        out[table] = sorted(tuple(swap(v) for v in row) for row in rows)
    positions = sorted({row[2] for row in tables["ledger_postings"]})
    out["ledger_postings"] = sorted(tuple(positions.index(v) if i == 2 else swap(v) for i, v in enumerate(row))
                                    for row in tables["ledger_postings"])
    out["ledger_sums"] = [row for row in out["ledger_sums"] if row[1] == "t"]  # position buckets differ by tenant
    return out


def test_a_group_gathers_the_ledger_rows_of_its_appends_in_one_statement(db: Database) -> None:
    """PostgreSQL: the rows of three appends (two tenants) gathered in one LedgerRows and sent once equal the rows
    written append by append, and an id repeated across the appends counts once."""
    if db.dialect != "postgres":
        return
    tenants = [f"t_{uuid.uuid4().hex[:10]}" for _ in range(4)]
    plans = []
    for tenant in tenants:
        positions = _source_events(db, tenant, 2)
        ordered = sorted(positions, key=positions.get)  # type: ignore[arg-type]
        plans.append((tenant, ordered, positions))
    writes = []
    for tenant, ordered, positions in plans:
        seqs = {event_id: i + 1 for i, event_id in enumerate(ordered)}
        first = _items(ordered, [500, 700], False)
        second = _items(ordered[1:], [900], False)
        second[0][0]["entry"] = {**second[0][0]["entry"], "id": first[0][0]["entry"]["id"]}  # already written
        writes.append((tenant, seqs, positions, [first, second]))
    # tenants 0 and 1 in one gathered statement; tenants 2 and 3 one write at a time
    with db.transaction() as tx:
        assert isinstance(tx, PostgresTx)
        tx.ledger_rows = LedgerRows()
        for tenant, seqs, positions, parts in writes[:2]:
            for items, allocations in parts:
                ledger_rows.write_entries(tx, tenant, "job_1", items, allocations, seqs, positions)
        tx.ledger_rows.flush(tx)
    for tenant, seqs, positions, parts in writes[2:]:
        for items, allocations in parts:
            _write(db, tenant, items, allocations, seqs, positions)
    gathered = [_normalised(_tables(db, plan[0]), plan[1]) for plan in plans]
    assert gathered[0] == gathered[2] and gathered[1] == gathered[3]
    assert len(gathered[0]["ledger_entries"]) == 2
