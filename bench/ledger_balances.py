"""Balances as of an instant or position and an account's history page over 1,000,000 ledger entries (PostgreSQL).

The data (2 postings and 2 party allocations per entry, 12 accounts, 2,000 parties, about a year of times with
entries up to half an hour out of time order) is loaded straight into the ledger tables: the entries by COPY, the
timeline rows and their bucket sums by INSERT … SELECT, the indexes built afterwards. Then, at random instants,
positions, parties and page starts, the library's queries are timed (p50/p99), against an anchor measured in
the same run on the same rows: the plain `SELECT account_id, sum(amount_cents) … WHERE at_ms <= t GROUP BY
account_id` (an index-only scan of every posting up to t), whose answers the bucket query must equal.
EXPLAIN checks that every query reads indexes only (no sequential scan).

Run: python bench/ledger_balances.py [--entries N] [--repeat R]
"""

from __future__ import annotations

import argparse
import random
import statistics
import sys
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from common import scratch_pg
from settlekit.ledger.accounts import ACCOUNT_IDS
from settlekit.ledger.timeline import LEVELS, PARTY_LEVELS
from settlekit.store import ledger_timeline as timeline
from settlekit.store.db import Database, connect

TENANT = "tenant_bench"
TARGET_MS = 50.0
ACCOUNTS = ACCOUNT_IDS[:12]
PARTIES = 2_000
T0_MS = 1_767_225_600_000  # 2026-01-01T00:00:00Z
STEP_MS = 30_000  # one entry every 30 s on average: a million entries span about 347 days
JITTER_MS = 1_800_000  # up to half an hour either way, so time order is not position order
TABLES = ("ledger_entries", "ledger_postings", "ledger_sums")


def _accounts_sql() -> str:
    return "(ARRAY[" + ", ".join(f"'{a}'" for a in ACCOUNTS) + "])"


def load(db: Database, entries: int) -> None:
    """The entries by COPY; postings, allocations and bucket sums by SQL; then the indexes."""
    _phase_started[0] = time.perf_counter()
    with db.transaction() as tx:
        for table in TABLES:
            tx.execute(f"ALTER TABLE {table} SET UNLOGGED")
        tx.execute("ALTER TABLE ledger_postings DROP CONSTRAINT ledger_postings_pkey")
        tx.execute("ALTER TABLE ledger_sums DROP CONSTRAINT ledger_sums_pkey")
        tx.execute("DROP INDEX ledger_postings_time, ledger_postings_position, ledger_entries_job")
        tx.execute("ALTER TABLE ledger_entries DROP CONSTRAINT ledger_entries_pkey")
    with db.transaction() as tx, tx.raw.cursor() as cur, cur.copy(
            "COPY ledger_entries (tenant_id, entry_id, job_id, source_event_id, event_type, source_seq, entry_index,"
            " at, memo, entry_json) FROM STDIN") as copy:
        for start in range(1, entries + 1, 50_000):
            chunk = range(start, min(entries + 1, start + 50_000))
            copy.write("".join(f"{TENANT}\tjnl_{i}\tjob_{i // 8}\tevt_{i}\tSETTLED\t{i % 8 + 1}\t0\t{i}\t"
                               f"job:job_{i // 8} SETTLED\t{{}}\n" for i in chunk))
    phase("entries (COPY)")
    accounts = _accounts_sql()
    at = f"({T0_MS}::bigint + g::bigint * {STEP_MS} + ((g::bigint * 7919) % {2 * JITTER_MS}) - {JITTER_MS})"
    debit, credit = f"{accounts}[1 + g % 12]", f"{accounts}[1 + (g + 1 + g % 11) % 12]"
    amount = "(100 + (g::bigint * 37) % 100000)"
    with db.transaction() as tx:
        tx.execute("SET LOCAL work_mem = '256MB'")
        tx.execute(
            "INSERT INTO ledger_postings (tenant_id, party_id, account_id, position, entry_index, posting_index,"
            " entry_id, at_ms, amount_cents)"
            f" SELECT '{TENANT}', k.party, CASE WHEN k.side = 0 THEN {debit} ELSE {credit} END, g, 0, k.side,"
            f" 'jnl_' || g, {at}, CASE WHEN k.side = 0 THEN {amount} ELSE -{amount} END"
            f" FROM generate_series(1, {entries}) g CROSS JOIN LATERAL (VALUES (0, ''), (1, ''),"
            f" (0, 'pty_' || ((g * 31) % {PARTIES})), (1, 'pty_' || ((g * 17 + 5) % {PARTIES}))) k(side, party)")
        phase("postings and allocations")
        _load_sums(tx)
        phase("bucket sums")
    _build_indexes(db)
    with db.transaction() as tx:
        tx.execute("INSERT INTO ledger_balances (tenant_id, account_id, balance_cents) SELECT tenant_id, account_id,"
                   " SUM(amount_cents) FROM ledger_postings WHERE party_id = '' GROUP BY tenant_id, account_id")
    with psycopg_autocommit(db) as conn:
        for table in TABLES:
            conn.execute(f"VACUUM ANALYZE {table}")
    phase("vacuum analyze")


