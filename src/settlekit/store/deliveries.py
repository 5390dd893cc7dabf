"""Destinations and deliveries repository (spec 06 §1-2, §4-5, §7) over the shared `Tx` interface.

Rows in, rows out: the rules (which destinations an artifact goes to, quotas, delivery keys, retry policy,
signing) live in `settlekit.delivery`. Timestamps come from the caller's clock (`now` arguments) so both backends
and tests agree; SQLite stores them as ISO-8601 UTC text with milliseconds (string order = time order),
PostgreSQL as TIMESTAMPTZ (`store.sql.timestamp`).
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any, Final

from settlekit.errors import ConflictError, NotFoundError, ValidationError
from settlekit.events.canonical import iso_millis
from settlekit.store.database import Tx
from settlekit.store.sql import and_where, fragment, from_timestamp, statements, timestamp


def db_time(tx: Tx, dt: datetime) -> Any:
    """A timestamp parameter for this transaction's dialect."""
    return timestamp(tx.dialect, dt)


@dataclass(frozen=True)
class Circuit:
    """A destination's circuit breaker: timeouts (and connection failures) in a row, how many times in a row it
    opened, and until when it is open (None: closed; in the past: half-open, probing)."""

    failures: int = 0
    opens: int = 0
    open_until: datetime | None = None


@dataclass(frozen=True)
class Destination:
    tenant_id: str
    destination_id: str
    url: str
    secret_ref: str
    signing: str = "standard"
    artifact_types: tuple[str, ...] | None = None
    ordering: str = "best_effort"
    allow_private_network: bool = False
    status: str = "active"
    disabled_reason: str | None = None
    kind: str = "webhook"
    previous_secret_ref: str | None = None  # a rotated-out secret, still signing until the time below
    previous_secret_expires_at: datetime | None = None
    circuit: Circuit = Circuit()

    def accepts(self, artifact_type: str) -> bool:
        return not self.artifact_types or artifact_type in self.artifact_types

    @property
    def public_secret_ref(self) -> str:
        """`secret_ref` safe to show: inline secrets are redacted (file paths and env names are not secret)."""
        return _redacted(self.secret_ref)

    def to_json(self) -> dict[str, Any]:
        """API/CLI view; never contains a secret value."""
        return {
            "tenant_id": self.tenant_id,
            "destination_id": self.destination_id,
            "kind": self.kind,
            "url": self.url,
            "secret_ref": self.public_secret_ref,
            "signing": self.signing,
            "artifact_types": list(self.artifact_types) if self.artifact_types else None,
            "ordering": self.ordering,
            "allow_private_network": self.allow_private_network,
            "status": self.status,
            "disabled_reason": self.disabled_reason,
            "previous_secret_ref": _redacted(self.previous_secret_ref) if self.previous_secret_ref else None,
            "previous_secret_expires_at": iso_millis(self.previous_secret_expires_at)
            if self.previous_secret_expires_at else None,
            "circuit_failures": self.circuit.failures,
            "circuit_opens": self.circuit.opens,
            "circuit_open_until": iso_millis(self.circuit.open_until) if self.circuit.open_until else None,
        }


def _redacted(ref: str) -> str:
    scheme, _, _ = ref.partition(":")
    return "inline:<redacted>" if scheme == "inline" else ref


_DEST_COLS: Final = (
    "tenant_id, destination_id, url, secret_ref, signing, artifact_types, ordering, allow_private_network,"
    " status, disabled_reason, kind, previous_secret_ref, previous_secret_expires_at, circuit_failures,"
    " circuit_opens, circuit_open_until"
)


def _dest(row: Sequence[Any]) -> Destination:
    types = json.loads(row[5]) if row[5] else None
    return Destination(
        tenant_id=row[0],
        destination_id=row[1],
        url=row[2],
        secret_ref=row[3],
        signing=row[4],
        artifact_types=tuple(types) if types else None,
        ordering=row[6],
        allow_private_network=bool(row[7]),
        status=row[8],
        disabled_reason=row[9],
        kind=row[10],
        previous_secret_ref=row[11],
        previous_secret_expires_at=from_timestamp(row[12]),
        circuit=Circuit(int(row[13]), int(row[14]), from_timestamp(row[15])),
    )


