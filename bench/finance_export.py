"""Month close and JournalCsv.v1 export over N postings: rows/s and peak Python memory of the streamed export,
against an anchor measured in the same run (one raw cursor SELECT of the same rows written with the csv module).

Run: python bench/finance_export.py [--entries N] [--pg]   (default: 50,000 entries = 100,000 postings on SQLite, under
a minute; --entries 500000 is the million-posting month, several minutes with the traced runs)
"""

from __future__ import annotations

import argparse
import csv
import hashlib
import io
import json
import tempfile
import time
import tracemalloc
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from settlekit.application import finance as fin
from settlekit.events.envelope import Signer
from settlekit.store.db import Database, opened

T = "tenant_bench"
MONTH = "2026-01"


def seed(db: Database, entries: int) -> None:
    """`entries` two-posting journal entries spread over January, written in batches straight to the tables."""
    batch: list[tuple[Any, ...]] = []
    allocs: list[tuple[Any, ...]] = []

    def flush() -> None:
        with db.transaction() as tx:
            tx.executemany("INSERT INTO ledger_entries (tenant_id, entry_id, job_id, source_event_id, event_type,"
                           " source_seq, entry_index, at, memo, entry_json) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                           batch)
            tx.executemany("INSERT INTO ledger_allocations (tenant_id, entry_id, posting_id, account_id, party_id,"
                           " party_role, currency, amount_cents) VALUES (?, ?, ?, ?, ?, ?, ?, ?)", allocs)
        batch.clear()
        allocs.clear()

    for i in range(entries):
        sec = i * (31 * 86400 - 1) // max(entries, 1)
        at = datetime.fromtimestamp(1767225600 + sec, UTC).strftime("%Y-%m-%dT%H:%M:%S.000Z")
        eid, amount = f"jnl_{i:08d}", 100 + i % 9000
        entry = {"id": eid, "at": at, "memo": f"job:job_{i % 5000:05d} BOOKED",
                 "postings": [{"accountId": "acct_cash", "amountCents": amount},
                              {"accountId": "acct_customer_escrow", "amountCents": -amount}]}
        batch.append((T, eid, f"job_{i % 5000:05d}", f"evt_{i}", "BOOKED", i, 0, at, entry["memo"],
                      json.dumps(entry, separators=(",", ":"))))
        allocs.append((T, eid, "p0", "acct_cash", "pty_platform", "platform", "USD", amount))
        allocs.append((T, eid, "p1", "acct_customer_escrow", "pty_customer:c1", "customer", "USD", -amount))
        if len(batch) >= 20_000:
            flush()
    if batch:
        flush()


def anchor_export(db: Database) -> tuple[int, str]:
    """The same rows through one raw cursor and csv.writer (no paging, no domain objects)."""
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    writer.writerow(["entry_id", "at", "memo", "account_id", "party_id", "debit_cents", "credit_cents"])
    sha, rows = hashlib.sha256(), 0
    with db.read() as tx:
        sql = ("SELECT p.entry_id, p.at, e.memo, a.account_id, a.party_id, a.amount_cents FROM finance_entry_periods p"
            " JOIN ledger_entries e ON e.tenant_id = p.tenant_id AND e.entry_id = p.entry_id"
            " JOIN ledger_allocations a ON a.tenant_id = p.tenant_id AND a.entry_id = p.entry_id"
               " WHERE p.tenant_id = ? AND p.period = ? ORDER BY p.at, p.entry_id, a.posting_id")
        if tx.dialect == "postgres":  # a server-side cursor, so the anchor streams too
            cursor = tx.raw.cursor(name="anchor")
            order = 'ORDER BY p.at COLLATE "C", p.entry_id COLLATE "C", a.posting_id'
            cursor.execute(sql.replace("?", "%s").replace("ORDER BY p.at, p.entry_id, a.posting_id", order), (T, MONTH))
        else:
            cursor = tx.raw.execute(sql, (T, MONTH))
        for entry_id, at, memo, account, party, cents in cursor:
            writer.writerow([entry_id, at, memo, account, party, max(cents, 0), max(-cents, 0)])
            rows += 1
            if out.tell() > 1 << 16:
                sha.update(out.getvalue().encode())
                out.seek(0)
                out.truncate()
    sha.update(out.getvalue().encode())
    return rows, sha.hexdigest()


def timed(action: Callable[[], Any]) -> tuple[float, Any]:
    started = time.perf_counter()
    value = action()
    return time.perf_counter() - started, value


def peak_mib(action: Callable[[], Any]) -> float:
    tracemalloc.start()
    try:
        action()
        return tracemalloc.get_traced_memory()[1] / 2**20
    finally:
        tracemalloc.stop()


def run(url: str, entries: int) -> None:
    with opened(url) as db:
        seed_s, _ = timed(lambda: seed(db, entries))
        close_s, result = timed(lambda: fin.close_month(db, T, MONTH, Signer.generate(), now=datetime.now(UTC)))
        rows = result.document["journal"]["rows"]
        print(f"seeded {entries:,} entries ({rows:,} postings) in {seed_s:.1f} s; close in {close_s:.1f} s "
              f"({rows / close_s:,.0f} postings/s)")
        export_s, anchor_s = float("inf"), float("inf")
        for _ in range(3):  # alternate, best of three each: the machine is shared
            took, info = timed(lambda: fin.export_journal(db, T, MONTH, lambda _chunk: None))
            export_s = min(export_s, took)
            took, (anchor_rows, anchor_sha) = timed(lambda: anchor_export(db))
            anchor_s = min(anchor_s, took)
        assert info["sha256"] == result.document["journal"]["sha256"] == anchor_sha, "export bytes differ"
        assert anchor_rows == rows
        rate, anchor_rate = rows / export_s, rows / anchor_s
        print(f"export: {rate:,.0f} rows/s  ratio vs raw cursor + csv module ({anchor_rate:,.0f} rows/s): "
              f"{rate / anchor_rate:.2f}x")
        export_peak = peak_mib(lambda: fin.export_journal(db, T, MONTH, lambda _b: None))
        anchor_peak = peak_mib(lambda: anchor_export(db))
        print(f"export peak Python memory: {export_peak:.1f} MiB (anchor: {anchor_peak:.1f} MiB) for "
              f"{info['bytes'] / 2**20:.1f} MiB of CSV")


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--entries", type=int, default=50_000)
    parser.add_argument("--pg", action="store_true", help="a scratch PostgreSQL database instead of SQLite")
    args = parser.parse_args()
    if args.pg:
        from common import scratch_pg

        with scratch_pg("finance") as url:
            run(url, args.entries)
        return
    with tempfile.TemporaryDirectory() as tmp:
        run(f"sqlite:///{Path(tmp) / 'bench.db'}", args.entries)


if __name__ == "__main__":
    main()
