"""The named-statement catalogue: every subsystem loads for both dialects; the file format's rules hold."""

from __future__ import annotations

import ast
from datetime import UTC, datetime, timedelta, timezone
from pathlib import Path

import pytest

from settlekit.errors import ConfigurationError
from settlekit.store.sql import DIALECTS, fragment, from_timestamp, parse_named, statements, subsystems, timestamp

STORE = Path(__file__).resolve().parents[2] / "src" / "settlekit" / "store"
TX_STATEMENT_METHODS = frozenset({"execute", "executemany", "fetchone", "fetchall", "scalar"})  # Tx's, sql first


@pytest.mark.parametrize("subsystem", subsystems())
def test_every_subsystem_loads_for_both_dialects(subsystem: str) -> None:
    loaded = [statements(subsystem, d) for d in DIALECTS]
    assert set(loaded[0]) == set(loaded[1])
    for per_dialect in loaded:
        for name, sql in per_dialect.items():
            assert "${" not in sql, (subsystem, name)


def test_blocks_are_split_by_name_and_comments_dropped() -> None:
    text = "-- header\n-- name: a\n-- about a\nSELECT 1;\n\n-- name: b\nSELECT\n  2\n"
    assert parse_named(text, "t.sql") == {"a": "SELECT 1", "b": "SELECT\n  2"}


def test_duplicate_and_empty_names_are_refused() -> None:
    with pytest.raises(ConfigurationError, match="defined twice"):
        parse_named("-- name: a\nSELECT 1\n-- name: a\nSELECT 2\n", "t.sql")
    with pytest.raises(ConfigurationError, match="empty"):
        parse_named("-- name: a\n-- nothing\n", "t.sql")


def test_fragments_differ_per_dialect() -> None:
    assert fragment("postgres", "now") == "now()"
    assert "strftime" in fragment("sqlite", "now")
    with pytest.raises(ConfigurationError, match="unknown SQL fragment"):
        fragment("postgres", "nope")


def test_unknown_subsystem_is_refused() -> None:
    with pytest.raises(ConfigurationError, match="no SQL statements"):
        statements("no_such_subsystem", "sqlite")


def test_timestamps_keep_each_dialects_stored_form() -> None:
    at = datetime(2026, 1, 2, 4, 4, 5, 678901, tzinfo=timezone(timedelta(hours=1)))
    assert timestamp("sqlite", at) == "2026-01-02T03:04:05.678Z"  # the text existing SQLite databases hold
    assert timestamp("postgres", at) == at and timestamp("postgres", at).tzinfo == UTC
    assert from_timestamp("2026-01-02T03:04:05.678Z") == datetime(2026, 1, 2, 3, 4, 5, 678000, tzinfo=UTC)
    assert from_timestamp(at) == at and from_timestamp(None) is None


def test_postgres_statements_stay_within_psycopgs_parse_cache() -> None:
    """psycopg re-parses a statement on every execution when it is longer than its cache limit or has more
    parameters than it: the hot statements (append, ledger) must stay under both."""
    import importlib
    import pkgutil
    import re

    from psycopg._queries import MAX_CACHED_STATEMENT_LENGTH, MAX_CACHED_STATEMENT_PARAMS

    import settlekit.store.postgres as postgres_store

    checked = 0
    for module_info in pkgutil.iter_modules(postgres_store.__path__, "settlekit.store.postgres."):
        module = importlib.import_module(module_info.name)
        for name, value in vars(module).items():
            if isinstance(value, str) and re.match(r"\s*(WITH|SELECT|INSERT|UPDATE|DELETE)\b", value):
                checked += 1
                parameters = len(re.findall(r"%\(\w+\)[sb]|%[sb]", value))
                assert len(value) <= MAX_CACHED_STATEMENT_LENGTH, (module_info.name, name, len(value))
                assert parameters <= MAX_CACHED_STATEMENT_PARAMS, (module_info.name, name, parameters)
    for subsystem in subsystems():
        for name, sql in statements(subsystem, "postgres").items():
            checked += 1
            assert len(sql) <= MAX_CACHED_STATEMENT_LENGTH, (subsystem, name, len(sql))
    assert checked > 20


def test_every_migration_data_step_names_a_migration_of_both_dialects_and_a_function() -> None:
    from settlekit.store.db import migration_files
    from settlekit.store.migration_steps import DATA_STEPS

    for name, step in DATA_STEPS.items():
        for dialect in DIALECTS:
            assert name in {n for n, _ in migration_files(dialect)}, (name, dialect)
        assert callable(step), name


def _fixed_text(node: ast.expr, module_names: dict[str, ast.expr]) -> bool:
    """The expression is SQL text known before run time: a string literal, literals joined with `+` (or written
    side by side), an f-string without substitutions, or a module-level name bound to such text."""
    if isinstance(node, ast.Constant):
        return isinstance(node.value, str)
    if isinstance(node, ast.JoinedStr):
        return all(isinstance(part, ast.Constant) for part in node.values)
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Add):
        return _fixed_text(node.left, module_names) and _fixed_text(node.right, module_names)
    if isinstance(node, ast.Name) and node.id in module_names:
        return _fixed_text(module_names[node.id], {})
    return False


def inline_fixed_statements(source: str, where: str) -> list[str]:
    """Calls of a Tx statement method whose SQL is fixed text written in the module instead of a named statement."""
    tree = ast.parse(source)
    module_names = {target.id: node.value for node in tree.body if isinstance(node, ast.Assign | ast.AnnAssign)
                    for target in (node.targets if isinstance(node, ast.Assign) else [node.target])
                    if isinstance(target, ast.Name) and node.value is not None}
    return [f"{where}:{node.lineno}: {ast.unparse(node.args[0])[:80]}" for node in ast.walk(tree)
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
            and node.func.attr in TX_STATEMENT_METHODS and node.args and _fixed_text(node.args[0], module_names)]


def test_repositories_take_fixed_statements_from_the_named_files() -> None:
    """Outside the dialect folders a repository runs a statement whose text is fixed by its name in
    store/queries (or the dialect folders' queries); only statements assembled at run time are written inline."""
    offenders = []
    for path in sorted(STORE.rglob("*.py")):
        where = path.relative_to(STORE).as_posix()
        if not where.startswith(("postgres/", "sqlite/")):
            offenders += inline_fixed_statements(path.read_text(encoding="utf-8"), where)
    assert offenders == []


def test_the_inline_statement_check_tells_fixed_text_from_assembled_text() -> None:
    source = """
_ONE = "SELECT 1 FROM t"
_WHERE = " WHERE a = ?"
def fixed(tx):
    tx.execute("DELETE FROM t WHERE a = ?", (1,))
    tx.fetchall("SELECT a FROM t" + _WHERE, (1,))
    tx.scalar("SELECT count(*) FROM t" " WHERE a = ?", (1,))
    tx.fetchone(_ONE)
def assembled(tx, marks, named):
    tx.fetchall(f"SELECT a FROM t WHERE a IN ({marks})", (1, 2))
    tx.executemany(named["insert"], [])
    tx.fetchone("SELECT a FROM t" + marks)
"""
    found = inline_fixed_statements(source, "m.py")
    assert [line.split(":")[1] for line in found] == ["5", "6", "7", "8"], found