@dataclass(frozen=True)
class DeliveryKeys:
    """The keys derived for one (destination, artifact) delivery (`settlekit.delivery.message` computes them)."""

    dedupe_key: str
    message_id: str
    scope_key: str
    order_seq: int
    priority: int
    order_key: str


@dataclass(frozen=True)
class NewDelivery(DeliveryKeys):
    """A delivery row to create: its keys and what it delivers."""

    tenant_id: str
    destination_id: str
    artifact_type: str
    artifact_id: str
    artifact_hash: str


@dataclass(frozen=True)
class Delivery(NewDelivery):
    """A stored delivery row."""

    id: int
    state: str
    attempts: int
    next_attempt_at: datetime | None
    lease_owner: str | None
    lease_expires_at: datetime | None
    last_status: int | None
    last_error: str | None
    delivered_at: datetime | None
    created_at: datetime | None = None
    updated_at: datetime | None = None
    claims: int = 0  # claims since the last recorded outcome (crash-loop guard)
    attempt_base: int = 0  # attempts logged before the last requeue or replay (the log numbers on from it)

    @property
    def next_log_attempt(self) -> int:
        """The number the attempt being made gets in the attempt log (unique across requeues and replays)."""
        return self.attempt_base + self.attempts + 1

    def to_json(self) -> dict[str, Any]:
        """API/CLI view (timestamps as ISO-8601 UTC)."""
        out: dict[str, Any] = {}
        for name in _DELIVERY_FIELDS:
            value = getattr(self, name)
            out[name] = iso_millis(value) if isinstance(value, datetime) else value
        return out


_DLV_COLS: Final = (
    "id, tenant_id, destination_id, artifact_type, artifact_id, artifact_hash, dedupe_key, message_id,"
    " scope_key, order_seq, priority, order_key, state, attempts, next_attempt_at, lease_owner,"
    " lease_expires_at, last_status, last_error, delivered_at, created_at, updated_at, claims, attempt_base"
)
# the API/CLI key order (attempt_base is bookkeeping of the attempt log, not shown)
_DELIVERY_FIELDS: Final = tuple(name.strip() for name in _DLV_COLS.split(",") if name.strip() != "attempt_base")


def _dlv(row: Sequence[Any]) -> Delivery:
    return Delivery(
        id=int(row[0]),
        tenant_id=row[1],
        destination_id=row[2],
        artifact_type=row[3],
        artifact_id=row[4],
        artifact_hash=row[5],
        dedupe_key=row[6],
        message_id=row[7],
        scope_key=row[8],
        order_seq=int(row[9]),
        priority=int(row[10]),
        order_key=row[11],
        state=row[12],
        attempts=int(row[13]),
        next_attempt_at=from_timestamp(row[14]),
        lease_owner=row[15],
        lease_expires_at=from_timestamp(row[16]),
        last_status=row[17],
        last_error=row[18],
        delivered_at=from_timestamp(row[19]),
        created_at=from_timestamp(row[20]),
        updated_at=from_timestamp(row[21]),
        claims=int(row[22]),
        attempt_base=int(row[23]),
    )


# --- destinations -------------------------------------------------------------------------------------------


def put_destination(tx: Tx, dest: Destination, *, now: datetime) -> None:
    """Insert or replace a destination; the caller checks its fields, URL (SSRF guard) and secret_ref."""
    types = json.dumps(sorted(dest.artifact_types)) if dest.artifact_types else None
    ts = db_time(tx, now)
    tx.execute(
        statements("deliveries", tx.dialect)["put_destination"],
        (
            dest.tenant_id,
            dest.destination_id,
            dest.kind,
            dest.url,
            dest.secret_ref,
            dest.signing,
            types,
            dest.ordering,
            dest.allow_private_network,
            dest.status,
            dest.disabled_reason,
            dest.previous_secret_ref,
            db_time(tx, dest.previous_secret_expires_at) if dest.previous_secret_expires_at else None,
            ts,
            ts,
        ),
    )


def get_destination(tx: Tx, tenant_id: str, destination_id: str, *, lock: bool = False) -> Destination | None:
    """The destination; with `lock`, its row stays locked until the transaction ends (PostgreSQL)."""
    row = tx.fetchone(
        f"SELECT {_DEST_COLS} FROM destinations WHERE tenant_id = ? AND destination_id = ?"
        + (f" {fragment(tx.dialect, 'row_lock')}" if lock else ""),
        (tenant_id, destination_id),
    )
    return _dest(row) if row else None


