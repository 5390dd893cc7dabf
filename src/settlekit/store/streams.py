"""Read queries of the event log: stream heads with their stored state, a stream's events, the global order, and
the job listing (one page of a tenant's job streams, by stream id)."""

from __future__ import annotations

from collections.abc import Collection, Sequence
from dataclasses import dataclass
from typing import Any

from settlekit.errors import NotFoundError
from settlekit.events.canonical import parse_json
from settlekit.events.envelope import Event
from settlekit.store.api_keys import API_KEY_COLUMNS, StoredApiKey, stored_api_key
from settlekit.store.database import Database, Row
from settlekit.store.signer_keys import SIGNER_KEY_COLUMNS, SignerKey
from settlekit.store.sql import and_where, statements

_HEAD_COLUMNS = "stream_id, stream_type, head_seq, head_chain_hash, head_event_id, snapshot_json"
# One row per key found (at least one row): the stream's columns (NULL when there is no stream) beside each key's.
_HEAD_AND_KEYS = (
    "SELECT " + ", ".join(f"s.{c}" for c in _HEAD_COLUMNS.split(", "))
    + ", " + ", ".join(f"k.{c}" for c in SIGNER_KEY_COLUMNS.split(", "))
    + " FROM (SELECT 1 AS one) AS seed"
    " LEFT JOIN streams s ON s.tenant_id = ? AND s.stream_id = ?"
    " LEFT JOIN signer_keys k ON k.tenant_id = ? AND k.key_id IN ({marks})")
# The API key's row beside the stream's and the signer keys' of the key's tenant: one row per signer key found (at
# least one row when the API key exists).
_KEY_HEAD_AND_KEYS = (
    "SELECT " + ", ".join(f"a.{c}" for c in API_KEY_COLUMNS.split(", "))
    + ", " + ", ".join(f"s.{c}" for c in _HEAD_COLUMNS.split(", "))
    + ", " + ", ".join(f"k.{c}" for c in SIGNER_KEY_COLUMNS.split(", "))
    + " FROM api_keys a"
    " LEFT JOIN streams s ON s.tenant_id = a.tenant_id AND s.stream_id = ?"
    " LEFT JOIN signer_keys k ON k.tenant_id = a.tenant_id AND k.key_id IN ({marks})"
    " WHERE a.key_id = ?")


@dataclass(frozen=True)
class StreamRead:
    """A stream read before an append (tenant, stream): its head row (None: no stream) with the stored state still
    as text until `head_and_snapshot()`, and the tenant's registered signer keys among `key_ids`."""

    tenant_id: str
    stream_id: str
    head_row: Row | None
    keys: dict[str, SignerKey]
    key_ids: frozenset[str]

    def head_and_snapshot(self) -> tuple[StreamHead | None, dict[str, Any] | None]:
        return _head_and_snapshot(self.head_row)


@dataclass(frozen=True)
class StreamHead:
    stream_id: str
    stream_type: str
    seq: int
    chain_hash: str
    event_id: str


@dataclass(frozen=True)
class StoredEvent:
    position: int
    tenant_id: str
    stream_id: str
    stream_type: str
    seq: int
    event: Event
    txid: int | None = None

    @property
    def event_id(self) -> str:
        return str(self.event["id"])

    @property
    def type(self) -> str:
        return str(self.event["type"])


@dataclass(frozen=True)
class EventIdentity:
    """Where a stored event sits and what it hashes to (to tell a replay of stored events from a conflict)."""

    event_id: str
    chain_hash: str
    seq: int
    position: int
    stream_id: str
    payload_hash: str


