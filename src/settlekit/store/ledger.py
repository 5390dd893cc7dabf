"""Ledger tables: entries inserted once per (tenant, entry id); balances and allocations only follow an insert."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from settlekit.events.canonical import parse_json, storable_json, storable_text
from settlekit.store.database import Database, Tx
from settlekit.store.ledger_timeline import NewEntry, event_positions, timeline_rows
from settlekit.store.sql import statements


def write_entries(tx: Tx, tenant_id: str, job_id: str, ledger_entries: Sequence[Mapping[str, Any]],
                  allocations: Sequence[Mapping[str, Any]], seq_by_event_id: Mapping[str, int],
                  position_by_event_id: Mapping[str, int] | None = None) -> None:
    """Insert `{eventId, eventType, entry}` items with their allocations, balances and timeline rows; an entry
    whose id is already stored adds nothing (re-applying is a no-op). `position_by_event_id`: the source events'
    store positions when the caller knows them (the append does); otherwise they are read. The dialect's Tx
    writes the rows (store/<dialect>/ledger.py: on PostgreSQL one statement with nothing read back)."""
    if not ledger_entries:
        return
    if position_by_event_id is None:
        position_by_event_id = event_positions(tx, tenant_id, sorted({item["eventId"] for item in ledger_entries}))
    allocations_by_entry: dict[str, list[Mapping[str, Any]]] = {}
    for alloc in allocations:
        allocations_by_entry.setdefault(alloc["entryId"], []).append(alloc)
    per_event: dict[str, int] = {}
    entries: list[tuple[Any, ...]] = []
    allocation_rows: list[tuple[Any, ...]] = []
    timeline: list[NewEntry] = []
    for item in ledger_entries:
        entry, event_id = item["entry"], item["eventId"]
        index = per_event[event_id] = per_event.get(event_id, -1) + 1  # among the event's entries
        entries.append((entry["id"], event_id, item["eventType"], seq_by_event_id[event_id], index, entry["at"],
                        _text(entry.get("memo")), storable_json(entry)))
        own = allocations_by_entry.get(entry["id"], ())
        timeline.append(NewEntry(event_id, index, entry, own))
        for a in own:
            allocation_rows.append((entry["id"], event_id, index, a["postingId"], _text(a["accountId"]),
                                    _text(a["partyId"]), a["partyRole"], a["currency"], a["amountCents"]))
    # the rows of every entry, as if all were new: the dialect's writer keeps those of the entries it inserts
    postings, sums = timeline_rows(timeline, position_by_event_id)
    tx.write_ledger_rows(tenant_id, job_id, entries, postings, allocation_rows, sums)


def write_errors(tx: Tx, tenant_id: str, job_id: str, ledger_errors: Sequence[Mapping[str, Any]],
                 seq_by_event_id: Mapping[str, int]) -> None:
    """Record posting errors `{eventId, eventType, error: {code, message}}` (once per source event; nothing is
    read back)."""
    tx.executemany(
        statements("ledger", tx.dialect)["write_errors"],
        [(tenant_id, job_id, item["eventId"], item["eventType"], seq_by_event_id[item["eventId"]],
          item["error"]["code"], _text(item["error"]["message"])) for item in ledger_errors])


def errors_for_job(db: Database, tenant_id: str, job_id: str) -> list[dict[str, Any]]:
    """The job's recorded posting errors in stream order, in the `ledger postings` form."""
    with db.read() as tx:
        rows = tx.fetchall(statements("ledger", tx.dialect)["errors_for_job"], (tenant_id, job_id))
    return [{"eventId": r[0], "eventType": r[1], "error": {"code": r[2], "message": r[3]}} for r in rows]


def balances(db: Database, tenant_id: str | None = None) -> dict[str, dict[str, int]]:
    """{tenant: {account: cents}}, accounts sorted."""
    sql = "SELECT tenant_id, account_id, balance_cents FROM ledger_balances"
    params: tuple[Any, ...] = ()
    if tenant_id is not None:
        sql += " WHERE tenant_id = ?"
        params = (tenant_id,)
    sql += " ORDER BY tenant_id, account_id"
    out: dict[str, dict[str, int]] = {}
    with db.read() as tx:
        for tenant, account, cents in tx.fetchall(sql, params):
            out.setdefault(tenant, {})[account] = int(cents)
    return out


def entries_for_job(db: Database, tenant_id: str, job_id: str) -> list[dict[str, Any]]:
    with db.read() as tx:
        rows = tx.fetchall(statements("ledger", tx.dialect)["entries_for_job"], (tenant_id, job_id))
    return [{"eventId": r[0], "eventType": r[1], "entry": parse_json(r[2])} for r in rows]


def entry_ids_for_event(db: Database, tenant_id: str, job_id: str, event_id: str) -> list[str]:
    """The ids of the journal entries an event of the job posted, in posting order."""
    with db.read() as tx:
        rows = tx.fetchall(statements("ledger", tx.dialect)["entry_ids_for_event"], (tenant_id, job_id, event_id))
    return [str(r[0]) for r in rows]


def allocations_for_job(db: Database, tenant_id: str, job_id: str) -> list[dict[str, Any]]:
    with db.read() as tx:
        rows = tx.fetchall(
            statements("ledger", tx.dialect)["allocations_for_job"],
            (tenant_id, job_id))
    return [{"tenantId": tenant_id, "entryId": r[0], "postingId": r[1], "accountId": r[2], "partyId": r[3],
             "partyRole": r[4], "currency": r[5], "amountCents": int(r[6])} for r in rows]


def _text(value: Any) -> Any:
    """A text column's value: a lone surrogate (only in imported history) is stored as its `\\udxxx` escape."""
    return storable_text(value) if isinstance(value, str) else value