def list_destinations(tx: Tx, tenant_id: str, *, active_only: bool = False) -> list[Destination]:
    sql = f"SELECT {_DEST_COLS} FROM destinations WHERE tenant_id = ?"
    if active_only:
        sql += " AND status = 'active'"
    return [_dest(r) for r in tx.fetchall(sql + " ORDER BY destination_id", (tenant_id,))]


def set_destination_status(
    tx: Tx, tenant_id: str, destination_id: str, *, status: str, reason: str | None, now: datetime
) -> None:
    ts = db_time(tx, now)
    # enabling also forgets the failure streak and closes the circuit, so the destination starts afresh
    streak = (", failure_streak = 0, failing_since = NULL, circuit_failures = 0, circuit_opens = 0,"
              " circuit_open_until = NULL, enabled_at = ?") if status == "active" else ""
    n = tx.execute(
        f"UPDATE destinations SET status = ?, disabled_reason = ?, disabled_at = ?, updated_at = ?{streak}"
        " WHERE tenant_id = ? AND destination_id = ?",
        (status, reason, ts if status == "disabled" else None, ts, *([ts] if status == "active" else []),
         tenant_id, destination_id),
    )
    if n == 0:
        raise NotFoundError("destination not found", tenant_id=tenant_id, destination_id=destination_id)


def lock_destinations(tx: Tx, keys: Iterable[tuple[str, str]]) -> None:
    """Lock the rows of these (tenant id, destination id) until the transaction ends, in one order whatever the
    caller's (one statement, rows locked in its sort order): two transactions that go on to update the same
    destinations (failure streaks, circuits, a 410's disable) in different orders then never wait for each other
    in a cycle. Nothing on SQLite, whose writers take turns."""
    lock = fragment(tx.dialect, "row_lock")
    wanted = sorted(set(keys))
    if not lock or not wanted:
        return
    pairs = " OR ".join("(tenant_id = ? AND destination_id = ?)" for _ in wanted)
    tx.fetchall(f"SELECT 1 FROM destinations WHERE {pairs} ORDER BY tenant_id, destination_id {lock}",
                [v for key in wanted for v in key])


def disable_if_active(tx: Tx, tenant_id: str, destination_id: str, *, reason: str, now: datetime) -> bool:
    """Disable an active destination; False when it was already disabled (or is unknown). The row lock taken
    here orders concurrent disablers: exactly one of them sees it active."""
    ts = db_time(tx, now)
    n = tx.execute(
        statements("deliveries", tx.dialect)["disable_if_active"],
        (reason, ts, ts, tenant_id, destination_id),
    )
    return n == 1


# --- deliveries ---------------------------------------------------------------------------------------------


def count_pending(tx: Tx, tenant_id: str) -> int:
    """Pending deliveries of a tenant."""
    return int(tx.scalar(statements("deliveries", tx.dialect)["count_pending"], (tenant_id,)))


def insert_delivery(tx: Tx, row: NewDelivery, *, now: datetime) -> int:
    """Create a pending delivery due at `now`; 0 when the tenant already has one with its dedupe key."""
    ts = db_time(tx, now)
    return tx.execute(
        statements("deliveries", tx.dialect)["insert_delivery"],
        (
            row.tenant_id,
            row.destination_id,
            row.artifact_type,
            row.artifact_id,
            row.artifact_hash,
            row.dedupe_key,
            row.message_id,
            row.scope_key,
            row.order_seq,
            row.priority,
            row.order_key,
            ts,
            ts,
            ts,
        ),
    )