class Streams:
    """Tenant-scoped reads of streams and events on one Database."""

    def __init__(self, db: Database):
        self.db = db

    def head(self, tenant_id: str, stream_id: str) -> StreamHead | None:
        return self.head_and_snapshot(tenant_id, stream_id)[0]

    def snapshot(self, tenant_id: str, stream_id: str) -> dict[str, Any] | None:
        return self.head_and_snapshot(tenant_id, stream_id)[1]

    def head_and_snapshot(self, tenant_id: str, stream_id: str) -> tuple[StreamHead | None, dict[str, Any] | None]:
        """The stream head and its stored state, read together."""
        with self.db.query() as tx:
            row = tx.fetchone(f"SELECT {_HEAD_COLUMNS} FROM streams WHERE tenant_id = ? AND stream_id = ?",
                              (tenant_id, stream_id))
        return _head_and_snapshot(row)

    def head_snapshot_and_keys(self, tenant_id: str, stream_id: str, key_ids: Collection[str]
                               ) -> tuple[StreamHead | None, dict[str, Any] | None, dict[str, SignerKey]]:
        """The stream head, its stored state and the tenant's registered signer keys among `key_ids` (by key id),
        read with one statement."""
        ids = sorted(set(key_ids))
        if not ids:
            return (*self.head_and_snapshot(tenant_id, stream_id), {})
        sql = _HEAD_AND_KEYS.format(marks=",".join("?" for _ in ids))
        with self.db.query() as tx:
            rows = tx.fetchall(sql, (tenant_id, stream_id, tenant_id, *ids))
        width = len(_HEAD_COLUMNS.split(", "))
        head, snapshot = _head_and_snapshot(rows[0][:width] if rows and rows[0][0] is not None else None)
        keys = _signer_keys(rows, width)
        return head, snapshot, keys

    def api_key_and_stream(self, api_key_id: str, stream_id: str, signer_key_ids: Collection[str]
                           ) -> tuple[StoredApiKey, StreamRead] | None:
        """An API key's row and, in its tenant, what `head_snapshot_and_keys` reads, with ONE statement (the
        append route authenticates and reads the stream in one round trip); None when there is no such key.
        The stored state is parsed only when asked for (`StreamRead.snapshot`), so after the key is checked."""
        ids = sorted(set(signer_key_ids))
        sql = _KEY_HEAD_AND_KEYS.format(marks=",".join("?" for _ in ids) if ids else "NULL")
        with self.db.query() as tx:
            rows = tx.fetchall(sql, (stream_id, *ids, api_key_id))
        if not rows:
            return None
        key_width, head_width = len(API_KEY_COLUMNS.split(", ")), len(_HEAD_COLUMNS.split(", "))
        first = rows[0]
        head_row = first[key_width:key_width + head_width]
        signer_start = key_width + head_width
        keys = _signer_keys(rows, signer_start)
        return stored_api_key(first[:key_width]), StreamRead(
            first[1], stream_id, None if head_row[0] is None else head_row, keys, frozenset(ids))

    def read_stream(self, tenant_id: str, stream_id: str, *, through_chain_hash: str | None = None,
                    after_seq: int = 0) -> list[Event]:
        """A stream's events in order; with `through_chain_hash`, only up to and including that event."""
        with self.db.read() as tx:
            limit_seq = None
            if through_chain_hash is not None:
                limit_seq = tx.scalar(
                    statements("streams", tx.dialect)["read_stream"],
                    (tenant_id, stream_id, through_chain_hash))
                if limit_seq is None:
                    raise NotFoundError(f"chain hash {through_chain_hash} is not in stream {stream_id}",
                                        code="ATCHAINHASH_NOT_FOUND")
            if limit_seq is None:
                rows = tx.fetchall(statements("streams", tx.dialect)["events_after"], (tenant_id, stream_id, after_seq))
            else:
                rows = tx.fetchall(statements("streams", tx.dialect)["events_between_seqs"],
                                   (tenant_id, stream_id, after_seq, limit_seq))
        return [parse_json(r[0]) for r in rows]

    def read_positions(self, after: int, limit: int = 1000, *, up_to: int | None = None,
                       tenant_id: str | None = None) -> list[StoredEvent]:
        """Events with position > after, in position order (all tenants unless one is named)."""
        sql = ("SELECT position, tenant_id, stream_id, stream_type, seq, event_json, txid FROM events"
               " WHERE position > ?")
        params: list[Any] = [after]
        sql = and_where(sql, params, [("position <= ?", up_to), ("tenant_id = ?", tenant_id)])
        sql += " ORDER BY position LIMIT ?"
        params.append(limit)
        with self.db.query() as tx:
            rows = tx.fetchall(sql, params)
        return [row_to_stored(r) for r in rows]

    def high_water_mark(self) -> int:
        with self.db.query() as tx:
            return int(tx.scalar(statements("streams", tx.dialect)["high_water_mark"]))

    def list_streams(self, tenant_id: str, *, stream_type: str | None = None, after: str | None = None,
                     limit: int = 100) -> list[StreamHead]:
        sql = ("SELECT stream_id, stream_type, head_seq, head_chain_hash, head_event_id FROM streams"
               " WHERE tenant_id = ?")
        params: list[Any] = [tenant_id]
        sql = and_where(sql, params, [("stream_type = ?", stream_type), ("stream_id > ?", after)])
        sql += " ORDER BY stream_id LIMIT ?"
        params.append(limit)
        with self.db.read() as tx:
            return [StreamHead(r[0], r[1], int(r[2]), r[3], r[4]) for r in tx.fetchall(sql, params)]

    def identities(self, tenant_id: str, event_ids: Sequence[str]) -> dict[str, EventIdentity]:
        """The stored events of the tenant among `event_ids`, by id (any stream)."""
        marks = ",".join("?" for _ in event_ids)
        with self.db.read() as tx:
            rows = tx.fetchall(f"SELECT event_id, chain_hash, seq, position, stream_id, payload_hash FROM events"
                               f" WHERE tenant_id = ? AND event_id IN ({marks})", (tenant_id, *event_ids))
        return {r[0]: EventIdentity(r[0], r[1], int(r[2]), int(r[3]), r[4], r[5]) for r in rows}


