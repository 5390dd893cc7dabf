"""The PostgreSQL dialect family: what this dialect does its own way, given to each database it opens."""

from __future__ import annotations

from typing import Any

from settlekit.store.database import DialectFamily
from settlekit.store.postgres import events
from settlekit.store.postgres.backend import PostgresDatabase
from settlekit.store.postgres.consumers import PostgresConsumers

FAMILY = DialectFamily(name="postgres", events=events, consumers=PostgresConsumers())


def open_database(url: str, **options: Any) -> PostgresDatabase:
    return PostgresDatabase(url, family=FAMILY, **options)
