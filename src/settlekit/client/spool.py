"""The executor's offline spool: a local append-only SQLite file of finalized events waiting to be sent.

Every event is written (WAL, synchronous=FULL: on disk before `add` returns) before anything is sent. Sending
takes the oldest pending events of a stream as a batch and stores the batch's Idempotency-Key with them first
(`next_batch`), so a batch is re-sent after a crash with the same events and the same key: the API answers a
committed batch with its stored answer (or, once the key has expired, recognises the events as already there).
A stream whose batch the API refused (someone else appended: PREV_CHAIN_HASH_MISMATCH, or a rule refused an event)
is blocked with the error recorded; its events stay in the file and the other streams go on.

This is the client's own file, not the server's database: it is the one module of `settlekit.client` that speaks
SQL, and nothing here depends on the server side.
"""

from __future__ import annotations

import json
import sqlite3
import threading
import uuid
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from settlekit.client.errors import SpoolError

FORMAT = "settlekit-spool/1"
_SCHEMA = (
    "CREATE TABLE IF NOT EXISTS spool_meta (name TEXT PRIMARY KEY, value TEXT NOT NULL)",
    "CREATE TABLE IF NOT EXISTS spool_streams (stream_id TEXT PRIMARY KEY, head_chain_hash TEXT, "
    "blocked_code TEXT, blocked_message TEXT, blocked_problem TEXT, blocked_at TEXT)",
    "CREATE TABLE IF NOT EXISTS spool_events (seq INTEGER PRIMARY KEY AUTOINCREMENT, stream_id TEXT NOT NULL, "
    "event_id TEXT NOT NULL UNIQUE, prev_chain_hash TEXT, chain_hash TEXT NOT NULL, event_json TEXT NOT NULL, "
    "spooled_at TEXT NOT NULL, idempotency_key TEXT, sent_at TEXT, position INTEGER, discarded_at TEXT)",
    "CREATE INDEX IF NOT EXISTS spool_events_pending ON spool_events (stream_id, seq) "
    "WHERE sent_at IS NULL AND discarded_at IS NULL",
    "CREATE INDEX IF NOT EXISTS spool_events_batch ON spool_events (idempotency_key)",
)
_PENDING = "sent_at IS NULL AND discarded_at IS NULL"
DEFAULT_BATCH_EVENTS = 100
DEFAULT_BATCH_BYTES = 512 * 1024  # well under the API's default request body limit (1 MiB)

Event = dict[str, Any]


@dataclass(frozen=True)
class Batch:
    """The oldest pending events of one stream, to be sent in one request under `idempotency_key`."""

    stream_id: str
    idempotency_key: str
    seqs: tuple[int, ...]
    texts: tuple[str, ...]
    prev_chain_hash: str | None

    def body(self) -> bytes:
        """The request body: the stored event texts as a JSON array, byte for byte."""
        return ("[" + ",".join(self.texts) + "]").encode("utf-8")


@dataclass(frozen=True)
class StreamHead:
    """What the spool knows of a stream: whether it has seen it, the chain hash the next event links to, how many
    events wait, and why it is blocked (None: it is not)."""

    known: bool
    chain_hash: str | None
    pending: int
    blocked_code: str | None


@dataclass(frozen=True)
class StreamStatus:
    stream_id: str
    pending: int
    sent: int
    discarded: int
    head_chain_hash: str | None
    blocked_code: str | None
    blocked_message: str | None
    blocked_at: str | None
    blocked_problem: dict[str, Any] | None
    oldest_pending_at: str | None

    @property
    def state(self) -> str:
        return "blocked" if self.blocked_code else ("pending" if self.pending else "sent")

    def to_json(self) -> dict[str, Any]:
        return {"streamId": self.stream_id, "state": self.state, "pending": self.pending, "sent": self.sent,
                "discarded": self.discarded, "oldestPendingAt": self.oldest_pending_at,
                "headChainHash": self.head_chain_hash,
                "blocked": None if self.blocked_code is None else {
                    "code": self.blocked_code, "message": self.blocked_message, "at": self.blocked_at,
                    "problem": self.blocked_problem}}


