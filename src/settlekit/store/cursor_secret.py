"""The deployment's cursor secret (settlekit/cursors.py derives the token key from it): random bytes in one row
of `server_secrets`, created by its migration (and again here should the row be missing), so every host of a
deployment reads the same one."""

from __future__ import annotations

import secrets

from settlekit.store.database import Database, Tx
from settlekit.store.sql import statements

NAME = "cursor"
SECRET_BYTES = 64


def create(tx: Tx) -> None:
    """Store a fresh random cursor secret unless one exists (the migration's data step)."""
    tx.execute(statements("cursor_secret", tx.dialect)["create"], (NAME, secrets.token_hex(SECRET_BYTES)))


def read(db: Database) -> bytes:
    """The cursor secret, created first if missing (two hosts racing agree on the first one stored)."""
    with db.query() as tx:
        found = tx.scalar(statements("cursor_secret", tx.dialect)["read"], (NAME,))
    if found is None:
        with db.transaction() as tx:
            create(tx)
            found = tx.scalar(statements("cursor_secret", tx.dialect)["read"], (NAME,))
    return bytes.fromhex(str(found))
