"""`settlekit ledger rebuild`: every journal entry and party allocation recomputed from the job streams' events into
shadow tables, compared with the stored ledger, and swapped in on request.

The events are replayed through the pure job domain (validation, transitions and posting rules; the append-time
server rules are not re-run, they only ever refuse), each stream from its first event, with the tenant's contract
documents. Differences are reported per row: an entry or allocation missing from the stored ledger, extra in it,
or changed; a balance that is not the sum of the rebuilt postings; a timeline whose row count is not that of the
rebuilt postings and allocations. An entry's index is not compared: it only orders one event's entries, and
ledgers written before each event's entries were numbered on their own counted them across the append's batch
(a swap renumbers them).

`apply=True` replaces the tenants' ledger rows (entries, allocations, balances, timeline) with the rebuilt ones in
one transaction, after checking under lock that no event was appended since the rebuild read the streams
(LEDGER_REBUILD_STALE otherwise: run it again). The shadow rows of a run are deleted at its end, whatever happens.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from settlekit import failpoints
from settlekit.errors import ConflictError, SettlekitError
from settlekit.events.canonical import parse_json, storable_json, storable_text
from settlekit.jobs import process_job_events
from settlekit.store import ledger_timeline as timeline
from settlekit.store.contracts import contract_resolver
from settlekit.store.database import Database, Tx
from settlekit.store.sql import statements

Progress = Callable[[int, int], None]  # (streams done, streams in all)
_ENTRY_COLUMNS = ("tenant_id, entry_id, job_id, source_event_id, event_type, source_seq, entry_index, at, memo,"
                  " entry_json")
_ALLOCATION_COLUMNS = "tenant_id, entry_id, posting_id, account_id, party_id, party_role, currency, amount_cents"
_COMPARED = {
    "entry": ("ledger_entries", "ledger_rebuild_entries", ("entry_id",),
              ("job_id", "source_event_id", "event_type", "source_seq", "at", "memo", "entry_json")),
    "allocation": ("ledger_allocations", "ledger_rebuild_allocations",
                   ("entry_id", "posting_id", "party_id", "party_role"), ("account_id", "currency", "amount_cents")),
}


@dataclass(frozen=True)
class Difference:
    """One row where the stored ledger and the rebuild disagree: `change` is missing (rebuilt, not stored),
    extra (stored, not rebuilt) or changed; `stored`/`rebuilt` hold the compared values."""

    kind: str
    change: str
    tenant_id: str
    key: str
    stored: Mapping[str, Any] | None = None
    rebuilt: Mapping[str, Any] | None = None

    def to_json(self) -> dict[str, Any]:
        return {"kind": self.kind, "change": self.change, "tenantId": self.tenant_id, "key": self.key,
                "stored": self.stored, "rebuilt": self.rebuilt}


@dataclass
class RebuildReport:
    tenants: list[str] = field(default_factory=list)
    streams: int = 0
    entries: int = 0
    allocations: int = 0
    differences: list[Difference] = field(default_factory=list)
    applied: bool = False

    def to_json(self) -> dict[str, Any]:
        return {"tenants": self.tenants, "streams": self.streams, "entries": self.entries,
                "allocations": self.allocations, "differences": [d.to_json() for d in self.differences],
                "applied": self.applied}


@dataclass
class _Run:
    run_id: str
    heads: dict[tuple[str, str], int]  # (tenant, job stream) -> its head seq when the run began: what is replayed
    balances: dict[str, dict[str, int]] = field(default_factory=dict)
    timeline_rows: dict[str, int] = field(default_factory=dict)


def rebuild(db: Database, *, tenant_id: str | None = None, apply: bool = False,
            progress: Progress | None = None) -> RebuildReport:
    """Rebuild the ledger of `tenant_id` (every tenant when None) from its job streams; compare; swap in with
    `apply` when anything differs. Returns what was found (and whether it was applied)."""
    heads = _job_stream_heads(db, tenant_id)
    streams = sorted(heads)
    run = _Run(uuid.uuid4().hex, heads)
    report = RebuildReport(tenants=sorted({t for t, _ in streams} | set(_ledger_tenants(db, tenant_id))))
    try:
        resolve = contract_resolver(db)
        for done, (tenant, stream_id) in enumerate(streams, 1):
            try:
                entries, allocations = _replay(db, run, tenant, stream_id, resolve)
            except SettlekitError as exc:  # reported; the swap is then refused
                report.differences.append(Difference("stream", "unreplayable", tenant, stream_id, None,
                                                     {"code": exc.code, "message": exc.message}))
                entries = allocations = 0
            report.streams, report.entries, report.allocations = done, report.entries + entries, \
                report.allocations + allocations
            if progress is not None:
                progress(done, len(streams))
        report.differences += _differences(db, run, report.tenants)
        if apply and report.differences:
            _refuse_partial(report.differences)
            _swap(db, run, report.tenants, tenant_id)
            report.applied = True
    finally:
        with db.transaction() as tx:
            tx.execute("DELETE FROM ledger_rebuild_entries WHERE run_id = ?", (run.run_id,))
            tx.execute("DELETE FROM ledger_rebuild_allocations WHERE run_id = ?", (run.run_id,))
    return report


def _refuse_partial(differences: Sequence[Difference]) -> None:
    unreplayable = [d.key for d in differences if d.kind == "stream"]
    if unreplayable:
        raise ConflictError(f"{len(unreplayable)} stream(s) could not be replayed; nothing was swapped",
                            code="LEDGER_REBUILD_INCOMPLETE", streams=unreplayable[:20])


def _job_stream_heads(db: Database, tenant_id: str | None, tx: Tx | None = None) -> dict[tuple[str, str], int]:
    """(tenant, stream id) -> head seq of every job stream (of `tenant_id` when given). A stream's head moves in
    the transaction that adds its events, so a head read here covers committed events only."""
    sql, params = "SELECT tenant_id, stream_id, head_seq FROM streams WHERE stream_type = 'job'", []
    if tenant_id is not None:
        sql, params = sql + " AND tenant_id = ?", [tenant_id]
    if tx is not None:
        return {(str(r[0]), str(r[1])): int(r[2]) for r in tx.fetchall(sql, params)}
    with db.read() as read:
        return _job_stream_heads(db, tenant_id, read)


def _ledger_tenants(db: Database, tenant_id: str | None) -> list[str]:
    with db.read() as tx:
        tenants = [str(r[0]) for r in tx.fetchall("SELECT DISTINCT tenant_id FROM ledger_entries")]
    return [t for t in tenants if tenant_id is None or t == tenant_id]


def _replay(db: Database, run: _Run, tenant: str, stream_id: str,
            resolve: Callable[[str, str], Mapping[str, Any] | None]) -> tuple[int, int]:
    """One stream's events (up to the head seen at the start) through the job domain into the shadow tables."""
    with db.read() as tx:
        rows = tx.fetchall("SELECT seq, event_json FROM events WHERE tenant_id = ? AND stream_id = ?"
                           " AND seq <= ? ORDER BY seq", (tenant, stream_id, run.heads[(tenant, stream_id)]))
    events = [parse_json(r[1]) for r in rows]
    seq_by_event_id = {e["id"]: int(r[0]) for e, r in zip(events, rows, strict=True)}
    result = process_job_events(None, events, tenant_id=tenant,
                                contract_resolver=lambda digest: resolve(tenant, digest))
    balances = run.balances.setdefault(tenant, {})
    entry_rows = []
    per_event: dict[str, int] = {}
    for item in result.ledger_entries:
        entry = item["entry"]
        index = per_event[item["eventId"]] = per_event.get(item["eventId"], -1) + 1  # as write_entries numbers
        entry_rows.append((run.run_id, tenant, entry["id"], stream_id, item["eventId"], item["eventType"],
                           seq_by_event_id[item["eventId"]], index, entry["at"], _text(entry.get("memo")),
                           storable_json(entry)))
        for posting in entry["postings"]:
            account = _text(posting["accountId"])
            balances[account] = balances.get(account, 0) + posting["amountCents"]
        run.timeline_rows[tenant] = run.timeline_rows.get(tenant, 0) + len(entry["postings"])
    allocation_rows = [(run.run_id, tenant, a["entryId"], a["postingId"], _text(a["accountId"]), _text(a["partyId"]),
                        a["partyRole"], a["currency"], a["amountCents"]) for a in result.allocations]
    # the timeline holds one row per party of a posting, whatever its roles (ledger_timeline._posting_rows)
    by_party = {(a["entryId"], a["postingId"], _text(a["accountId"]), _text(a["partyId"])) for a in result.allocations}
    run.timeline_rows[tenant] = run.timeline_rows.get(tenant, 0) + len(by_party)
    failpoints.hit("ledger.rebuild.replayed", stream_id)
    with db.transaction() as tx:
        tx.executemany(f"INSERT INTO ledger_rebuild_entries (run_id, {_ENTRY_COLUMNS})"
                       f" VALUES ({', '.join('?' * 11)})", entry_rows)
        tx.executemany(f"INSERT INTO ledger_rebuild_allocations (run_id, {_ALLOCATION_COLUMNS})"
                       f" VALUES ({', '.join('?' * 9)})", allocation_rows)
    return len(entry_rows), len(allocation_rows)


