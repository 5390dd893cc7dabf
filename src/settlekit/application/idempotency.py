"""Idempotent writes: an action run once per (tenant, principal, endpoint, key), its answer stored and replayed
to a retry with the same request, a different request under the same key refused. The key's rows (reserve,
complete, release, the wait for a request in flight) are store/idempotency.py's; the flow is here."""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Callable, Iterator
from datetime import UTC, datetime
from typing import Any

from settlekit.store import idempotency as keys
from settlekit.store.database import Database, Tx
from settlekit.store.idempotency import DEFAULT_WAIT_SECONDS, KeyScope, request_hash

__all__ = ["DEFAULT_WAIT_SECONDS", "KeyScope", "request_hash", "run", "run_in_transaction"]

log = logging.getLogger("settlekit.idempotency")


def run(db: Database, scope: keys.KeyScope, hashed: str, action: Callable[[], tuple[int, Any]],
        dumps: Callable[[Any], str], *, wait_seconds: float = keys.DEFAULT_WAIT_SECONDS) -> tuple[int, Any, bool]:
    """Reserve, act, complete: (status, body, replayed). The action runs at most once per key; when it raises,
    the reservation is released and the error propagates."""
    taken = keys.reserve(db, scope, hashed, wait_seconds=wait_seconds)
    if isinstance(taken, keys.Stored):
        return taken.status, taken.body, True
    with _released_on_failure(db, taken):
        status, body = action()
    keys.complete(db, taken, status, dumps(body))
    return status, body, False


@contextlib.contextmanager
def _released_on_failure(db: Database, reservation: keys.Reservation) -> Iterator[None]:
    """Give the key back when the block raises (nothing is stored for a failed request); the error propagates."""
    try:
        yield
    except BaseException:
        try:
            keys.release(db, reservation)
        except Exception:  # the action's error is the one to report; the lease frees the key later
            log.exception("could not release an idempotency reservation")
        raise


def run_in_transaction(db: Database, scope: keys.KeyScope, hashed: str, action: Callable[[Tx], tuple[int, Any]],
                       dumps: Callable[[Any], str], *,
                       wait_seconds: float = keys.DEFAULT_WAIT_SECONDS) -> tuple[int, Any, bool]:
    """`run` for an action whose writes are one transaction (given to it): its answer is stored in that same
    transaction, so the action and the record commit together. A crash or an outage between them can no longer
    leave the action done and the key free, which made a retry with the key run it again once the reservation's
    lease ran out. When the reservation was taken over meanwhile, the action is rolled back (IDEMPOTENCY_IN_PROGRESS:
    the request that took it over runs it)."""
    taken = keys.reserve(db, scope, hashed, wait_seconds=wait_seconds)
    if isinstance(taken, keys.Stored):
        return taken.status, taken.body, True
    with _released_on_failure(db, taken), db.transaction() as tx:
        status, body = action(tx)
        if not keys.complete_in(tx, taken, status, dumps(body), now=datetime.now(UTC)):
            raise keys.InProgressError("another request with this idempotency key took it over; retry later",
                                  idempotencyKey=scope.key, retryAfterSeconds=1)
    return status, body, False