def claim(tx: Tx, *, worker: str, limit: int, lease: timedelta, now: datetime) -> list[Delivery]:
    """Lease up to `limit` due deliveries of every tenant, oldest first, through the delivery worker's two steps
    (`due_per_destination`, then `claim_ids`; the worker deals them fairly between tenants instead, in
    `settlekit.delivery.fairness`). On PostgreSQL rows a concurrent claim holds are skipped.

    A claim does not count an attempt: `attempts` grows when an outcome is recorded (`_finish`), so a worker
    that dies mid-send costs the delivery no attempt. The attempt being made is `attempts + 1`.

    Every claim adds one to `claims` (reset by a recorded outcome, taken back by `release`). A due delivery
    claimed before without an outcome (its worker died or lost the lease) is claimed alone, so a delivery that
    crashes its worker cannot take a batch of others down with it; the caller dead-letters it once `claims`
    passes its limit."""
    due = due_per_destination(tx, per_destination=limit, now=now)
    before = [d for d in due if d.claims > 0]
    picks = sorted(before or due, key=lambda d: (d.next_attempt_at, d.id))[:1 if before else limit]
    out = claim_ids(tx, [p.id for p in picks], worker=worker, lease=lease, now=now)
    out.sort(key=lambda d: (d.next_attempt_at or now, d.scope_key, d.order_seq, d.priority, d.id))
    return out


def _qualified(table: str) -> str:
    return ", ".join(f"{table}.{c.strip()}" for c in _DLV_COLS.split(","))


def get_delivery(tx: Tx, delivery_id: int) -> Delivery | None:
    row = tx.fetchone(f"SELECT {_DLV_COLS} FROM deliveries WHERE id = ?", (delivery_id,))
    return _dlv(row) if row else None


def list_deliveries(
    tx: Tx,
    tenant_id: str,
    *,
    state: str | None = None,
    destination_id: str | None = None,
    limit: int = 1000,
    after_id: int | None = None,
) -> list[Delivery]:
    """Deliveries of a tenant in id order; `after_id` pages (keyset)."""
    sql = f"SELECT {_DLV_COLS} FROM deliveries WHERE tenant_id = ?"
    params: list[Any] = [tenant_id]
    sql = and_where(sql, params, [("id > ?", after_id), ("state = ?", state), ("destination_id = ?", destination_id)])
    return [_dlv(r) for r in tx.fetchall(sql + " ORDER BY id LIMIT ?", (*params, limit))]


def deliveries_of_artifacts(tx: Tx, tenant_id: str, artifact_ids: Sequence[str]) -> list[Delivery]:
    """The tenant's deliveries of the given artifacts, in id order."""
    ids = sorted(set(artifact_ids))
    if not ids:
        return []
    marks = ",".join("?" for _ in ids)
    return [_dlv(r) for r in tx.fetchall(
        f"SELECT {_DLV_COLS} FROM deliveries WHERE tenant_id = ? AND artifact_id IN ({marks}) ORDER BY id",
        (tenant_id, *ids))]


def latest_deliveries(tx: Tx, tenant_id: str, destination_id: str, *, before_id: int | None,
                      limit: int) -> list[Delivery]:
    """A destination's deliveries, newest first; `before_id` pages (keyset: the last id of the previous page)."""
    sql = f"SELECT {_DLV_COLS} FROM deliveries WHERE tenant_id = ? AND destination_id = ?"
    params: list[Any] = [tenant_id, destination_id]
    sql = and_where(sql, params, [("id < ?", before_id)])
    return [_dlv(r) for r in tx.fetchall(sql + " ORDER BY id DESC LIMIT ?", (*params, limit))]


def record_attempt(
    tx: Tx,
    delivery_id: int,
    attempt: int,
    *,
    started_at: datetime,
    duration_ms: float,
    http_status: int | None,
    error: str | None,
    response_snippet: str | None,
) -> None:
    tx.execute(
        statements("deliveries", tx.dialect)["record_attempt"],
        (delivery_id, attempt, db_time(tx, started_at), duration_ms, http_status, error, response_snippet),
    )


def list_attempts(tx: Tx, delivery_id: int) -> list[tuple[int, int | None, str | None]]:
    """(attempt, http_status, error) rows in attempt order."""
    rows = tx.fetchall(
        statements("deliveries", tx.dialect)["list_attempts"],
        (delivery_id,),
    )
    return [(int(r[0]), r[1], r[2]) for r in rows]