_phase_started = [time.perf_counter()]


def phase(name: str) -> None:
    now = time.perf_counter()
    print(f"  {name}: {now - _phase_started[0]:.1f} s", flush=True)
    _phase_started[0] = now


INDEXES = (  # the migrations' keys and indexes; the unique ones become the primary keys afterwards
    "CREATE UNIQUE INDEX ledger_postings_pkey ON ledger_postings"
    " (tenant_id, party_id, account_id, position, entry_index, posting_index)",
    "CREATE UNIQUE INDEX ledger_sums_pkey ON ledger_sums (tenant_id, party_id, axis, level, bucket, account_id)",
    "CREATE INDEX ledger_postings_time ON ledger_postings (tenant_id, party_id, at_ms)"
    " INCLUDE (account_id, amount_cents)",
    "CREATE INDEX ledger_postings_position ON ledger_postings (tenant_id, party_id, position)"
    " INCLUDE (account_id, amount_cents)",
    "CREATE UNIQUE INDEX ledger_entries_pkey ON ledger_entries (tenant_id, entry_id)",
    "CREATE INDEX ledger_entries_job ON ledger_entries (tenant_id, job_id, source_seq, entry_index)",
)


def _build_indexes(db: Database) -> None:
    """The indexes, built three at a time on their own connections (CREATE INDEX runs beside another on the same
    table), then the unique ones attached as the primary keys."""

    def build(statement: str) -> None:
        with psycopg_autocommit(db) as conn:
            conn.execute("SET maintenance_work_mem = '256MB'")
            conn.execute(statement)

    with ThreadPoolExecutor(3) as pool:
        list(pool.map(build, INDEXES))
    with db.transaction() as tx:
        for table in ("ledger_postings", "ledger_sums", "ledger_entries"):
            tx.execute(f"ALTER TABLE {table} ADD CONSTRAINT {table}_pkey PRIMARY KEY USING INDEX {table}_pkey")
    phase("indexes")


def _load_sums(tx: Any) -> None:
    """Every level of each axis in one pass over the postings (grouping sets), accounts and parties apart (they
    have their own levels, see settlekit.ledger.timeline)."""
    for axis, column in (("t", "at_ms"), ("p", "position")):
        for sizes, parties in ((LEVELS[axis], "= ''"), (PARTY_LEVELS[axis], "<> ''")):  # type: ignore[index]
            names = [f"b{level}" for level in range(len(sizes))]
            buckets = ", ".join(f"({column} / {size}) * {size} AS {name}" for name, size in zip(names, sizes,
                                                                                               strict=True))
            sets = ", ".join(f"(tenant_id, party_id, account_id, {name})" for name in names)
            level = "CASE " + " ".join(f"WHEN GROUPING({name}) = 0 THEN {i}" for i, name in enumerate(names)) + " END"
            tx.execute(f"INSERT INTO ledger_sums SELECT tenant_id, party_id, '{axis}', {level},"
                       f" COALESCE({', '.join(names)}), account_id, SUM(amount_cents) FROM (SELECT tenant_id, party_id,"
                       f" account_id, amount_cents, {buckets} FROM ledger_postings WHERE party_id {parties}) p"
                       f" GROUP BY GROUPING SETS ({sets})")


class psycopg_autocommit:  # noqa: N801 (used as a context manager, like a function)
    """A plain autocommit connection to the same database (VACUUM cannot run in a transaction)."""

    def __init__(self, db: Database):
        self.url = db.url

    def __enter__(self) -> Any:
        import psycopg

        self.conn = psycopg.connect(self.url, autocommit=True)
        return self.conn

    def __exit__(self, *exc: object) -> None:
        self.conn.close()


def timed(repeat: int, step: Callable[[int], Any]) -> list[float]:
    """Milliseconds of `repeat` calls of step(i)."""
    out = []
    for i in range(repeat):
        start = time.perf_counter()
        step(i)
        out.append((time.perf_counter() - start) * 1000)
    return out


def percentiles(samples: list[float]) -> tuple[float, float]:
    ordered = sorted(samples)
    return statistics.median(ordered), ordered[min(len(ordered) - 1, int(len(ordered) * 0.99))]


