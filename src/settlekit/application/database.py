"""The database the use cases run on, as the entry points see it: opened from its URL (`connect`, `opened`),
what a URL allows (`url_traits`), and the handles they pass to the use cases (`Database`, a transaction `Tx` that
several use cases share, an `EventListener` for wake-ups). Only the store reads or writes through them."""

from __future__ import annotations

from settlekit.store import cursor_secret as _cursor_secret
from settlekit.store.db import Database, EventListener, Tx, UrlTraits, connect, opened, url_traits

__all__ = ["Database", "EventListener", "Tx", "UrlTraits", "connect", "cursor_secret", "opened", "url_traits"]


def cursor_secret(db: Database) -> bytes:
    """The deployment's cursor secret (what `settlekit.cursors.Cursors` derives its key from)."""
    return _cursor_secret.read(db)