def renew_leases(
    tx: Tx, delivery_ids: Sequence[int], worker: str, *, lease: timedelta, now: datetime
) -> int:
    """Extend the leases `worker` still holds on these rows to `now + lease` (sends in flight); returns how
    many it still held."""
    if not delivery_ids:
        return 0
    marks = ", ".join("?" * len(delivery_ids))
    lock = fragment(tx.dialect, "claim_lock")
    if not lock:  # SQLite: writers take turns
        return tx.execute(
            f"UPDATE deliveries SET lease_expires_at = ? WHERE id IN ({marks}) AND lease_owner = ?"
            " AND state = 'pending'", (db_time(tx, now + lease), *delivery_ids, worker))
    # rows a completion holds are being recorded (no renewal needed): skipped, so the two never wait on each other
    return tx.execute(
        f"WITH r AS (SELECT d.id FROM deliveries d WHERE d.id IN ({marks}) AND d.lease_owner = ?"
        f" AND d.state = 'pending' ORDER BY d.id {lock})"
        " UPDATE deliveries SET lease_expires_at = ? FROM r WHERE deliveries.id = r.id",
        (*delivery_ids, worker, db_time(tx, now + lease)),
    )


def _finish(tx: Tx, delivery_id: int, worker: str, sets: str, params: Sequence[Any]) -> bool:
    """Apply a completion only while `worker` still holds the lease; False when the lease was lost.
    Every recorded outcome counts one attempt."""
    n = tx.execute(
        f"UPDATE deliveries SET {sets}, attempts = attempts + 1, claims = 0, lease_owner = NULL,"
        " lease_expires_at = NULL, updated_at = ? WHERE id = ? AND lease_owner = ? AND state = 'pending'",
        (*params, delivery_id, worker),
    )
    return n == 1


def mark_delivered(
    tx: Tx, delivery_id: int, worker: str, *, status: int, now: datetime, retention: timedelta
) -> bool:
    ts = db_time(tx, now)
    return _finish(
        tx,
        delivery_id,
        worker,
        "state = 'delivered', delivered_at = ?, last_status = ?, last_error = NULL, expires_at = ?",
        (ts, status, db_time(tx, now + retention), ts),
    )


def mark_retry(
    tx: Tx,
    delivery_id: int,
    worker: str,
    *,
    status: int | None,
    error: str,
    next_attempt_at: datetime,
    now: datetime,
) -> bool:
    return _finish(
        tx,
        delivery_id,
        worker,
        "next_attempt_at = ?, last_status = ?, last_error = ?",
        (db_time(tx, next_attempt_at), status, error, db_time(tx, now)),
    )


def mark_held(
    tx: Tx, delivery_id: int, worker: str, *, status: int | None, error: str, now: datetime
) -> bool:
    """An outcome that leaves the delivery pending and due (its destination was disabled under it): the
    attempt is recorded, the lease released, the schedule unchanged."""
    return _finish(
        tx,
        delivery_id,
        worker,
        "last_status = ?, last_error = ?",
        (status, error, db_time(tx, now)),
    )


def mark_failed(
    tx: Tx,
    delivery_id: int,
    worker: str,
    *,
    status: int | None,
    error: str,
    now: datetime,
    retention: timedelta,
) -> bool:
    return _finish(
        tx,
        delivery_id,
        worker,
        "state = 'failed', last_status = ?, last_error = ?, expires_at = ?",
        (status, error, db_time(tx, now + retention), db_time(tx, now)),
    )


# back to pending, due at the first `?`, attempts counted afresh (the attempt log numbers on), the same message id
REQUEUE_SET: Final = (
    "UPDATE deliveries SET state = 'pending', attempt_base = attempt_base + attempts, attempts = 0, claims = 0,"
    " next_attempt_at = ?, acked_at = NULL,"
    " lease_owner = NULL, lease_expires_at = NULL, expires_at = NULL, updated_at = ?"
)


def requeue(
    tx: Tx,
    tenant_id: str,
    *,
    delivery_id: int | None = None,
    destination_id: str | None = None,
    now: datetime,
) -> int:
    """Ops: failed → pending with attempts reset (same message id). Returns rows requeued."""
    if delivery_id is None and destination_id is None:
        raise ValidationError("requeue needs a delivery id or a destination id")
    sql = f"{REQUEUE_SET} WHERE tenant_id = ? AND state = 'failed'"
    ts = db_time(tx, now)
    params: list[Any] = [ts, ts, tenant_id]
    sql = and_where(sql, params, [("id = ?", delivery_id), ("destination_id = ?", destination_id)])
    n = tx.execute(sql, params)
    if delivery_id is not None and n == 0:
        current = get_delivery(tx, delivery_id)
        if current is None or current.tenant_id != tenant_id:
            raise NotFoundError("delivery not found", delivery_id=delivery_id)
        raise ConflictError(
            "only failed deliveries can be requeued", delivery_id=delivery_id, state=current.state
        )
    return n