def _differences(db: Database, run: _Run, tenants: Sequence[str]) -> list[Difference]:
    out: list[Difference] = []
    with db.read() as tx:
        for tenant in tenants:
            for kind in _COMPARED:
                out.extend(_row_differences(tx, run.run_id, tenant, kind))
            out.extend(_balance_differences(tx, tenant, run.balances.get(tenant, {})))
            stored = int(tx.scalar("SELECT COUNT(*) FROM ledger_postings WHERE tenant_id = ?", (tenant,)))
            rebuilt = run.timeline_rows.get(tenant, 0)
            if stored != rebuilt:
                out.append(Difference("timeline", "changed", tenant, "rows", {"rows": stored}, {"rows": rebuilt}))
    return out


def _row_differences(tx: Tx, run_id: str, tenant: str, kind: str) -> Iterator[Difference]:
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
    found: list[Difference] = []
    for change, (sql, params) in queries.items():
        for row in tx.fetchall(sql, params):
            values = _plain(row[len(keys):])
            first = dict(zip(compared, values[:len(compared)], strict=True))
            second = dict(zip(compared, values[len(compared):], strict=True)) if change == "changed" else None
            stored, rebuilt = {"missing": (None, first), "extra": (first, None), "changed": (first, second)}[change]
            found.append(Difference(kind, change, tenant, "/".join(str(k) for k in row[:len(keys)]), stored,
                                    rebuilt))
    yield from sorted(found, key=lambda d: (d.key, d.change))


