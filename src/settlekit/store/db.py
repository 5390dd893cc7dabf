"""Opening a database: the URL names the dialect, and the dialect's family (store/<dialect>/family.py) builds the
`Database`. The only place that looks at a URL's scheme; callers outside the store ask `url_traits` what a URL
allows. The interface (`Database`, `Tx`, …) is store/database.py, re-exported here for callers outside the store.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from settlekit.errors import ConfigurationError
from settlekit.store.database import Database, Dialect, EventListener, Row, Tx, migration_files

__all__ = ["Database", "Dialect", "EventListener", "Row", "Tx", "UrlTraits", "connect", "migration_files", "opened",
           "url_traits"]

_POSTGRES_SCHEMES = ("postgresql://", "postgres://")
_SQLITE_SCHEME = "sqlite:///"


@dataclass(frozen=True)
class UrlTraits:
    """What a database URL allows, for callers that must decide before opening it."""

    server: bool  # a database server (PostgreSQL): pool and outage options apply, several processes may share it
    file: Path | None  # the embedded database's file (SQLite), None for a server


def url_traits(url: str) -> UrlTraits:
    """What `url` allows; DATABASE_URL_INVALID for a URL `connect` would refuse."""
    if url.startswith(_POSTGRES_SCHEMES):
        return UrlTraits(server=True, file=None)
    if url.startswith(_SQLITE_SCHEME):
        return UrlTraits(server=False, file=Path(url[len(_SQLITE_SCHEME):]))
    raise ConfigurationError(f"unsupported database URL {url!r}: use postgresql://… or sqlite:///path.db",
                             code="DATABASE_URL_INVALID")


def connect(url: str, **options: Any) -> Database:
    """Open a database from a URL: `postgresql://…` or `sqlite:///path.db` (`sqlite://:memory:` is refused)."""
    if url_traits(url).server:
        from settlekit.store.postgres import family as postgres

        return postgres.open_database(url, **options)
    from settlekit.store.sqlite import family as sqlite

    return sqlite.open_database(url, **options)


@contextlib.contextmanager
def opened(url: str, *, migrate: bool = True, **options: Any) -> Iterator[Database]:
    db = connect(url, **options)
    try:
        if migrate:
            db.migrate()
        yield db
    finally:
        db.close()