def cleanup_expired(tx: Tx, *, now: datetime, limit: int = 10000) -> int:
    """Delete delivered/failed rows past their retention (attempt logs cascade). The expiry is checked again on
    the row deleted: a row a concurrent requeue made pending meanwhile is re-read by PostgreSQL after its lock,
    and only the outer condition is checked on that newer version."""
    cutoff = db_time(tx, now)
    return tx.execute(
        statements("deliveries", tx.dialect)["cleanup_expired"],
        (cutoff, limit, cutoff),
    )


def pending_counts(tx: Tx) -> dict[str, int]:
    """Rows per state over all tenants (for the `settlekit_deliveries_pending{state}` gauge)."""
    rows = tx.fetchall(statements("deliveries", tx.dialect)["pending_counts"])
    return {str(r[0]): int(r[1]) for r in rows}


def oldest_pending_created_at(tx: Tx) -> datetime | None:
    """Creation time of the oldest pending delivery (all tenants), for the oldest-pending gauge."""
    return from_timestamp(tx.scalar(statements("deliveries", tx.dialect)["oldest_pending_created_at"]))


def count_due(tx: Tx, *, now: datetime) -> int:
    """Pending deliveries a worker could claim now if no lease were held (all tenants; strict ordering, disabled
    destinations and open circuits respected). Zero means the queue is drained for the moment."""
    ts = db_time(tx, now)
    return int(tx.scalar(statements("deliveries", tx.dialect)["count_due"], (ts, ts)))


@dataclass(frozen=True)
class DueDelivery:
    """A due, unleased delivery as the fair claim sees it: whose it is, in which order, and whether its
    destination's circuit is half-open (a probe: one request at a time)."""

    tenant_id: str
    destination_id: str
    probing: bool
    id: int
    next_attempt_at: datetime
    claims: int


def due_per_destination(tx: Tx, *, per_destination: int, now: datetime) -> list[DueDelivery]:
    """The first `per_destination` due, unleased deliveries of every active destination whose circuit is not
    open, each destination's in claim order (strict per-scope ordering respected). Costs one index probe per
    active destination, whatever the backlog."""
    ts = db_time(tx, now)
    rows = tx.fetchall(statements("deliveries", tx.dialect)["due_per_destination"], (ts, ts, per_destination, ts))
    return [DueDelivery(r[0], r[1], bool(r[2]), int(r[3]), from_timestamp(r[4]) or now, int(r[5])) for r in rows]


_STILL_DUE: Final = (  # the due rule of due_per_destination, checked again on the rows claimed
    " AND d.state = 'pending' AND d.next_attempt_at <= ? AND EXISTS (SELECT 1 FROM destinations t"
    " WHERE t.tenant_id = d.tenant_id AND t.destination_id = d.destination_id AND t.status = 'active'"
    " AND (t.circuit_open_until IS NULL OR t.circuit_open_until <= ?)"
    " AND (t.ordering <> 'strict_scope' OR NOT EXISTS (SELECT 1 FROM deliveries e"
    " WHERE e.tenant_id = d.tenant_id AND e.destination_id = d.destination_id AND e.scope_key = d.scope_key"
    " AND e.state = 'pending' AND (e.order_seq, e.priority, e.id) < (d.order_seq, d.priority, d.id))))"
)


