"""A newcomer's first steps: clear one-line errors for a database that is not there, `make demo` without the dev
extras, and a test run that skips (or in CI refuses to skip) the PostgreSQL tests."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SETTLEKIT = Path(sys.executable).with_name("settlekit")
UNREACHABLE_PG = "postgresql://postgres@127.0.0.1:1/settlekit"


def run_cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(SETTLEKIT), *args], capture_output=True, text=True, timeout=120)


@pytest.mark.parametrize("args", [
    ["migrate"],
    ["export", "--stream", "job_1"],
    ["ledger", "balances", "--tenant", "t"],
    ["api-keys", "list"],
    ["consumers", "list"],
    ["deliveries", "list", "--tenant", "t"],
    ["worker"],
    ["serve", "--port", "0"],
], ids=lambda a: "-".join(a[:2]))
def test_unreachable_postgres_is_one_line(args: list[str]) -> None:
    proc = run_cli(*args, "--db", UNREACHABLE_PG)
    assert proc.returncode == 1
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1, proc.stderr
    assert lines[0].startswith("error DATABASE_UNAVAILABLE: the database is not reachable"), proc.stderr
    assert "Traceback" not in proc.stderr and proc.stdout == ""


def test_the_line_says_why(pg_url: str) -> None:
    wrong_db = pg_url.rsplit("/", 1)[0] + "/settlekit_no_such_database"
    proc = run_cli("migrate", "--db", wrong_db)
    [line] = proc.stderr.strip().splitlines()
    assert line.startswith("error DATABASE_UNAVAILABLE:")
    assert 'database "settlekit_no_such_database" does not exist' in line
    proc = run_cli("keys", "list", "--db", UNREACHABLE_PG)
    assert "Connection refused" in proc.stderr


def test_sqlite_in_a_missing_directory_is_one_line(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / ('deep' * 30) / 'missing' / 'settlekit.db'}"
    proc = run_cli("migrate", "--db", url)
    assert proc.returncode == 1
    [line] = proc.stderr.strip().splitlines()
    assert line.startswith("error DATABASE_UNAVAILABLE: cannot open SQLite database")


def test_export_of_a_missing_sqlite_file_does_not_create_it(tmp_path: Path) -> None:
    path = tmp_path / "typo.db"
    proc = run_cli("export", "--db", f"sqlite:///{path}", "--stream", "job_1")
    assert proc.returncode == 1
    [line] = proc.stderr.strip().splitlines()
    assert line.startswith("error DATABASE_NOT_FOUND: no SQLite database at") and str(path) in line
    assert not path.exists()


def test_make_demo_installs_the_runtime_package_only(tmp_path: Path) -> None:
    venv = tmp_path / "venv"
    demo = subprocess.run(["make", "-n", "demo", f"VENV={venv}"], cwd=ROOT, capture_output=True, text=True,
                          check=True).stdout
    assert "pip install -q -e .\n" in demo and "[dev" not in demo and "bench" not in demo
    test = subprocess.run(["make", "-n", "test", f"VENV={venv}"], cwd=ROOT, capture_output=True, text=True,
                          check=True).stdout
    assert "-e '.[dev,bench]'" in test


def test_ci_requires_postgres() -> None:
    script = (ROOT / ".ci" / "run").read_text(encoding="utf-8")
    assert "export SETTLEKIT_REQUIRE_PG=1" in script
    assert script.index("SETTLEKIT_REQUIRE_PG=1") < script.index("make test")


def _pytest(env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    """A PostgreSQL-only test and a SQLite-only test, in a child pytest."""
    tests = ["tests/contract/test_store_contract.py::test_migrate_is_idempotent"]
    return subprocess.run([sys.executable, "-m", "pytest", *tests], cwd=ROOT,
                          capture_output=True, text=True, timeout=300,
                          env={**os.environ, "SETTLEKIT_TEST_PG": "postgresql://postgres@127.0.0.1:1/postgres",
                               **env})


def test_without_postgres_the_sqlite_tests_run_and_the_postgres_ones_skip_with_one_line() -> None:
    proc = _pytest({"SETTLEKIT_REQUIRE_PG": ""})
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "1 passed, 1 skipped" in proc.stdout, proc.stdout
    notes = [ln for ln in proc.stdout.splitlines() if "PostgreSQL tests skipped" in ln]
    assert notes == ["1 PostgreSQL tests skipped: postgresql://postgres@127.0.0.1:1/postgres is unreachable; start "
                     "PostgreSQL on 127.0.0.1:5432 (trust auth for user postgres) or point SETTLEKIT_TEST_PG at an "
                     "admin URL to run them."], proc.stdout


def test_with_settlekit_require_pg_an_unreachable_postgres_fails_the_run() -> None:
    proc = _pytest({"SETTLEKIT_REQUIRE_PG": "1"})
    assert proc.returncode == 1, proc.stdout
    assert "1 passed" in proc.stdout and "1 error" in proc.stdout, proc.stdout
    assert "SETTLEKIT_REQUIRE_PG is set but PostgreSQL" in proc.stdout
