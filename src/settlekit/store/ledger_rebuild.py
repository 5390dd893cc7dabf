"""The ledger rebuild's rows (the use case is `application/ledger.py`): the job streams' heads and events it
replays, the shadow tables its rebuilt rows go to, the rows where they and the stored ledger differ (found by the
database), and the swap of a tenant's ledger for the rebuilt one.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from typing import Any, NamedTuple

from settlekit import failpoints
from settlekit.errors import ConflictError
from settlekit.events.canonical import parse_json
from settlekit.store import ledger_timeline as timeline
from settlekit.store.database import Database, Tx
from settlekit.store.sql import statements

_COMPARED = {
    "entry": ("ledger_entries", "ledger_rebuild_entries", ("entry_id",),
              ("job_id", "source_event_id", "event_type", "source_seq", "at", "memo", "entry_json")),
    "allocation": ("ledger_allocations", "ledger_rebuild_allocations",
                   ("entry_id", "posting_id", "party_id", "party_role"), ("account_id", "currency", "amount_cents")),
}



class RowDifference(NamedTuple):
    """A row where the stored ledger and the shadow tables disagree: `change` is missing (rebuilt, not stored),
    extra (stored, not rebuilt) or changed; `stored`/`rebuilt` hold the compared values."""

    kind: str
    change: str
    key: str
    stored: Mapping[str, Any] | None
    rebuilt: Mapping[str, Any] | None


COMPARED_KINDS = tuple(_COMPARED)


def job_stream_heads(db: Database, tenant_id: str | None, tx: Tx | None = None) -> dict[tuple[str, str], int]:
    """(tenant, stream id) -> head seq of every job stream (of `tenant_id` when given). A stream's head moves in
    the transaction that adds its events, so a head read here covers committed events only."""
    sql, params = "SELECT tenant_id, stream_id, head_seq FROM streams WHERE stream_type = 'job'", []
    if tenant_id is not None:
        sql, params = sql + " AND tenant_id = ?", [tenant_id]
    if tx is not None:
        return {(str(r[0]), str(r[1])): int(r[2]) for r in tx.fetchall(sql, params)}
    with db.read() as read:
        return job_stream_heads(db, tenant_id, read)


def ledger_tenants(db: Database, tenant_id: str | None) -> list[str]:
    with db.read() as tx:
        tenants = [str(r[0]) for r in tx.fetchall(statements("ledger_rebuild", tx.dialect)["ledger_tenants"])]
    return [t for t in tenants if tenant_id is None or t == tenant_id]


def stream_events(db: Database, tenant: str, stream_id: str, through_seq: int) -> list[tuple[int, dict[str, Any]]]:
    """(seq, event) of a stream's events up to `through_seq`, in order."""
    with db.read() as tx:
        rows = tx.fetchall(statements("ledger_rebuild", tx.dialect)["stream_events"], (tenant, stream_id, through_seq))
    return [(int(r[0]), parse_json(r[1])) for r in rows]


def write_shadow(db: Database, entry_rows: Sequence[Sequence[Any]], allocation_rows: Sequence[Sequence[Any]]) -> None:
    """Rebuilt entries and allocations into the shadow tables (rows: run id, then the ledger's columns)."""
    with db.transaction() as tx:
        named = statements("ledger_rebuild", tx.dialect)
        tx.executemany(named["write_shadow_entries"], entry_rows)
        tx.executemany(named["write_shadow_allocations"], allocation_rows)


def delete_shadow(db: Database, run_id: str) -> None:
    with db.transaction() as tx:
        named = statements("ledger_rebuild", tx.dialect)
        tx.execute(named["delete_shadow_entries"], (run_id,))
        tx.execute(named["delete_shadow_allocations"], (run_id,))


def row_differences(tx: Tx, run_id: str, tenant: str, kind: str) -> Iterator[RowDifference]:
    """Rows only in the shadow (missing), only stored (extra), or in both with another value (changed), found by
    the database: only the differing rows come back."""
    stored_table, shadow_table, keys, compared = _COMPARED[kind]
    same_key = " AND ".join(f"r.{k} = s.{k}" for k in keys)
    differs = " OR ".join(f"NOT (s.{c} = r.{c} OR (s.{c} IS NULL AND r.{c} IS NULL))" for c in compared)
    key_list, s_values, r_values = (", ".join(f"{t}.{c}" for c in cols)
                                    for t, cols in (("s", keys), ("s", compared), ("r", compared)))
    queries = {
        "missing": (f"SELECT {key_list.replace('s.', 'r.')}, {r_values} FROM {shadow_table} r WHERE r.run_id = ?"
                    f" AND r.tenant_id = ? AND NOT EXISTS (SELECT 1 FROM {stored_table} s WHERE s.tenant_id = ?"
                    f" AND {same_key})", (run_id, tenant, tenant)),
        "extra": (f"SELECT {key_list}, {s_values} FROM {stored_table} s WHERE s.tenant_id = ? AND NOT EXISTS"
                  f" (SELECT 1 FROM {shadow_table} r WHERE r.run_id = ? AND r.tenant_id = ? AND {same_key})",
                  (tenant, run_id, tenant)),
        "changed": (f"SELECT {key_list}, {s_values}, {r_values} FROM {stored_table} s JOIN {shadow_table} r"
                    f" ON r.run_id = ? AND r.tenant_id = ? AND {same_key} WHERE s.tenant_id = ? AND ({differs})",
                    (run_id, tenant, tenant)),
    }
    found: list[RowDifference] = []
    for change, (sql, params) in queries.items():
        for row in tx.fetchall(sql, params):
            values = _plain(row[len(keys):])
            first = dict(zip(compared, values[:len(compared)], strict=True))
            second = dict(zip(compared, values[len(compared):], strict=True)) if change == "changed" else None
            stored, rebuilt = {"missing": (None, first), "extra": (first, None), "changed": (first, second)}[change]
            found.append(RowDifference(kind, change, "/".join(str(k) for k in row[:len(keys)]), stored, rebuilt))
    yield from sorted(found, key=lambda d: (d.key, d.change))