def _now() -> str:
    return datetime.now(UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


def dumps_event(event: Event) -> str:
    """The event's JSON text as spooled and sent (UTF-8, no spaces)."""
    return json.dumps(event, ensure_ascii=False, separators=(",", ":"), allow_nan=False)


class Spool:
    """One spool file, safe to share between the threads of a process (and between processes: SQLite locks)."""

    def __init__(self, path: str | Path):
        self.path = str(path)
        self._lock = threading.RLock()
        try:
            self._conn = sqlite3.connect(self.path, isolation_level=None, check_same_thread=False, timeout=30)
            self._conn.execute("PRAGMA journal_mode=WAL")
            self._conn.execute("PRAGMA synchronous=FULL")
            with self._write():
                for statement in _SCHEMA:
                    self._conn.execute(statement)
                self._check_format()
        except sqlite3.DatabaseError as exc:
            raise SpoolError(f"{self.path} is not a usable spool file: {exc}", path=self.path) from exc

    def _check_format(self) -> None:
        row = self._conn.execute("SELECT value FROM spool_meta WHERE name = 'format'").fetchone()
        if row is None:
            self._conn.execute("INSERT INTO spool_meta (name, value) VALUES ('format', ?)", (FORMAT,))
        elif row[0] != FORMAT:
            raise SpoolError(f"{self.path} is a spool of format {row[0]}, not {FORMAT}", path=self.path)

    def close(self) -> None:
        with self._lock:
            self._conn.close()

    def __enter__(self) -> Spool:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    class _Tx:
        def __init__(self, spool: Spool):
            self.spool = spool

        def __enter__(self) -> sqlite3.Connection:
            self.spool._lock.acquire()
            try:
                self.spool._conn.execute("BEGIN IMMEDIATE")
            except BaseException:
                self.spool._lock.release()
                raise
            return self.spool._conn

        def __exit__(self, exc_type: Any, exc: Any, tb: Any) -> None:
            try:
                self.spool._conn.execute("COMMIT" if exc_type is None else "ROLLBACK")
            finally:
                self.spool._lock.release()

    def _write(self) -> Spool._Tx:
        """One write transaction (BEGIN IMMEDIATE … COMMIT, synced to disk), rolled back on any exception."""
        return Spool._Tx(self)

    # --- adding

    def head(self, stream_id: str) -> StreamHead:
        with self._lock:
            row = self._conn.execute("SELECT head_chain_hash, blocked_code FROM spool_streams WHERE stream_id = ?",
                                     (stream_id,)).fetchone()
            pending = self._pending_count(stream_id)
        if row is None:
            return StreamHead(False, None, 0, None)
        return StreamHead(True, row[0], pending, row[1])

    def _pending_count(self, stream_id: str) -> int:
        row = self._conn.execute(f"SELECT COUNT(*) FROM spool_events WHERE stream_id = ? AND {_PENDING}",
                                 (stream_id,)).fetchone()
        return int(row[0])

    def follow(self, stream_id: str, head_chain_hash: str | None) -> None:
        """Record the stream's head as the API reported it (what the next event links to when none waits)."""
        with self._write() as conn:
            if self._pending_count(stream_id) == 0:
                self._set_head(conn, stream_id, head_chain_hash)

    def add(self, stream_id: str, build: Callable[[str | None], Event], *, server_head: str | None = None,
            use_server_head: bool = False) -> Event:
        """Finalize the next event of `stream_id` with `build(prev_chain_hash)` and store it, in one transaction.
        It links to the last spooled event while some wait; otherwise to `server_head` when `use_server_head`
        (the head just read from the API), else to the last head the spool knows (None for a new stream)."""
        return self.add_many(stream_id, [build], server_head=server_head, use_server_head=use_server_head)[0]

    def add_many(self, stream_id: str, builds: Sequence[Callable[[str | None], Event]], *,
                 server_head: str | None = None, use_server_head: bool = False,
                 seen_head: StreamHead | None = None) -> list[Event]:
        """`add` for several events of one stream, chained in order, in one transaction (one sync to disk). With
        `use_server_head`, the events link to `server_head` (read from the API) when no event waits, unless the
        spool's head moved since `seen_head` was read before it: another executor on this file appended meanwhile,
        and the server head read may be older than what it sent."""
        with self._write() as conn:
            row = conn.execute("SELECT head_chain_hash, blocked_code, blocked_message FROM spool_streams "
                               "WHERE stream_id = ?", (stream_id,)).fetchone()
            if row is not None and row[1] is not None:
                raise SpoolError(f"stream {stream_id} is blocked by {row[1]}: {row[2]}", code="SPOOL_STREAM_BLOCKED",
                                 status=409, streamId=stream_id, blockedCode=row[1])
            prev = row[0] if row is not None else None
            moved = seen_head is not None and (seen_head.known != (row is not None) or seen_head.chain_hash != prev)
            if use_server_head and not moved and self._pending_count(stream_id) == 0:
                prev = server_head
            events = []
            for build in builds:
                event = build(prev)
                if event.get("streamId") != stream_id or event.get("prevChainHash") != prev:
                    raise SpoolError("the event built does not belong at the head of its stream", streamId=stream_id)
                conn.execute("INSERT INTO spool_events (stream_id, event_id, prev_chain_hash, chain_hash, "
                             "event_json, spooled_at) VALUES (?, ?, ?, ?, ?, ?)",
                             (stream_id, event["id"], prev, event["chainHash"], dumps_event(event), _now()))
                events.append(event)
                prev = event["chainHash"]
            self._set_head(conn, stream_id, prev)
        return events

    def _set_head(self, conn: sqlite3.Connection, stream_id: str, head: str | None) -> None:
        conn.execute("INSERT INTO spool_streams (stream_id, head_chain_hash) VALUES (?, ?) "
                     "ON CONFLICT (stream_id) DO UPDATE SET head_chain_hash = excluded.head_chain_hash",
                     (stream_id, head))

    # --- sending

    def streams_to_send(self) -> list[str]:
        """Streams with waiting events and not blocked, oldest waiting event first."""
        with self._lock:
            rows = self._conn.execute(
                f"SELECT e.stream_id, MIN(e.seq) AS first FROM spool_events e JOIN spool_streams s "
                f"ON s.stream_id = e.stream_id WHERE {_PENDING} AND s.blocked_code IS NULL "
                "GROUP BY e.stream_id ORDER BY first").fetchall()
        return [r[0] for r in rows]

    def next_batch(self, stream_id: str, max_events: int = DEFAULT_BATCH_EVENTS,
                   max_bytes: int = DEFAULT_BATCH_BYTES) -> Batch | None:
        """The batch to send next for the stream (None: nothing waits, or it is blocked). A batch given out
        before and not yet sent comes back unchanged; otherwise the oldest waiting events get a new key, stored
        before this returns."""
        with self._write() as conn:
            blocked = conn.execute("SELECT blocked_code FROM spool_streams WHERE stream_id = ?",
                                   (stream_id,)).fetchone()
            if blocked is None or blocked[0] is not None:
                return None
            first = conn.execute(f"SELECT idempotency_key FROM spool_events WHERE stream_id = ? AND {_PENDING} "
                                 "ORDER BY seq LIMIT 1", (stream_id,)).fetchone()
            if first is None:
                return None
            if first[0] is not None:
                rows = conn.execute(f"SELECT seq, event_json, prev_chain_hash FROM spool_events WHERE "
                                    f"idempotency_key = ? AND {_PENDING} ORDER BY seq", (first[0],)).fetchall()
                return _batch(stream_id, first[0], rows)
            rows = conn.execute(f"SELECT seq, event_json, prev_chain_hash FROM spool_events WHERE stream_id = ? "
                                f"AND {_PENDING} ORDER BY seq LIMIT ?", (stream_id, max_events)).fetchall()
            rows = _within(rows, max_bytes)
            key = f"spool_{uuid.uuid4().hex}"
            conn.executemany("UPDATE spool_events SET idempotency_key = ? WHERE seq = ?",
                             [(key, r[0]) for r in rows])
            return _batch(stream_id, key, rows)

    def mark_sent(self, batch: Batch, positions: Sequence[str] | None) -> None:
        """The API holds the batch's events (committed now, or found already there); `positions`: the position
        cursors its answer gave them (opaque strings, the event feed's `after`)."""
        sent_at = _now()
        values = positions if positions is not None and len(positions) == len(batch.seqs) else [None] * len(batch.seqs)
        with self._write() as conn:
            conn.executemany("UPDATE spool_events SET sent_at = ?, position = ? WHERE seq = ? AND sent_at IS NULL",
                             [(sent_at, p, s) for s, p in zip(batch.seqs, values, strict=True)])

    def block(self, stream_id: str, code: str, message: str, problem: dict[str, Any] | None = None) -> None:
        """Stop sending the stream: the API refused its next batch (`code`, `message`, the problem body)."""
        with self._write() as conn:
            conn.execute("UPDATE spool_streams SET blocked_code = ?, blocked_message = ?, blocked_problem = ?, "
                         "blocked_at = ? WHERE stream_id = ?",
                         (code, message, json.dumps(problem) if problem else None, _now(), stream_id))

    def discard(self, stream_id: str, head_chain_hash: str | None) -> int:
        """Give up the waiting events of a blocked stream (kept in the file, marked discarded) and unblock it,
        following the API's head `head_chain_hash` from now on. Returns how many were discarded."""
        with self._write() as conn:
            row = conn.execute("SELECT blocked_code FROM spool_streams WHERE stream_id = ?", (stream_id,)).fetchone()
            if row is None or row[0] is None:  # its waiting events would still be sent: never given up
                raise SpoolError(f"stream {stream_id} is not blocked: nothing to discard",
                                 code="SPOOL_STREAM_NOT_BLOCKED", status=409, streamId=stream_id)
            cur = conn.execute(f"UPDATE spool_events SET discarded_at = ? WHERE stream_id = ? AND {_PENDING}",
                               (_now(), stream_id))
            conn.execute("UPDATE spool_streams SET blocked_code = NULL, blocked_message = NULL, "
                         "blocked_problem = NULL, blocked_at = NULL, head_chain_hash = ? WHERE stream_id = ?",
                         (head_chain_hash, stream_id))
            return int(cur.rowcount)

    # --- reading

    def status(self) -> list[StreamStatus]:
        """Each stream's counts and state, in stream id order."""
        with self._lock:
            rows = self._conn.execute(
                "SELECT s.stream_id, s.head_chain_hash, s.blocked_code, s.blocked_message, s.blocked_at, "
                f"s.blocked_problem, SUM(CASE WHEN e.seq IS NOT NULL AND {_PENDING} THEN 1 ELSE 0 END), "
                "SUM(CASE WHEN e.sent_at IS NOT NULL THEN 1 ELSE 0 END), "
                "SUM(CASE WHEN e.discarded_at IS NOT NULL THEN 1 ELSE 0 END), "
                f"MIN(CASE WHEN e.seq IS NOT NULL AND {_PENDING} THEN e.spooled_at END) "
                "FROM spool_streams s LEFT JOIN spool_events e ON e.stream_id = s.stream_id "
                "GROUP BY s.stream_id ORDER BY s.stream_id").fetchall()
        return [StreamStatus(stream_id=r[0], pending=int(r[6] or 0), sent=int(r[7] or 0), discarded=int(r[8] or 0),
                             head_chain_hash=r[1], blocked_code=r[2], blocked_message=r[3], blocked_at=r[4],
                             blocked_problem=json.loads(r[5]) if r[5] else None, oldest_pending_at=r[9])
                for r in rows]

    def prune(self, sent_before: str) -> int:
        """Delete the events sent before `sent_before` (an ISO-8601 UTC instant as the spool writes them): the API
        holds them. Waiting and discarded events, and every stream's head, stay. Returns how many went."""
        with self._write() as conn:
            return int(conn.execute("DELETE FROM spool_events WHERE sent_at IS NOT NULL AND sent_at < ?",
                                    (sent_before,)).rowcount)

    def export(self, stream_id: str | None = None) -> Iterator[dict[str, Any]]:
        """Every spooled event in spool order (of one stream, if given) with its state, as JSON-ready dicts."""
        with self._lock:
            rows = self._conn.execute(
                "SELECT seq, stream_id, event_json, idempotency_key, spooled_at, sent_at, position, discarded_at "
                "FROM spool_events WHERE (? IS NULL OR stream_id = ?) ORDER BY seq", (stream_id, stream_id)).fetchall()
        for seq, sid, text, key, spooled_at, sent_at, position, discarded_at in rows:
            state = "sent" if sent_at else ("discarded" if discarded_at else "pending")
            yield {"seq": seq, "streamId": sid, "state": state, "idempotencyKey": key, "spooledAt": spooled_at,
                   "sentAt": sent_at, "position": position, "event": json.loads(text)}


def _within(rows: list[Any], max_bytes: int) -> list[Any]:
    """The leading rows whose texts fit in `max_bytes` (at least one)."""
    out: list[Any] = []
    size = 2
    for row in rows:
        size += len(row[1].encode("utf-8")) + 1
        if out and size > max_bytes:
            break
        out.append(row)
    return out


def _batch(stream_id: str, key: str, rows: list[Any]) -> Batch:
    return Batch(stream_id, key, tuple(r[0] for r in rows), tuple(r[1] for r in rows), rows[0][2])