def claim_ids(tx: Tx, ids: Sequence[int], *, worker: str, lease: timedelta, now: datetime) -> list[Delivery]:
    """Lease these deliveries to `worker` where they are still due and unleased: what the read that chose them saw
    may have changed (another worker sent one and scheduled its retry, the destination was disabled or its circuit
    opened, an earlier delivery of a strict scope became pending again): such a row is left out. PostgreSQL skips
    rows locked by a concurrent claim. Counts one claim each."""
    if not ids:
        return []
    ts, until = db_time(tx, now), db_time(tx, now + lease)
    marks = ", ".join("?" * len(ids))
    lock = fragment(tx.dialect, "claim_lock")
    rows = tx.fetchall(
        f"WITH c AS (SELECT d.id FROM deliveries d WHERE d.id IN ({marks}){_STILL_DUE}"
        f" AND (d.lease_expires_at IS NULL OR d.lease_expires_at < ?){' ' + lock if lock else ''})"
        " UPDATE deliveries SET lease_owner = ?, lease_expires_at = ?, claims = deliveries.claims + 1,"
        f" updated_at = ? FROM c WHERE deliveries.id = c.id RETURNING {_qualified('deliveries')}",
        (*ids, ts, ts, ts, worker, until, ts),
    )
    return [_dlv(r) for r in rows]


# --- circuit breaker ----------------------------------------------------------------------------------------


def get_circuit(tx: Tx, tenant_id: str, destination_id: str) -> Circuit | None:
    row = tx.fetchone(statements("deliveries", tx.dialect)["get_circuit"], (tenant_id, destination_id))
    return None if row is None else Circuit(int(row[0]), int(row[1]), from_timestamp(row[2]))


def set_circuit(tx: Tx, tenant_id: str, destination_id: str, circuit: Circuit) -> None:
    tx.execute(statements("deliveries", tx.dialect)["set_circuit"],
               (circuit.failures, circuit.opens,
                db_time(tx, circuit.open_until) if circuit.open_until is not None else None,
                tenant_id, destination_id))


def release(tx: Tx, delivery_ids: Sequence[int], worker: str, *, now: datetime) -> int:
    """Hand claimed but unsent deliveries back (graceful shutdown, destination gone): lease cleared, no
    attempt counted, the claim taken back (no crash happened)."""
    if not delivery_ids:
        return 0
    marks = ", ".join("?" * len(delivery_ids))
    return tx.execute(
        "UPDATE deliveries SET lease_owner = NULL, lease_expires_at = NULL,"
        " claims = CASE WHEN claims > 0 THEN claims - 1 ELSE 0 END, updated_at = ?"
        f" WHERE id IN ({marks}) AND lease_owner = ? AND state = 'pending'",
        (db_time(tx, now), *delivery_ids, worker),
    )


# --- backfill (a destination enabled again) ------------------------------------------------------------------


def destination_disabled_at(tx: Tx, tenant_id: str, destination_id: str) -> datetime | None:
    """When the destination was disabled (None when active or unknown)."""
    return from_timestamp(
        tx.scalar(
            statements("deliveries", tx.dialect)["destination_disabled_at"],
            (tenant_id, destination_id),
        )
    )


def destination_active_since(tx: Tx, tenant_id: str, destination_id: str) -> datetime | None:
    """When the destination was last enabled, else first saved (None when unknown)."""
    row = tx.fetchone(statements("deliveries", tx.dialect)["destination_active_since"],
                      (tenant_id, destination_id))
    return None if row is None else from_timestamp(row[0] if row[0] is not None else row[1])


def _missing_sql(dest: Destination) -> tuple[str, list[Any]]:
    """Artifacts of `dest`'s tenant created at or after a bound parameter (first `?`) that the destination
    accepts and has no delivery row for (the dedupe key, `tenant:destination:type:id:hash` as
    `settlekit.delivery.message.dedupe_key` builds it, matches the unique index)."""
    sql = (
        " FROM artifacts a WHERE a.tenant_id = ? AND a.created_at >= ?"
        " AND NOT EXISTS (SELECT 1 FROM deliveries d WHERE d.tenant_id = a.tenant_id AND d.dedupe_key ="
        " a.tenant_id || ':' || ? || ':' || a.artifact_type || ':' || a.artifact_id || ':' || a.artifact_hash)"
    )
    params: list[Any] = [dest.tenant_id, None, dest.destination_id]
    if dest.artifact_types:
        sql += f" AND a.artifact_type IN ({', '.join('?' * len(dest.artifact_types))})"
        params.extend(dest.artifact_types)
    return sql, params


def count_missing(tx: Tx, dest: Destination, *, since: datetime) -> int:
    """How many artifacts built at or after `since` have no delivery to `dest`."""
    sql, params = _missing_sql(dest)
    params[1] = db_time(tx, since)
    return int(tx.scalar(f"SELECT count(*){sql}", params))


