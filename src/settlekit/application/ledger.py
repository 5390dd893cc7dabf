"""The ledger's use cases: its reads (balances now, as of an instant or position, account history, a job's
entries and allocations) and the ledger rebuild (`settlekit ledger rebuild`): every journal entry and party
allocation recomputed from the job streams' events into shadow tables, compared with the stored ledger, and swapped
in on request.

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
from settlekit.events.canonical import storable_json, storable_text
from settlekit.jobs import process_job_events
from settlekit.store import ledger_rebuild as rows
from settlekit.store.contracts import contract_resolver
from settlekit.store.database import Database, Tx
from settlekit.store.ledger import allocations_for_job, balances, entries_for_job, entry_ids_for_event
from settlekit.store.ledger_timeline import ACCOUNT, account_known, account_postings, balances_as_of

# the ledger's reads, as the entry points ask them (the store answers them as they are)
__all__ = ["ACCOUNT", "Difference", "RebuildReport", "account_known", "account_postings", "allocations_for_job",
           "balances", "balances_as_of", "entries_for_job", "entry_ids_for_event", "rebuild"]

Progress = Callable[[int, int], None]  # (streams done, streams in all)


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
    heads = rows.job_stream_heads(db, tenant_id)
    streams = sorted(heads)
    run = _Run(uuid.uuid4().hex, heads)
    report = RebuildReport(tenants=sorted({t for t, _ in streams} | set(rows.ledger_tenants(db, tenant_id))))
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
            rows.swap(db, run.run_id, run.heads, run.balances, report.tenants, tenant_id)
            report.applied = True
    finally:
        rows.delete_shadow(db, run.run_id)
    return report


def _refuse_partial(differences: Sequence[Difference]) -> None:
    unreplayable = [d.key for d in differences if d.kind == "stream"]
    if unreplayable:
        raise ConflictError(f"{len(unreplayable)} stream(s) could not be replayed; nothing was swapped",
                            code="LEDGER_REBUILD_INCOMPLETE", streams=unreplayable[:20])


def _replay(db: Database, run: _Run, tenant: str, stream_id: str,
            resolve: Callable[[str, str], Mapping[str, Any] | None]) -> tuple[int, int]:
    """One stream's events (up to the head seen at the start) through the job domain into the shadow tables."""
    stored = rows.stream_events(db, tenant, stream_id, run.heads[(tenant, stream_id)])
    events = [event for _, event in stored]
    seq_by_event_id = {event["id"]: seq for seq, event in stored}
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
    rows.write_shadow(db, entry_rows, allocation_rows)
    return len(entry_rows), len(allocation_rows)


def _differences(db: Database, run: _Run, tenants: Sequence[str]) -> list[Difference]:
    out: list[Difference] = []
    with db.read() as tx:
        for tenant in tenants:
            for kind in rows.COMPARED_KINDS:
                out.extend(Difference(d.kind, d.change, tenant, d.key, d.stored, d.rebuilt)
                           for d in rows.row_differences(tx, run.run_id, tenant, kind))
            out.extend(_balance_differences(tx, tenant, run.balances.get(tenant, {})))
            stored = rows.timeline_rows(tx, tenant)
            rebuilt = run.timeline_rows.get(tenant, 0)
            if stored != rebuilt:
                out.append(Difference("timeline", "changed", tenant, "rows", {"rows": stored}, {"rows": rebuilt}))
    return out


def _balance_differences(tx: Tx, tenant: str, rebuilt: Mapping[str, int]) -> Iterator[Difference]:
    stored = rows.stored_balances(tx, tenant)
    for account in sorted(stored.keys() | rebuilt.keys()):
        before, after = stored.get(account), rebuilt.get(account)
        if before != after:
            change = "missing" if before is None else "extra" if after is None else "changed"
            yield Difference("balance", change, tenant, account, None if before is None else {"cents": before},
                             None if after is None else {"cents": after})


def _text(value: Any) -> Any:
    return storable_text(value) if isinstance(value, str) else value
