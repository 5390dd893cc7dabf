"""The several-process workload through PgBouncer in transaction pooling mode: every API and worker process
reaches PostgreSQL through the pooler (prepared statements off, as PgBouncer before 1.22 cannot route them),
LISTEN goes to PostgreSQL directly (`SETTLEKIT_DB_DIRECT`), and nothing is lost or duplicated.

The test starts its own `pgbouncer` (Debian's package) with a generated configuration on a free loopback port.
Without the program it skips, unless SETTLEKIT_REQUIRE_PG is set (CI), where it fails."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from urllib.parse import urlsplit

import psycopg
import pytest

from conftest import PG_ADMIN_URL
from settlekit.store.db import connect
from support.multiprocess import run_shared_workload
from support.pgbouncer import pgbouncer, pooled


def _pooler_stats(port: int, user: str) -> dict[str, int]:
    """Transactions and queries PgBouncer routed, summed over databases (from its admin console)."""
    with psycopg.connect(f"postgresql://{user}@127.0.0.1:{port}/pgbouncer", autocommit=True,
                         cursor_factory=psycopg.ClientCursor) as conn:
        cur = conn.execute("SHOW STATS")
        names = [c.name for c in cur.description or ()]
        rows = cur.fetchall()
    totals = {"total_xact_count": 0, "total_query_count": 0}
    for row in rows:
        for key in totals:
            totals[key] += int(row[names.index(key)])
    return totals


@pytest.fixture(scope="module")
def pgbouncer_port(pg_template: str) -> Iterator[int]:
    with pgbouncer(PG_ADMIN_URL) as port:
        yield port


def test_listen_on_the_direct_connection_wakes_on_a_commit_through_the_pooler(pg_url: str,
                                                                             pgbouncer_port: int) -> None:
    db = connect(pooled(pg_url, pgbouncer_port), direct_url=pg_url, prepared_statements=False)
    try:
        assert db.wait_for_notify(0.01) is False  # LISTEN is in place from here on
        for _ in range(3):  # several transactions: the pooler may run each on another server connection
            with db.transaction() as tx:
                tx.notify()
            assert db.wait_for_notify(10) is True
    finally:
        db.close()


def test_apis_and_workers_through_pgbouncer_in_transaction_mode(pg_url: str, tmp_path: Path,
                                                               pgbouncer_port: int) -> None:
    run_shared_workload(pg_url, tmp_path, {
        "SETTLEKIT_DB": pooled(pg_url, pgbouncer_port),
        "SETTLEKIT_DB_DIRECT": pg_url,
        "SETTLEKIT_DB_PREPARED_STATEMENTS": "false",
    })
    stats = _pooler_stats(pgbouncer_port, urlsplit(pg_url).username or "postgres")
    # the workload's transactions went through the pooler, not around it
    assert stats["total_xact_count"] > 1000, stats