@dataclass(frozen=True)
class MissingArtifact:
    artifact_id: str
    artifact_type: str
    artifact_hash: str
    job_id: str
    job_version: int


def missing_artifacts(
    tx: Tx, dest: Destination, *, since: datetime, after: str = "", limit: int = 500
) -> list[MissingArtifact]:
    """One page, in artifact id order after `after`, of the artifacts built at or after `since` that have no
    delivery to `dest`."""
    sql, params = _missing_sql(dest)
    params[1] = db_time(tx, since)
    rows = tx.fetchall(
        f"SELECT a.artifact_id, a.artifact_type, a.artifact_hash, a.job_id, a.job_version{sql}"
        " AND a.artifact_id > ? ORDER BY a.artifact_id LIMIT ?",
        (*params, after, limit),
    )
    return [MissingArtifact(str(r[0]), r[1], r[2], r[3], int(r[4])) for r in rows]


def requeue_failed_with_error(
    tx: Tx, tenant_id: str, destination_id: str, *, error: str, now: datetime, since: datetime | None = None
) -> int:
    """Requeue the deliveries of a destination that failed with `last_error = error` (and, given `since`, were
    last updated at or after it): failed → pending, attempts reset, due now, same message id."""
    ts = db_time(tx, now)
    sql = f"{REQUEUE_SET} WHERE tenant_id = ? AND destination_id = ? AND state = 'failed' AND last_error = ?"
    params: list[Any] = [ts, ts, tenant_id, destination_id, error]
    if since is not None:
        sql += " AND updated_at >= ?"
        params.append(db_time(tx, since))
    return tx.execute(sql, params)


def requeue_gone(tx: Tx, tenant_id: str, destination_id: str, *, since: datetime, now: datetime) -> int:
    """Requeue the deliveries of a destination that failed with `gone` at or after `since` (the one whose
    410 disabled it): failed → pending, attempts reset, same message id."""
    return requeue_failed_with_error(tx, tenant_id, destination_id, error="gone", now=now, since=since)


# --- secret references (rotation clean-up, legacy migration) ----------------------------------------------------

_SECRET_REF_COLUMNS: Final = ("secret_ref", "previous_secret_ref")


def end_expired_rotations(tx: Tx, tenant_id: str, *, now: datetime) -> int:
    """Forget the tenant's rotated-out secrets whose grace period is over at `now`."""
    return tx.execute(
        statements("deliveries", tx.dialect)["end_expired_rotations"],
        (tenant_id, db_time(tx, now)),
    )


def secret_refs(tx: Tx, tenant_id: str) -> list[tuple[str, str | None]]:
    """(secret_ref, previous_secret_ref) of every destination of the tenant."""
    return [(r[0], r[1]) for r in tx.fetchall(
        statements("deliveries", tx.dialect)["secret_refs"], (tenant_id,))]


def destinations_with_ref_scheme(tx: Tx, scheme: str) -> list[tuple[str, str, str, str, str | None]]:
    """(tenant_id, destination_id, signing, secret_ref, previous_secret_ref) of every destination, all tenants,
    whose current or previous secret reference starts with `scheme:`, in (tenant, destination) order."""
    if not scheme.isalpha():
        raise ValidationError(f"not a secret reference scheme: {scheme!r}", field="scheme")
    rows = tx.fetchall(
        statements("deliveries", tx.dialect)["destinations_with_ref_scheme"],
        (f"{scheme}:%", f"{scheme}:%"),
    )
    return [(r[0], r[1], r[2], r[3], r[4]) for r in rows]


def replace_secret_ref(
    tx: Tx, tenant_id: str, destination_id: str, column: str, *, old: str, new: str, now: datetime
) -> int:
    """Set `column` (secret_ref or previous_secret_ref) to `new` where it still holds `old`; rows changed."""
    if column not in _SECRET_REF_COLUMNS:
        raise ValidationError(f"not a secret reference column: {column!r}", field="column")
    return tx.execute(
        f"UPDATE destinations SET {column} = ?, updated_at = ? WHERE tenant_id = ?"
        f" AND destination_id = ? AND {column} = ?",
        (new, db_time(tx, now), tenant_id, destination_id, old),
    )
