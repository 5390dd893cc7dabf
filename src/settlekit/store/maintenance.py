"""Retention maintenance: the lock that lets one process at a time run the cleanups."""

from __future__ import annotations

from settlekit.store.database import Tx
from settlekit.store.sql import statements

CLEANUP_LOCK_KEY = 0x5E77_C1EA  # PostgreSQL advisory lock key of the retention cleanups


def try_cleanup_lock(tx: Tx, key: int = CLEANUP_LOCK_KEY) -> bool:
    """Take the cleanup lock for the rest of `tx`; False when another process holds it (skip this tick).
    SQLite has one writer at a time, so there the lock is always granted."""
    return bool(tx.scalar(statements("maintenance", tx.dialect)["try_cleanup_lock"], (key,)))
