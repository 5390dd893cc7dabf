"""Idempotency keys for every write (spec 01 §9): one row per (tenant, principal, "METHOD path", key).

A key is reserved before its action runs, so two concurrent identical requests never both act:

- Event appends reserve and complete the key inside the append transaction (`record`): the row commits
  atomically with the events, and a concurrent append with the same key waits on the key's unique index, then
  finds the committed row and replays it (`settlekit.append.Appender.append`).
- Every other write runs `settlekit.application.idempotency.run`: `reserve` commits a pending row (status_code
  0, `response_json` holding the reservation token, `expires_at` its lease), the action runs, `complete` stores
  the answer (or `release` deletes the reservation when the action failed, so the key can be retried). A
  concurrent identical request waits for the answer and replays it; after `wait_seconds` it gets 409
  IDEMPOTENCY_IN_PROGRESS. A reservation whose lease ran out (its process died) is taken over.

The same key with a different request (method, path, query, body, precondition header) is 409
IDEMPOTENCY_CONFLICT. Only successful answers are stored; a replay carries `Idempotent-Replayed: true`.
"""

from __future__ import annotations

import logging
import secrets
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

from settlekit.errors import ConflictError
from settlekit.events.canonical import canonical_hash, parse_json
from settlekit.store.database import Database, Tx
from settlekit.store.sql import statements, timestamp

log = logging.getLogger("settlekit.idempotency")

TTL_DAYS = 30
PENDING = 0  # status_code of a reservation whose action is still running
DEFAULT_LEASE = timedelta(seconds=60)
DEFAULT_WAIT_SECONDS = 15.0
_POLL_SECONDS = 0.02


def request_hash(method: str, path: str, body: Any, expected_prev_chain_hash: Any = None) -> str:
    """sha256 of canonical({method, path, expectedPrevChainHash, body}); `path` includes the query string."""
    return canonical_hash({"method": method, "path": path, "expectedPrevChainHash": expected_prev_chain_hash,
                           "body": body})


@dataclass(frozen=True)
class KeyScope:
    tenant_id: str
    principal_id: str
    endpoint: str
    key: str

    @property
    def params(self) -> tuple[str, str, str, str]:
        return (self.tenant_id, self.principal_id, self.endpoint, self.key)


@dataclass(frozen=True)
class Stored:
    """A completed request's answer."""

    status: int
    body: Any


@dataclass(frozen=True)
class Reservation:
    scope: KeyScope
    request_hash: str
    token: str


class InProgressError(ConflictError):
    code = "IDEMPOTENCY_IN_PROGRESS"


def _conflict(scope: KeyScope, code: str) -> ConflictError:
    return ConflictError("idempotency key was used with a different request", code=code, idempotencyKey=scope.key)


def _utc(value: Any) -> datetime | None:
    if value is None:
        return None
    if isinstance(value, datetime):
        return value.astimezone(UTC)
    parsed = datetime.fromisoformat(str(value).replace("Z", "+00:00"))
    return parsed if parsed.tzinfo else parsed.replace(tzinfo=UTC)


def _expires(tx: Tx, when: datetime) -> Any:
    return timestamp(tx.dialect, when)


def _read(tx: Tx, scope: KeyScope) -> tuple[str, int, str, Any] | None:
    row = tx.fetchone(statements("idempotency", tx.dialect)["read"], scope.params)
    return None if row is None else (row[0], int(row[1]), row[2], row[3])


def find(tx: Tx, scope: KeyScope, hashed: str, *, conflict_code: str = "IDEMPOTENCY_CONFLICT",
         also: tuple[str, ...] = ()) -> Stored | None:
    """The stored answer for a completed key; None when the key is unused or reserved (in progress).
    ConflictError when the key was used with a different request (`also`: other hashes of the same request)."""
    row = _read(tx, scope)
    if row is None:
        return None
    if row[0] != hashed and row[0] not in also:
        raise _conflict(scope, conflict_code)
    if row[1] == PENDING:
        return None
    return Stored(row[1], parse_json(row[2]))


def record(tx: Tx, scope: KeyScope, hashed: str, status: int, response_json: str, *,
           now: datetime | None = None, ttl_days: int = TTL_DAYS) -> None:
    """Store a completed answer inside the caller's transaction (the unique key makes a concurrent identical
    request wait for this transaction, then fail with a unique violation and replay)."""
    now = now or datetime.now(UTC)
    expires = _expires(tx, now + timedelta(days=ttl_days)) if ttl_days > 0 else None
    tx.execute(statements("idempotency", tx.dialect)["record"],
               (*scope.params, hashed, status, response_json, expires))


