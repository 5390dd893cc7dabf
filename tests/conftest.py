"""Shared fixtures: a uniquely named PostgreSQL database per run (cloned per test from a migrated template),
and a fresh SQLite file per test. Every backend-parametrized test runs on both."""

from __future__ import annotations

import contextlib
import functools
import os
import random
import tarfile
import uuid
from collections.abc import Iterator
from pathlib import Path

import psycopg
import psycopg_pool.base
import pytest

from settlekit.events.canonical import parse_json
from settlekit.store.db import Database, connect
from support import failpoints as support_failpoints

VECTORS = Path(__file__).resolve().parent / "vectors"
PG_ADMIN_URL = os.environ.get("SETTLEKIT_TEST_PG", "postgresql://postgres@127.0.0.1:5432/postgres")
_RUN = uuid.uuid4().hex[:10]


# `make test` runs the suite in two processes (pytest-xdist, `--dist loadgroup`), each test file whole in one of
# them. PostgreSQL's gap rules wait for the cluster's oldest writing transaction, which a test of the other process
# could hold open: the files that hold writing transactions open, or wait for that horizon, run one after another
# in the same process.
CLUSTER_HORIZON_FILES = frozenset({
    "test_api_idempotency.py", "test_db_outage.py", "test_event_feed.py", "test_statement_deadline.py",
    "test_dispatch_blocked.py", "test_dispatch_blocked_turns.py", "test_dispatch_contract.py",
    "test_dispatch_gaps.py", "test_dispatch_pg.py", "test_group_commit.py", "test_delivery_completion.py",
})


# psycopg_pool jitters each new connection's lifetime with the global `random`, from its own threads as well: a
# connection opened while Hypothesis draws an example moved the global state under it (HypothesisDeprecationWarning,
# now and then). The pool draws from a generator of its own instead.
psycopg_pool.base.random = random.Random().random


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        name = item.path.name
        group = "cluster-horizon" if name in CLUSTER_HORIZON_FILES else str(item.path)
        item.add_marker(pytest.mark.xdist_group(group))


def load_vector(name: str) -> dict:
    return parse_json((VECTORS / name).read_text(encoding="utf-8"))


@functools.cache
def differential_corpus() -> dict[str, str]:
    """The reference's differential corpus (`vectors/differential.tar.gz`): stream name -> file text."""
    out: dict[str, str] = {}
    with tarfile.open(VECTORS / "differential.tar.gz", "r:gz") as archive:
        for member in archive.getmembers():
            name = member.name.rsplit("/", 1)[-1]
            if member.isfile() and name.startswith("d") and name.endswith(".json"):
                handle = archive.extractfile(member)
                assert handle is not None
                out[name[: -len(".json")]] = handle.read().decode("utf-8")
    return dict(sorted(out.items()))


def load_differential(name: str) -> dict:
    return parse_json(differential_corpus()[name])


def scenario_names() -> list[str]:
    return sorted(p.name for p in VECTORS.glob("*.json") if p.name != "envelope.json")


def _pg_url(dbname: str) -> str:
    base = PG_ADMIN_URL.rsplit("/", 1)[0]
    return f"{base}/{dbname}"


def _admin() -> psycopg.Connection:
    return psycopg.connect(PG_ADMIN_URL, autocommit=True)


REQUIRE_PG = os.environ.get("SETTLEKIT_REQUIRE_PG", "").strip().lower() in ("1", "true", "yes", "on")
PG_HOWTO = ("start PostgreSQL on 127.0.0.1:5432 (trust auth for user postgres) or point SETTLEKIT_TEST_PG at an "
            "admin URL to run them")


@functools.cache
def pg_unavailable() -> str | None:
    """Why the admin URL does not connect (checked once per run), or None when it does."""
    try:
        with psycopg.connect(PG_ADMIN_URL, autocommit=True, connect_timeout=3) as conn:
            conn.execute("SELECT 1")
    except psycopg.Error as exc:
        return str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
    return None


