"""The SQLite dialect family: what this dialect does its own way, given to each database it opens."""

from __future__ import annotations

from typing import Any

from settlekit.store.database import DialectFamily
from settlekit.store.sqlite import events
from settlekit.store.sqlite.backend import SqliteDatabase
from settlekit.store.sqlite.consumers import SqliteConsumers

FAMILY = DialectFamily(name="sqlite", events=events, consumers=SqliteConsumers())


def open_database(url: str, **options: Any) -> SqliteDatabase:
    return SqliteDatabase(url, family=FAMILY, **options)