def reserve(db: Database, scope: KeyScope, hashed: str, *, lease: timedelta = DEFAULT_LEASE,
            wait_seconds: float = DEFAULT_WAIT_SECONDS,
            clock: Callable[[], datetime] = lambda: datetime.now(UTC)) -> Reservation | Stored:
    """Take the key (a committed pending row) or return the stored answer of the completed request.
    Waits up to `wait_seconds` while another request holds the key, then raises InProgressError."""
    deadline = time.monotonic() + wait_seconds
    while True:
        now = clock()
        with db.read() as tx:  # waiting polls with reads: no write lock while another request holds the key
            row = _read(tx, scope)
        if row is not None:
            if row[0] != hashed:
                raise _conflict(scope, "IDEMPOTENCY_CONFLICT")
            if row[1] != PENDING:
                return Stored(row[1], parse_json(row[2]))
        lease_end = _utc(row[3]) if row is not None else None
        if row is None or (lease_end is not None and lease_end <= now):
            taken = _take(db, scope, hashed, lease, now, None if row is None else row[2])
            if taken is not None:
                return taken
            continue  # someone else moved first: look again
        if time.monotonic() >= deadline:
            raise InProgressError("a request with this idempotency key is still in progress; retry later",
                                  idempotencyKey=scope.key, retryAfterSeconds=1)
        time.sleep(_POLL_SECONDS)


def _take(db: Database, scope: KeyScope, hashed: str, lease: timedelta, now: datetime,
          stale_token: str | None) -> Reservation | None:
    """Insert the reservation, or take over the stale one holding `stale_token`; None when another request
    got there first."""
    token = secrets.token_hex(16)
    with db.transaction() as tx:
        if stale_token is None:
            done = tx.execute(
                statements("idempotency", tx.dialect)["take"],
                (*scope.params, hashed, PENDING, token, _expires(tx, now + lease)))
        else:  # the holder died: its lease ran out
            done = tx.execute(statements("idempotency", tx.dialect)["take_over"],
                              (token, _expires(tx, now + lease), *scope.params, PENDING, stale_token))
            if done:
                log.warning("idempotency reservation taken over after its lease ran out",
                            extra={"tenant_id": scope.tenant_id, "endpoint": scope.endpoint})
    return Reservation(scope, hashed, token) if done else None


def complete(db: Database, reservation: Reservation, status: int, response_json: str, *,
             now: datetime | None = None) -> None:
    """Store the answer of a reserved request (only while this reservation still holds the key)."""
    with db.transaction() as tx:
        done = complete_in(tx, reservation, status, response_json, now=now or datetime.now(UTC))
    if not done:
        scope = reservation.scope
        log.warning("idempotency reservation was taken over before the request completed",
                    extra={"tenant_id": scope.tenant_id, "endpoint": scope.endpoint})


def complete_in(tx: Tx, reservation: Reservation, status: int, response_json: str, *, now: datetime) -> bool:
    """`complete` inside the caller's transaction; False when the reservation no longer holds the key."""
    return bool(tx.execute(statements("idempotency", tx.dialect)["complete"],
                           (status, response_json, _expires(tx, now + timedelta(days=TTL_DAYS)),
                            *reservation.scope.params, PENDING, reservation.token)))


def release(db: Database, reservation: Reservation) -> None:
    """Give the key back after the action failed (nothing is stored for a failed request)."""
    with db.transaction() as tx:
        tx.execute(statements("idempotency", tx.dialect)["release"],
                   (*reservation.scope.params, PENDING, reservation.token))


def purge_expired(db: Database, *, now: datetime | None = None) -> int:
    """Delete completed keys past their TTL and reservations past their lease."""
    with db.transaction() as tx:
        return purge_expired_in(tx, now=now or datetime.now(UTC))


def purge_expired_in(tx: Tx, *, now: datetime) -> int:
    """`purge_expired` inside the caller's transaction (the cleanup scheduler runs it with other deletes)."""
    return tx.execute(statements("idempotency", tx.dialect)["purge_expired_in"], (timestamp(tx.dialect, now),))
