"""The ledger's timeline rows: postings and party allocations by position and time, and their bucket sums.

`record` runs in the transaction that inserts the entries (store.ledger.write_entries); the reads answer balances
as of an instant or an event-store position and an account's postings page by page (keyset order: position,
entry index, posting index). Party `''` is the account itself; any other party id is that party's allocations.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from settlekit.events.canonical import storable_text
from settlekit.ledger.accounts import ACCOUNT_IDS
from settlekit.ledger.timeline import Axis, buckets_of, epoch_millis, levels_of, millis_to_iso, prefix_ranges
from settlekit.store.database import Database, Tx
from settlekit.store.sql import statements

ACCOUNT = ""  # the party id of an account's own postings

_AXIS_COLUMN: Mapping[Axis, str] = {"t": "at_ms", "p": "position"}
_AXES: tuple[Axis, Axis] = ("t", "p")


@dataclass(frozen=True)
class NewEntry:
    """An entry just inserted: its source event, its index among the event's entries, and its allocations."""

    event_id: str
    entry_index: int
    entry: Mapping[str, Any]
    allocations: Sequence[Mapping[str, Any]] = ()


@dataclass(frozen=True)
class PostingsPage:
    postings: list[dict[str, Any]]
    last_key: tuple[int, int, int] | None = None
    more: bool = False


def record(tx: Tx, tenant_id: str, entries: Sequence[NewEntry]) -> None:
    """Insert the timeline rows of newly inserted entries and add them to the bucket sums (`ledger rebuild`)."""
    if not entries:
        return
    positions = event_positions(tx, tenant_id, sorted({e.event_id for e in entries}))
    rows = [(tenant_id, party, account, position, entry_index, posting_index, entry_id, at_ms, amount)
            for entry_id, _event, party, account, position, entry_index, posting_index, at_ms, amount
            in _posting_rows(entries, positions)]
    named = statements("ledger_timeline", tx.dialect)
    tx.executemany(named["insert_posting"], rows)
    tx.executemany(named["add_sum"], bucket_sums(rows))


def timeline_rows(entries: Sequence[NewEntry], position_by_event_id: Mapping[str, int]
                  ) -> tuple[list[tuple[Any, ...]], list[tuple[Any, ...]]]:
    """The timeline rows of `entries`, each keyed by its entry (id, source event id, index in the event), for a
    writer that keeps only the entries it inserts (store/<dialect>/ledger.py): postings (entry id, event id,
    party, account, position, entry index, posting index, at ms, cents) and bucket deltas (entry id, event id,
    entry index, party, axis, level, bucket, account, cents), one per posting and bucket, not summed."""
    postings = list(_posting_rows(entries, position_by_event_id))
    sums: list[tuple[Any, ...]] = []
    for entry_id, event_id, party_id, account_id, position, entry_index, _pi, at_ms, amount in postings:
        for axis, value in zip(_AXES, (at_ms, position), strict=True):
            for level, bucket in buckets_of(levels_of(axis, party_id), value):
                sums.append((entry_id, event_id, entry_index, party_id, axis, level, bucket, account_id, amount))
    return postings, sums


def _posting_rows(entries: Sequence[NewEntry], positions: Mapping[str, int]) -> Iterator[tuple[Any, ...]]:
    """(entry id, event id, party, account, position, entry index, posting index, at ms, cents) of every posting
    (party '') and allocation of `entries`; a party's allocations of one posting under several roles are one row
    (the timeline is by party), their cents summed."""
    for item in entries:
        position, at_ms, entry_id = positions[item.event_id], epoch_millis(item.entry["at"]), item.entry["id"]
        for index, posting in enumerate(item.entry["postings"]):
            yield (entry_id, item.event_id, ACCOUNT, _text(posting["accountId"]), position, item.entry_index, index,
                   at_ms, posting["amountCents"])
        by_party: dict[tuple[str, str, int], Any] = {}
        for alloc in item.allocations:
            key = (_text(alloc["partyId"]), _text(alloc["accountId"]), int(str(alloc["postingId"])[1:]))
            by_party[key] = by_party[key] + alloc["amountCents"] if key in by_party else alloc["amountCents"]
        for (party_id, account_id, index), cents in by_party.items():
            yield (entry_id, item.event_id, party_id, account_id, position, item.entry_index, index, at_ms, cents)


def bucket_sums(rows: Sequence[Sequence[Any]]) -> list[tuple[Any, ...]]:
    """The ledger_sums deltas of ledger_postings rows, in key order (so concurrent writers lock rows alike)."""
    sums: dict[tuple[Any, ...], int] = {}
    for tenant_id, party_id, account_id, position, _ei, _pi, _entry, at_ms, amount in rows:
        for axis, value in (("t", at_ms), ("p", position)):
            for level, bucket in buckets_of(levels_of(axis, party_id), value):  # type: ignore[arg-type]
                key = (tenant_id, party_id, axis, level, bucket, account_id)
                sums[key] = sums.get(key, 0) + amount
    return [(*key, amount) for key, amount in sorted(sums.items())]