def _plain(values: Sequence[Any]) -> list[Any]:
    """Compared values as JSON-able Python values (PostgreSQL BIGINT and SQLite INTEGER alike)."""
    return [int(v) if isinstance(v, int) else v for v in values]


def stored_balances(tx: Tx, tenant: str) -> dict[str, int]:
    return {str(a): int(c) for a, c in tx.fetchall(statements("ledger_rebuild", tx.dialect)["stored_balances"],
                                                   (tenant,))}


def timeline_rows(tx: Tx, tenant: str) -> int:
    """How many timeline postings the tenant's stored ledger has."""
    return int(tx.scalar(statements("ledger_rebuild", tx.dialect)["timeline_rows"], (tenant,)))


def swap(db: Database, run_id: str, heads_seen: Mapping[tuple[str, str], int],
         balances: Mapping[str, Mapping[str, int]], tenants: Sequence[str], tenant_id: str | None) -> None:
    """Replace the tenants' ledger rows with the rebuilt ones, in one transaction."""
    with db.transaction() as tx:
        tx.execute(statements("ledger", tx.dialect)["lock_for_rebuild"])  # appends that post entries wait
        # an append committed since the run began moved its stream's head (whatever its position: one still in
        # flight then could have drawn a lower position than the last one seen); one still in flight now
        # posts its entries after this swap, onto the rebuilt ledger
        heads = job_stream_heads(db, tenant_id, tx)
        moved = sorted(key for key in heads.keys() | heads_seen.keys() if heads.get(key) != heads_seen.get(key))
        if moved:
            raise ConflictError("events were appended while the ledger was rebuilt: run the rebuild again",
                                code="LEDGER_REBUILD_STALE", streams=[f"{t}/{s}" for t, s in moved[:20]],
                                streamsMoved=len(moved))
        for tenant in tenants:
            for table in ("ledger_entries", "ledger_allocations", "ledger_balances", "ledger_postings",
                          "ledger_sums"):
                tx.execute(f"DELETE FROM {table} WHERE tenant_id = ?", (tenant,))
            failpoints.hit("ledger.rebuild.swapping", tenant)
            _insert_rebuilt(tx, run_id, tenant, balances.get(tenant, {}))


def _insert_rebuilt(tx: Tx, run_id: str, tenant: str, balances: Mapping[str, int]) -> None:
    named = statements("ledger_rebuild", tx.dialect)
    tx.execute(named["insert_rebuilt_entries"], (run_id, tenant))
    tx.execute(named["insert_rebuilt_allocations"], (run_id, tenant))
    tx.executemany(named["insert_balances"], [(tenant, account, cents) for account, cents in sorted(balances.items())])
    after: tuple[Any, ...] = ("", -1, -1)
    while True:  # the timeline, a page of entries at a time (bounded memory), in stream order
        rows = tx.fetchall(named["rebuilt_entries_page"], (run_id, tenant, *after))
        if not rows:
            return
        entries = [parse_json(r[4]) for r in rows]
        allocations = _page_allocations(tx, run_id, tenant, [e["id"] for e in entries])
        timeline.record(tx, tenant, [
            timeline.NewEntry(str(r[3]), int(r[2]), entry, allocations.get(entry["id"], []))
            for r, entry in zip(rows, entries, strict=True)])
        after = (rows[-1][0], int(rows[-1][1]), int(rows[-1][2]))


def _page_allocations(tx: Tx, run_id: str, tenant: str, entry_ids: Sequence[str]) -> dict[str, list[dict[str, Any]]]:
    marks = ", ".join("?" for _ in entry_ids)
    out: dict[str, list[dict[str, Any]]] = {}
    for entry_id, posting_id, account_id, party_id, amount in tx.fetchall(
            "SELECT entry_id, posting_id, account_id, party_id, amount_cents FROM ledger_rebuild_allocations"
            f" WHERE run_id = ? AND tenant_id = ? AND entry_id IN ({marks})", (run_id, tenant, *entry_ids)):
        out.setdefault(entry_id, []).append({"postingId": posting_id, "accountId": account_id, "partyId": party_id,
                                             "amountCents": int(amount)})
    return out
