"""The console's sessions (one row per signed-in browser): the sha256 of the session id its cookie carries, the
API key it acts with, its CSRF token and the one-shot message of its last action. Every API process of a
deployment reads the same rows, so ending a session here ends it everywhere."""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from datetime import datetime

from settlekit.store.database import Database, Tx
from settlekit.store.sql import statements, timestamp


@dataclass(frozen=True)
class StoredSession:
    key_id: str
    tenant_id: str
    csrf: str
    flash: str | None  # JSON of the last action's message, until a page shows it


def session_hash(session_id: str) -> str:
    return hashlib.sha256(session_id.encode("utf-8")).hexdigest()


def insert(db: Database, session_id: str, *, key_id: str, tenant_id: str, csrf: str, expires_at: datetime,
           now: datetime) -> None:
    """Record a new session (and delete a few sessions past their expiry on the way)."""
    with db.transaction() as tx:
        named = statements("console_sessions", tx.dialect)
        tx.execute(named["insert"], (session_hash(session_id), key_id, tenant_id, csrf,
                                     timestamp(tx.dialect, expires_at)))
        purge_expired_in(tx, now=now)


def find(db: Database, session_id: str, *, now: datetime) -> StoredSession | None:
    """The session, unless it ended or expired."""
    with db.query() as tx:
        row = tx.fetchone(statements("console_sessions", tx.dialect)["find"],
                          (session_hash(session_id), timestamp(tx.dialect, now)))
    return None if row is None else StoredSession(str(row[0]), str(row[1]), str(row[2]), row[3])


def set_flash(db: Database, session_id: str, flash: str) -> None:
    with db.transaction() as tx:
        tx.execute(statements("console_sessions", tx.dialect)["set_flash"], (flash, session_hash(session_id)))


def take_flash(db: Database, session_id: str) -> bool:
    """Clear the session's message; True when this call cleared it (a concurrent page showing it too gets False)."""
    with db.transaction() as tx:
        return tx.execute(statements("console_sessions", tx.dialect)["take_flash"], (session_hash(session_id),)) > 0


def delete(db: Database, session_id: str) -> None:
    with db.transaction() as tx:
        tx.execute(statements("console_sessions", tx.dialect)["delete"], (session_hash(session_id),))


def delete_for_key(tx: Tx, key_id: str) -> int:
    """End every session of an API key (it was revoked)."""
    return tx.execute(statements("console_sessions", tx.dialect)["delete_for_key"], (key_id,))


def purge_expired_in(tx: Tx, *, now: datetime) -> int:
    """Delete sessions past their expiry (the retention cleanup runs it with its other deletes)."""
    return tx.execute(statements("console_sessions", tx.dialect)["purge_expired"], (timestamp(tx.dialect, now),))
