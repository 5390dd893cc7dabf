"""The named-statement catalogue: every subsystem loads for both dialects; the file format's rules hold."""

from __future__ import annotations

import pytest

from settlekit.errors import ConfigurationError
from settlekit.store.sql import DIALECTS, fragment, parse_named, statements, subsystems


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