def check_plans(db: Database, entries: int) -> None:
    """Every timed statement reads indexes only: no sequential scan in its plan."""
    statements = {
        "as of an instant": timeline.balances_as_of_query(TENANT, "t", T0_MS + entries * STEP_MS // 2),
        "as of a position": timeline.balances_as_of_query(TENANT, "p", entries // 2 + 37),
        "a party as of an instant": timeline.balances_as_of_query(TENANT, "t", T0_MS + entries * STEP_MS // 3,
                                                                  "pty_7"),
        "a history page": timeline.account_postings_query(TENANT, ACCOUNTS[3], (entries // 2, 0, 0), 50),
    }
    with db.read() as tx:
        for name, (sql, params) in statements.items():
            plan = "\n".join(str(r[0]) for r in tx.fetchall("EXPLAIN " + sql, params))
            scans = sorted({line.strip().split(" on ")[0].lstrip("-> ") for line in plan.splitlines()
                            if " on " in line and "Scan" in line})
            if "Seq Scan" in plan:
                print(plan)
                raise SystemExit(f"{name}: the plan has a sequential scan")
            analyzed = [str(r[0]) for r in tx.fetchall("EXPLAIN (ANALYZE, BUFFERS) " + sql, params)]
            took = next((line.split(":")[1].strip() for line in analyzed if line.startswith("Execution Time")), "?")
            print(f"plan, {name}: {', '.join(scans)}; executed in {took} on the server", flush=True)


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--entries", type=int, default=1_000_000)
    parser.add_argument("--repeat", type=int, default=300)
    args = parser.parse_args()
    rng = random.Random(15)
    started = time.perf_counter()
    with scratch_pg("ledger") as url, connect(url) as db:
        db.migrate()
        load(db, args.entries)
        print(f"built {args.entries:,} entries ({4 * args.entries:,} timeline rows) in "
              f"{time.perf_counter() - started:.1f} s", flush=True)
        check_plans(db, args.entries)
        measure(db, args.entries, args.repeat, rng)
    print(f"total {time.perf_counter() - started:.1f} s")
    return 0


def measure(db: Database, entries: int, repeat: int, rng: random.Random) -> None:
    span = entries * STEP_MS
    instants = [T0_MS + rng.randrange(span) for _ in range(repeat)]
    positions = [rng.randrange(1, entries + 1) for _ in range(repeat)]
    parties = [f"pty_{rng.randrange(PARTIES)}" for _ in range(repeat)]
    pages = [(ACCOUNTS[rng.randrange(len(ACCOUNTS))], rng.randrange(1, entries)) for _ in range(repeat)]
    plain = ("SELECT account_id, SUM(amount_cents) FROM ledger_postings WHERE tenant_id = ? AND party_id = ''"
             " AND at_ms <= ? GROUP BY account_id")

    def naive(i: int) -> dict[str, int]:
        with db.query() as tx:
            return {str(a): int(c) for a, c in sorted(tx.fetchall(plain, (TENANT, instants[i])))}

    anchor_runs = max(10, repeat // 10)  # each one reads every posting up to the instant
    anchor = timed(anchor_runs, naive)
    for i in range(5):
        if timeline.balances_as_of(db, TENANT, "t", instants[i]) != naive(i):
            raise SystemExit("the bucket query and the plain sum disagree")
    anchor_p50, anchor_p99 = percentiles(anchor)
    print(f"anchor, the plain sum over the postings up to t: p50 {anchor_p50:.1f} ms, p99 {anchor_p99:.1f} ms"
          f" ({anchor_runs} runs)", flush=True)
    runs: dict[str, Callable[[int], Any]] = {
        "balances as of an instant": lambda i: timeline.balances_as_of(db, TENANT, "t", instants[i]),
        "balances as of a position": lambda i: timeline.balances_as_of(db, TENANT, "p", positions[i]),
        "a party's balances as of an instant": lambda i: timeline.balances_as_of(db, TENANT, "t", instants[i],
                                                                                 party_id=parties[i]),
        "history page of 50": lambda i: timeline.account_postings(db, TENANT, pages[i][0],
                                                                  after=(pages[i][1], 0, 0), limit=50),
    }
    for name, step in runs.items():
        for i in range(repeat // 5):  # warm-up: the index pages each query reads first come from disk
            step(repeat - 1 - i)
        p50, p99 = percentiles(timed(repeat, step))
        print(f"{name}: p50 {p50:.2f} ms, p99 {p99:.2f} ms (target < {TARGET_MS:.0f} ms); ratio p50 / anchor p50:"
              f" {p50 / anchor_p50:.4f} ({anchor_p50 / p50:,.0f}x faster than the plain sum)", flush=True)


if __name__ == "__main__":
    sys.exit(main())