def _plain(values: Sequence[Any]) -> list[Any]:
    """Compared values as JSON-able Python values (PostgreSQL BIGINT and SQLite INTEGER alike)."""
    return [int(v) if isinstance(v, int) else v for v in values]


def _balance_differences(tx: Tx, tenant: str, rebuilt: Mapping[str, int]) -> Iterator[Difference]:
    stored = {str(a): int(c) for a, c in tx.fetchall(
        "SELECT account_id, balance_cents FROM ledger_balances WHERE tenant_id = ?", (tenant,))}
    for account in sorted(stored.keys() | rebuilt.keys()):
        before, after = stored.get(account), rebuilt.get(account)
        if before != after:
            change = "missing" if before is None else "extra" if after is None else "changed"
            yield Difference("balance", change, tenant, account, None if before is None else {"cents": before},
                             None if after is None else {"cents": after})


def _swap(db: Database, run: _Run, tenants: Sequence[str], tenant_id: str | None) -> None:
    """Replace the tenants' ledger rows with the rebuilt ones, in one transaction."""
    with db.transaction() as tx:
        tx.execute(statements("ledger", tx.dialect)["lock_for_rebuild"])  # appends that post entries wait
        # an append committed since the run began moved its stream's head (whatever its position: one still in
        # flight then could have drawn a lower position than the last one seen); one still in flight now
        # posts its entries after this swap, onto the rebuilt ledger
        heads = _job_stream_heads(db, tenant_id, tx)
        moved = sorted(key for key in heads.keys() | run.heads.keys() if heads.get(key) != run.heads.get(key))
        if moved:
            raise ConflictError("events were appended while the ledger was rebuilt: run the rebuild again",
                                code="LEDGER_REBUILD_STALE", streams=[f"{t}/{s}" for t, s in moved[:20]],
                                streamsMoved=len(moved))
        for tenant in tenants:
            for table in ("ledger_entries", "ledger_allocations", "ledger_balances", "ledger_postings",
                          "ledger_sums"):
                tx.execute(f"DELETE FROM {table} WHERE tenant_id = ?", (tenant,))
            failpoints.hit("ledger.rebuild.swapping", tenant)
            _insert_rebuilt(tx, run, tenant)


def _insert_rebuilt(tx: Tx, run: _Run, tenant: str) -> None:
    tx.execute(f"INSERT INTO ledger_entries ({_ENTRY_COLUMNS}) SELECT {_ENTRY_COLUMNS} FROM ledger_rebuild_entries"
               " WHERE run_id = ? AND tenant_id = ?", (run.run_id, tenant))
    tx.execute(f"INSERT INTO ledger_allocations ({_ALLOCATION_COLUMNS}) SELECT {_ALLOCATION_COLUMNS}"
               " FROM ledger_rebuild_allocations WHERE run_id = ? AND tenant_id = ?", (run.run_id, tenant))
    tx.executemany("INSERT INTO ledger_balances (tenant_id, account_id, balance_cents) VALUES (?, ?, ?)",
                   [(tenant, account, cents) for account, cents in sorted(run.balances.get(tenant, {}).items())])
    after: tuple[Any, ...] = ("", -1, -1)
    while True:  # the timeline, a page of entries at a time (bounded memory), in stream order
        rows = tx.fetchall(
            "SELECT job_id, source_seq, entry_index, source_event_id, entry_json FROM ledger_rebuild_entries"
            " WHERE run_id = ? AND tenant_id = ? AND (job_id, source_seq, entry_index) > (?, ?, ?)"
            " ORDER BY job_id, source_seq, entry_index LIMIT 500", (run.run_id, tenant, *after))
        if not rows:
            return
        entries = [parse_json(r[4]) for r in rows]
        allocations = _page_allocations(tx, run.run_id, tenant, [e["id"] for e in entries])
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


def _text(value: Any) -> Any:
    return storable_text(value) if isinstance(value, str) else value