_pg_skipped: list[str] = []


def require_pg() -> None:
    """Skip the test when PostgreSQL is unreachable, or fail it when SETTLEKIT_REQUIRE_PG is set (CI)."""
    reason = pg_unavailable()
    if reason is None:
        return
    if REQUIRE_PG:
        pytest.fail(f"SETTLEKIT_REQUIRE_PG is set but PostgreSQL at {PG_ADMIN_URL} is unreachable: {reason}",
                    pytrace=False)
    _pg_skipped.append(reason)
    pytest.skip(f"PostgreSQL unreachable ({reason}); {PG_HOWTO}")


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    if not _pg_skipped:
        return
    skipped = sum(1 for report in terminalreporter.stats.get("skipped", [])
                  if "PostgreSQL unreachable" in str(getattr(report, "longrepr", "")))
    terminalreporter.write_line(f"{skipped} PostgreSQL tests skipped: {PG_ADMIN_URL} is unreachable; {PG_HOWTO}.",
                                yellow=True, bold=True)


@pytest.fixture(scope="session")
def pg_template() -> Iterator[str]:
    require_pg()
    name = f"sk_test_{_RUN}_tpl"
    with _admin() as conn:
        conn.execute(f'CREATE DATABASE "{name}"')
    try:
        db = connect(_pg_url(name))
        db.migrate()
        db.close()
        yield name
    finally:
        with _admin() as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


@pytest.fixture
def pg_url(pg_template: str) -> Iterator[str]:
    with pg_database_from(pg_template) as url:
        yield url


@pytest.fixture
def pg(pg_url: str) -> Iterator[Database]:
    """A migrated PostgreSQL database of its own (PostgreSQL-only tests)."""
    database = connect(pg_url)
    try:
        yield database
    finally:
        database.close()


@pytest.fixture
def sqlite_db(sqlite_url: str) -> Iterator[Database]:
    """A migrated SQLite database of its own (SQLite-only tests)."""
    database = connect(sqlite_url)
    database.migrate()
    try:
        yield database
    finally:
        database.close()


@pytest.fixture
def sqlite_url(tmp_path: Path) -> str:
    return f"sqlite:///{tmp_path / 'settlekit.db'}"


@pytest.fixture(params=["sqlite", "postgres"])
def db_url(request: pytest.FixtureRequest) -> str:
    if request.param == "sqlite":
        return str(request.getfixturevalue("sqlite_url"))
    return str(request.getfixturevalue("pg_url"))


@pytest.fixture
def db(db_url: str) -> Iterator[Database]:
    database = connect(db_url)
    database.migrate()
    try:
        yield database
    finally:
        database.close()


@contextlib.contextmanager
def pg_database_from(template: str) -> Iterator[str]:
    """A PostgreSQL database cloned from the migrated template, dropped on exit (for wider-scoped fixtures)."""
    name = f"sk_test_{_RUN}_{uuid.uuid4().hex[:8]}"
    with _admin() as conn:
        conn.execute(f'CREATE DATABASE "{name}" TEMPLATE "{template}"')
    try:
        yield _pg_url(name)
    finally:
        with _admin() as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


@contextlib.contextmanager
def backend_database(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory,
                     backend: str) -> Iterator[Database]:
    """A migrated database of `backend` ("sqlite" or "postgres") for a module-scoped fixture, closed (and on
    PostgreSQL dropped) on exit."""
    if backend == "sqlite":
        database = connect(f"sqlite:///{tmp_path_factory.mktemp('db') / 'settlekit.db'}")
        database.migrate()
        try:
            yield database
        finally:
            database.close()
        return
    with pg_database_from(request.getfixturevalue("pg_template")) as url:
        database = connect(url)
        try:
            yield database
        finally:
            database.close()


@pytest.fixture(autouse=True)
def _disarm_failpoints() -> Iterator[None]:
    """Every test starts and ends with no failpoint armed."""
    yield
    support_failpoints.reset()
