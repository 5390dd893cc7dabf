"""Named SQL statements, one file per subsystem, with the dialect differences kept in per-dialect files.

A subsystem's statements live in up to three files of `-- name: <name>` blocks:

    store/queries/<subsystem>.sql            portable statements (`?` placeholders)
    store/postgres/queries/<subsystem>.sql   statements written for PostgreSQL only
    store/sqlite/queries/<subsystem>.sql     the same names, written for SQLite

A name is either portable or defined in both dialect files, never both. Portable statements may use the dialect
fragments `${now}` (the database clock as a timestamp), `${json}` (a JSON parameter) and the like, which each
dialect defines once in FRAGMENTS below. Repositories ask `statements("delivery", tx.dialect)["claim_due"]`.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Callable, Mapping, Sequence
from datetime import UTC, datetime
from importlib import resources
from types import MappingProxyType
from typing import Any

from settlekit.errors import ConfigurationError
from settlekit.events.canonical import iso_millis
from settlekit.store.database import Dialect

DIALECTS: tuple[Dialect, ...] = ("postgres", "sqlite")

FRAGMENTS: Mapping[Dialect, Mapping[str, str]] = {
    "postgres": {
        "now": "now()",
        "json": "?::jsonb",
        "seconds_since_updated_at": "EXTRACT(EPOCH FROM (clock_timestamp() - updated_at))::float8",
        "claim_lock": "FOR UPDATE OF d SKIP LOCKED",
        "row_lock": "FOR UPDATE",
        "seconds_since_recorded_at": "EXTRACT(EPOCH FROM (clock_timestamp() - recorded_at))::float8",
        "collate_c": 'COLLATE "C"',
    },
    "sqlite": {
        "now": "strftime('%Y-%m-%dT%H:%M:%fZ','now')",
        "json": "?",
        "seconds_since_updated_at": "((julianday('now') - julianday(updated_at)) * 86400.0)",
        "claim_lock": "",
        "row_lock": "",
        "seconds_since_recorded_at": "((julianday('now') - julianday(recorded_at)) * 86400.0)",
        "collate_c": "",
    },
}
# `collate_c` follows a text expression that must compare by code point (SQLite's BINARY already does).
# `claim_lock` ends a claim query whose claimed table is aliased `d`: PostgreSQL locks the claimed rows and
# concurrent claimers skip them; `row_lock` ends a query whose rows are locked until the transaction ends. SQLite
# needs neither (its write transactions are BEGIN IMMEDIATE, one writer).


TIMESTAMP_PARAMS: Mapping[Dialect, Callable[[datetime], Any]] = {
    "postgres": lambda dt: dt.astimezone(UTC),  # TIMESTAMPTZ, full precision
    "sqlite": iso_millis,  # ISO-8601 UTC text with milliseconds: string order is time order
}

_NAME = re.compile(r"^--\s*name:\s*([A-Za-z_][A-Za-z0-9_]*)\s*$", re.MULTILINE)
_FRAGMENT = re.compile(r"\$\{([a-z_]+)\}")


def parse_named(text: str, source: str) -> dict[str, str]:
    """`-- name: x` blocks of a .sql file as {name: statement}; comments before the first name are ignored."""
    out: dict[str, str] = {}
    marks = list(_NAME.finditer(text))
    for i, mark in enumerate(marks):
        end = marks[i + 1].start() if i + 1 < len(marks) else len(text)
        body = "\n".join(line for line in text[mark.end():end].splitlines() if not line.lstrip().startswith("--"))
        body = body.strip().rstrip(";").strip()
        name = mark.group(1)
        if name in out:
            raise ConfigurationError(f"{source}: statement {name!r} is defined twice", code="SQL_CATALOGUE_INVALID")
        if not body:
            raise ConfigurationError(f"{source}: statement {name!r} is empty", code="SQL_CATALOGUE_INVALID")
        out[name] = body
    return out


def _read(package: str, subsystem: str) -> dict[str, str]:
    entry = resources.files(package).joinpath(f"{subsystem}.sql")
    if not entry.is_file():
        return {}
    return parse_named(entry.read_text(encoding="utf-8"), f"{package}/{subsystem}.sql")


def _expand(statement: str, dialect: Dialect, where: str) -> str:
    fragments = FRAGMENTS[dialect]

    def one(match: re.Match[str]) -> str:
        key = match.group(1)
        if key not in fragments:
            raise ConfigurationError(f"{where}: unknown SQL fragment ${{{key}}}", code="SQL_CATALOGUE_INVALID")
        return fragments[key]

    return _FRAGMENT.sub(one, statement)


@functools.cache
def statements(subsystem: str, dialect: Dialect) -> Mapping[str, str]:
    """Every statement of a subsystem, as written for `dialect`."""
    portable = _read("settlekit.store.queries", subsystem)
    per_dialect = {d: _read(f"settlekit.store.{d}.queries", subsystem) for d in DIALECTS}
    names = [set(v) for v in per_dialect.values()]
    if names[0] != names[1]:
        missing = sorted(names[0] ^ names[1])
        raise ConfigurationError(f"{subsystem}: dialect statements defined for one dialect only: {missing}",
                                 code="SQL_CATALOGUE_INVALID")
    both = sorted(set(portable) & names[0])
    if both:
        raise ConfigurationError(f"{subsystem}: statements both portable and per dialect: {both}",
                                 code="SQL_CATALOGUE_INVALID")
    if not portable and not names[0]:
        raise ConfigurationError(f"no SQL statements for subsystem {subsystem!r}", code="SQL_CATALOGUE_INVALID")
    merged = {**portable, **per_dialect[dialect]}
    return MappingProxyType({name: _expand(sql, dialect, f"{subsystem}.{name}") for name, sql in merged.items()})


def subsystems() -> list[str]:
    """Names of every subsystem that has a statement file."""
    found: set[str] = set()
    for package in ("settlekit.store.queries", *(f"settlekit.store.{d}.queries" for d in DIALECTS)):
        for entry in resources.files(package).iterdir():
            if entry.name.endswith(".sql"):
                found.add(entry.name[:-4])
    return sorted(found)


def fragment(dialect: Dialect, key: str) -> str:
    """One dialect fragment (`now`, `json`, …) for SQL that a repository has to assemble at run time."""
    return _expand("${" + key + "}", dialect, "fragment")


def timestamp(dialect: Dialect, dt: datetime) -> Any:
    """A timestamp parameter in the form `dialect` stores it (see TIMESTAMP_PARAMS)."""
    return TIMESTAMP_PARAMS[dialect](dt)


def from_timestamp(value: Any) -> datetime | None:
    """A stored timestamp read back as an aware UTC datetime (TIMESTAMPTZ or ISO-8601 text); None stays None."""
    if value is None:
        return None
    if isinstance(value, datetime):
        return value.astimezone(UTC)
    return datetime.fromisoformat(str(value).replace("Z", "+00:00"))


def and_where(sql: str, params: list[Any], conditions: Sequence[tuple[str, Any]]) -> str:
    """`sql` followed by ` AND <condition>` for each (condition, value) whose value is not None; the value (the
    condition's one `?`) is appended to `params`."""
    for condition, value in conditions:
        if value is not None:
            sql += f" AND {condition}"
            params.append(value)
    return sql