def _signer_keys(rows: Sequence[Row], start: int) -> dict[str, SignerKey]:
    """{key id: key} of the signer key columns from `start` on (NULL where no key matched)."""
    return {row[start + 1]: SignerKey(*row[start:]) for row in rows if row[start] is not None}


def _head_and_snapshot(row: Row | None) -> tuple[StreamHead | None, dict[str, Any] | None]:
    if row is None:
        return None, None
    snapshot = parse_json(row[5]) if row[5] is not None else None
    return StreamHead(row[0], row[1], int(row[2]), row[3], row[4]), snapshot


def row_to_stored(r: Sequence[Any]) -> StoredEvent:
    """A StoredEvent from (position, tenant_id, stream_id, stream_type, seq, event_json, txid)."""
    txid = r[6]
    return StoredEvent(position=int(r[0]), tenant_id=r[1], stream_id=r[2], stream_type=r[3], seq=int(r[4]),
                       event=parse_json(r[5]), txid=None if txid is None else int(txid))


@dataclass(frozen=True)
class JobRow:
    job_id: str
    version: int
    head_chain_hash: str
    updated_at: Any
    state: Any  # the stored stream state (`snapshot_json` parsed), None when the stream has none


@dataclass(frozen=True)
class JobPage:
    jobs: list[JobRow]
    last_seen: str | None  # the stream id the page ends at: the next page continues after it
    more: bool  # whether any job stream of the tenant follows `last_seen`


def job_page(db: Database, tenant_id: str, *, after: str | None, limit: int, status: str | None = None,
             scan: int | None = None) -> JobPage:
    """Up to `limit` job streams of `tenant_id` after stream id `after`, in stream id order.

    With `status`, only the streams whose stored snapshot has that status, among at most `scan` streams looked
    at (default: `limit`): a page can then be short while `more` is true, and the next page continues after the
    last stream looked at, so one request's work stays bounded however rare the status is."""
    start = after if after is not None else ""  # every stream id sorts after the empty string
    with db.read() as tx:
        if status is None:
            rows = tx.fetchall(statements("streams", tx.dialect)["job_page"], (tenant_id, start, limit + 1))
            more = len(rows) > limit
            page = rows[:limit]
            return JobPage([_job_row(r) for r in page], page[-1][0] if page else after, more)
        rows = tx.fetchall(statements("streams", tx.dialect)["job_page_with_status"],
                           (status, tenant_id, start, scan if scan is not None else limit, limit))
        matched: list[Row] = []
        last = after
        for row in rows:
            last = row[0]
            if row[5] or (row[5] is None and _snapshot_status(row[4]) == status):
                matched.append(row)
                if len(matched) == limit:
                    break
        more = last is not None and tx.fetchone(statements("streams", tx.dialect)["job_after"],
                                                (tenant_id, last)) is not None
    return JobPage([_job_row(r) for r in matched], last, more)


def _snapshot_status(snapshot_json: str | None) -> Any:
    """The job status in a stored snapshot the database's JSON functions could not read (nested too deep)."""
    state = parse_json(snapshot_json) if snapshot_json else None
    job = state.get("snapshot") if isinstance(state, dict) else None
    return job.get("status") if isinstance(job, dict) else None


def job_prefix_page(db: Database, tenant_id: str, prefix: str, *, after: str | None, limit: int,
                    status: str | None = None, scan: int | None = None) -> JobPage:
    """Up to `limit` job streams of `tenant_id` whose id starts with `prefix`, after stream id `after`, in stream
    id order (one index range: the ids from `prefix` on, until the first that does not start with it). With
    `status`, only those whose snapshot has it, among at most `scan` streams looked at (as `job_page`)."""
    start = after if after is not None and after > prefix else ""
    window = limit if status is None else max(scan or limit, limit)
    with db.read() as tx:
        rows = tx.fetchall(statements("streams", tx.dialect)["job_prefix_page"], (tenant_id, start, prefix, window + 1))
    matched: list[JobRow] = []
    last = after
    more = False
    for i, row in enumerate(rows):
        if not str(row[0]).startswith(prefix):
            break
        if i == window or len(matched) == limit:
            more = True
            break
        last = row[0]
        job = _job_row(row)
        snap = (job.state or {}).get("snapshot") if isinstance(job.state, dict) else None
        if status is None or (isinstance(snap, dict) and snap.get("status") == status):
            matched.append(job)
    return JobPage(matched, last, more)


def _job_row(row: Row) -> JobRow:
    return JobRow(job_id=row[0], version=int(row[1]), head_chain_hash=row[2], updated_at=row[3],
                  state=parse_json(row[4]) if row[4] else None)
