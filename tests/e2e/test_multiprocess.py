"""Two API processes and two worker processes share one PostgreSQL: a workload sent through both APIs ends with
every event stored once, every artifact built once and delivered, nothing lost; SIGTERM stops each cleanly."""

from __future__ import annotations

from pathlib import Path

from support.multiprocess import assert_nothing_lost_or_duplicated, run_shared_workload


def test_two_apis_two_workers_share_postgres(pg_url: str, tmp_path: Path) -> None:
    outcome = run_shared_workload(pg_url, tmp_path, {"SETTLEKIT_DB": pg_url})
    assert_nothing_lost_or_duplicated(outcome)