def event_positions(tx: Tx, tenant_id: str, event_ids: Sequence[str]) -> dict[str, int]:
    """{event id: store position} of the tenant's stored events among `event_ids`."""
    marks = ", ".join("?" for _ in event_ids)
    rows = tx.fetchall(f"SELECT event_id, position FROM events WHERE tenant_id = ? AND event_id IN ({marks})",
                       (tenant_id, *event_ids))
    return {str(r[0]): int(r[1]) for r in rows}


def balances_as_of(db: Database, tenant_id: str, axis: Axis, value: int, *,
                   party_id: str = ACCOUNT) -> dict[str, int]:
    """{account: cents} of the postings (party '') or a party's allocations with time (axis 't', epoch ms) or
    position (axis 'p') at or before `value`; accounts sorted, those netting to 0 kept."""
    sql, params = balances_as_of_query(tenant_id, axis, value, party_id)
    with db.query() as tx:
        rows = tx.fetchall(sql, params)
    return {str(account): int(cents) for account, cents in sorted(rows)}


def balances_as_of_query(tenant_id: str, axis: Axis, value: int, party_id: str = ACCOUNT) -> tuple[str, list[Any]]:
    """The statement behind `balances_as_of` (the benchmark EXPLAINs it): one index range per bucket level, and
    the postings of the finest bucket up to `value`."""
    ranges, tail = prefix_ranges(levels_of(axis, party_id), value)
    parts: list[str] = []
    params: list[Any] = []
    for level, lower, upper in ranges:
        part = ("SELECT account_id, amount_cents FROM ledger_sums WHERE tenant_id = ? AND party_id = ?"
                " AND axis = ? AND level = ? AND bucket < ?")
        params += [tenant_id, party_id, axis, level, upper]
        if lower is not None:
            part += " AND bucket >= ?"
            params.append(lower)
        parts.append(part)
    column = _AXIS_COLUMN[axis]
    parts.append(f"SELECT account_id, amount_cents FROM ledger_postings WHERE tenant_id = ? AND party_id = ?"
                 f" AND {column} >= ? AND {column} <= ?")
    params += [tenant_id, party_id, tail, value]
    return f"SELECT account_id, SUM(amount_cents) FROM ({' UNION ALL '.join(parts)}) s GROUP BY account_id", params


def head_position(db: Database, tenant_id: str) -> int | None:
    """The highest position of the tenant's postings (None without any)."""
    with db.query() as tx:
        value = tx.scalar(statements("ledger_timeline", tx.dialect)["head_position"],
                          (tenant_id, ACCOUNT))
    return None if value is None else int(value)


def account_known(db: Database, tenant_id: str, account_id: str) -> bool:
    """An account of the chart, or one the tenant's ledger has posted to."""
    if account_id in ACCOUNT_IDS:
        return True
    with db.query() as tx:
        return tx.fetchone(statements("ledger_timeline", tx.dialect)["account_known"],
                           (tenant_id, account_id)) is not None


def account_postings(db: Database, tenant_id: str, account_id: str, *, after: tuple[int, int, int] | None,
                     limit: int, party_id: str = ACCOUNT) -> PostingsPage:
    """One page of an account's postings (or a party's allocations to it) in ledger order, after the key
    (position, entry index, posting index) of the previous page's last row."""
    sql, params = account_postings_query(tenant_id, account_id, after, limit + 1, party_id)
    with db.query() as tx:
        rows = tx.fetchall(sql, params)
    keys = [(int(r[0]), int(r[1]), int(r[2])) for r in rows[:limit]]
    postings = [{"position": int(r[0]), "entryId": r[3], "postingId": f"p{int(r[2])}", "at": millis_to_iso(int(r[4])),
                 "amountCents": int(r[5]), "jobId": r[6], "eventId": r[7], "eventType": r[8], "memo": r[9]}
                for r in rows[:limit]]
    return PostingsPage(postings, keys[-1] if keys else None, len(rows) > limit)


def account_postings_query(tenant_id: str, account_id: str, after: tuple[int, int, int] | None, limit: int,
                           party_id: str = ACCOUNT) -> tuple[str, list[Any]]:
    """The statement behind `account_postings` (the benchmark EXPLAINs it): a range of the primary key."""
    sql = ("SELECT p.position, p.entry_index, p.posting_index, p.entry_id, p.at_ms, p.amount_cents, e.job_id,"
           " e.source_event_id, e.event_type, e.memo FROM ledger_postings p JOIN ledger_entries e"
           " ON e.tenant_id = ? AND e.entry_id = p.entry_id"
           " WHERE p.tenant_id = ? AND p.party_id = ? AND p.account_id = ?")
    params: list[Any] = [tenant_id, tenant_id, party_id, account_id]
    if after is not None:
        sql += " AND (p.position, p.entry_index, p.posting_index) > (?, ?, ?)"
        params += list(after)
    sql += " ORDER BY p.position, p.entry_index, p.posting_index LIMIT ?"
    params.append(limit)
    return sql, params


def _text(value: Any) -> Any:
    return storable_text(value) if isinstance(value, str) else value
