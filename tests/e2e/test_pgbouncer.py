"""The several-process workload through PgBouncer in transaction pooling mode: every API and worker process
reaches PostgreSQL through the pooler (prepared statements off, as PgBouncer before 1.22 cannot route them),
LISTEN goes to PostgreSQL directly (`SETTLEKIT_DB_DIRECT`), and nothing is lost or duplicated.

The test starts its own `pgbouncer` (Debian's package) with a generated configuration on a free loopback port.
Without the program it skips, unless SETTLEKIT_REQUIRE_PG is set (CI), where it fails."""

from __future__ import annotations

import logging
import os
import subprocess
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import urlsplit

import psycopg
import pytest

from conftest import PG_ADMIN_URL
from settlekit.errors import DatabaseUnavailableError
from settlekit.store.db import connect
from support.multiprocess import assert_nothing_lost_or_duplicated, free_port, run_shared_workload
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
    outcome = run_shared_workload(pg_url, tmp_path, {
        "SETTLEKIT_DB": pooled(pg_url, pgbouncer_port),
        "SETTLEKIT_DB_DIRECT": pg_url,
        "SETTLEKIT_DB_PREPARED_STATEMENTS": "false",
    })
    assert_nothing_lost_or_duplicated(outcome)
    stats = _pooler_stats(pgbouncer_port, urlsplit(pg_url).username or "postgres")
    # the workload's transactions went through the pooler, not around it: its three clients' appends alone make
    # a transaction per group commit, which holds at most one append of each client
    assert stats["total_xact_count"] >= outcome.events_sent // 3, stats


def test_prepared_statements_are_found_not_to_survive_the_pooler(pg_url: str, pgbouncer_port: int) -> None:
    """PgBouncer 1.18 in transaction mode loses what a transaction prepared; a direct connection keeps it; with
    prepared statements off there is nothing to check."""
    through = pooled(pg_url, pgbouncer_port)
    for url, options, survive in ((through, {}, False), (through, {}, False), (pg_url, {}, True),
                                  (through, {"prepared_statements": False}, True)):
        db = connect(url, **options)
        try:
            assert db.prepared_statements_survive() is survive, (url, options)
        finally:
            db.close()


def test_serve_turns_prepared_statements_off_behind_the_pooler(pg_url: str, tmp_path: Path,
                                                              pgbouncer_port: int) -> None:
    """`serve --workers 2` through PgBouncer 1.18 with prepared statements left on (the default): it says once
    that it turned them off, and writes succeed in both API processes and the dispatcher's passes. Before, writes
    answered 500 INTERNAL ("prepared statement _pg3_0 already exists") and dispatcher passes failed."""
    import signal
    import sys

    import httpx

    from settlekit.api.auth import create_api_key

    db = connect(pg_url)
    try:
        db.migrate()
        _, key = create_api_key(db, "tenant_default", ["jobs:read", "jobs:write"])
    finally:
        db.close()
    port = free_port()
    log = tmp_path / "serve.log"
    env = {k: v for k, v in os.environ.items() if not k.startswith("SETTLEKIT_")}
    env.update({"SETTLEKIT_DB": pooled(pg_url, pgbouncer_port), "SETTLEKIT_DB_DIRECT": pg_url,
                "SETTLEKIT_SERVER_KEY_FILE": str(tmp_path / "server.pem")})
    proc = subprocess.Popen([sys.executable, "-m", "settlekit.cli", "serve", "--workers", "2", "--port", str(port)],
                            env=env, stdout=log.open("wb"), stderr=subprocess.STDOUT)
    try:
        base = f"http://127.0.0.1:{port}"
        deadline = time.monotonic() + 60
        while True:
            assert proc.poll() is None, log.read_text()[-3000:]
            assert time.monotonic() < deadline, "serve did not answer within a minute"
            try:
                if httpx.get(f"{base}/healthz", timeout=2).status_code == 200:
                    break
            except httpx.HTTPError:
                time.sleep(0.1)
        statuses = []
        with httpx.Client(base_url=base, headers={"authorization": f"Bearer {key}", "connection": "close"},
                          timeout=30) as http:
            for i in range(40):  # fresh connections: both API processes, many server connections
                r = http.post("/v1/jobs", json={"jobId": f"job_pool_{i}", "payload": {"templateId": "reset_lite"}})
                statuses.append(r.status_code)
                if r.status_code == 201:
                    r = http.get(f"/v1/jobs/job_pool_{i}")
                    statuses.append(r.status_code)
        assert set(statuses) == {200, 201}, statuses
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
    text = log.read_text()
    assert text.count("prepared statements turned off") == 1, text[-3000:]
    assert "dispatcher pass failed" not in text and "_pg3_" not in text, text[-3000:]


def test_prepared_statements_met_later_are_503_once_then_off(pg_url: str, pgbouncer_port: int,
                                                           caplog: pytest.LogCaptureFixture) -> None:
    """Without the start check (or past it): two pooled sessions each prepare their statement under psycopg's
    first name, and the pooler hands them the same server connection. That operation is 503 DATABASE_UNAVAILABLE
    (nothing of it ran), never a raw database error (500); prepared statements are off from then on, said once."""
    db = connect(pooled(pg_url, pgbouncer_port), direct_url=pg_url, prepared_statements=True)
    try:
        with caplog.at_level(logging.WARNING, logger="settlekit.store"):
            with (pytest.raises(DatabaseUnavailableError),  # noqa: PT012  (the sessions' statements)
                  db.connection() as first, db.connection() as second):
                for _ in range(4):  # psycopg prepares a statement on its second run
                    first.execute("SELECT 1 AS probe_one").fetchone()
                    second.execute("SELECT 2 AS probe_two").fetchone()
            errors: list[BaseException] = []

            def run(n: int) -> None:
                try:
                    for i in range(20):
                        with db.transaction() as tx:
                            assert tx.scalar("SELECT ?::int + 1", (n + i,)) == n + i + 1
                except BaseException as exc:
                    errors.append(exc)

            threads = [threading.Thread(target=run, args=(n,)) for n in range(4)]
            for thread in threads:
                thread.start()
            for thread in threads:
                thread.join(60)
            assert errors == []
        lines = [r.getMessage() for r in caplog.records if r.name == "settlekit.store"]
        assert len(lines) == 1 and lines[0].startswith("prepared statements turned off"), lines
        assert not db.prepared_statements
    finally:
        db.close()
