"""SQLite append: BEGIN IMMEDIATE makes this the only writer, so a plain head check then inserts is a CAS."""

from __future__ import annotations

import sqlite3
from collections.abc import Callable, Sequence

from settlekit.store.database import AfterCommit, Tx
from settlekit.store.rows import CommitBatch, CommitOutcome, Committed, DuplicateKey, HeadMismatch, KeyInactive
from settlekit.store.sqlite.backend import SqliteDatabase


def commit(db: SqliteDatabase, batch: CommitBatch, after: AfterCommit | None) -> CommitOutcome:
    """Check the head, insert the events, move the head; `after` runs in the same transaction."""
    try:
        return _write(db, batch, after)
    except sqlite3.IntegrityError as exc:
        if "UNIQUE" in str(exc):
            raise DuplicateKey(str(exc)) from exc
        raise


def _write(db: SqliteDatabase, batch: CommitBatch, after: AfterCommit | None) -> CommitOutcome:
    with db.transaction() as tx:
        return write(tx, batch, after)


def write_group(db: SqliteDatabase, group: Sequence[tuple[CommitBatch, AfterCommit | None]],
                before_commit: Callable[[int], None]) -> list[CommitOutcome]:
    """Several appends in one transaction (a group commit); `before_commit(count)` runs once all are written."""
    with db.transaction() as tx:
        outcomes = [write(tx, batch, after) for batch, after in group]
        before_commit(len(outcomes))
    return outcomes


def write(tx: Tx, batch: CommitBatch, after: AfterCommit | None) -> CommitOutcome:
    """The append inside an open write transaction (its own, or a group commit's): a head mismatch writes
    nothing, as does an `active_api_key` no longer active; a uniqueness violation raises sqlite3.IntegrityError."""
    tenant_id, stream_id = batch.tenant_id, batch.stream_id
    key_id = batch.active_api_key
    if key_id is not None and tx.fetchone("SELECT 1 FROM api_keys WHERE key_id = ? AND status = 'active'",
                                          (key_id,)) is None:
        return KeyInactive(key_id)
    head = tx.fetchone("SELECT head_seq, head_chain_hash FROM streams WHERE tenant_id = ? AND stream_id = ?",
                       (tenant_id, stream_id))
    cur_seq = int(head[0]) if head else 0
    cur_hash = head[1] if head else None
    expected_version = batch.expected_version
    if cur_hash != batch.prev_chain_hash or (expected_version is not None and cur_seq != expected_version):
        return HeadMismatch(cur_seq if head else None, cur_hash)
    _move_head(tx, batch, None if head is None else cur_seq)
    positions = _insert_events(tx, batch, cur_seq)
    if after is not None:
        after(tx, cur_seq, positions)
    tx.notify()
    return Committed(cur_seq, positions)


def _move_head(tx: Tx, batch: CommitBatch, cur_seq: int | None) -> None:
    """Create the stream (`cur_seq` None) or move its head past the batch, with the new snapshot."""
    events, n = batch.events, len(batch.events)
    if cur_seq is None:
        tx.execute("INSERT INTO streams (tenant_id, stream_id, stream_type, head_seq, head_chain_hash,"
                   " head_event_id, snapshot_json) VALUES (?, ?, ?, ?, ?, ?, ?)",
                   (batch.tenant_id, batch.stream_id, batch.stream_type, n, events[-1]["chainHash"],
                    events[-1]["id"], batch.snapshot_json))
    else:
        tx.execute("UPDATE streams SET head_seq = ?, head_chain_hash = ?, head_event_id = ?,"
                   " snapshot_json = COALESCE(?, snapshot_json),"
                   " updated_at = strftime('%Y-%m-%dT%H:%M:%fZ','now') WHERE tenant_id = ? AND stream_id = ?",
                   (cur_seq + n, events[-1]["chainHash"], events[-1]["id"], batch.snapshot_json, batch.tenant_id,
                    batch.stream_id))


def _insert_events(tx: Tx, batch: CommitBatch, cur_seq: int) -> list[int]:
    """Insert the batch's events after seq `cur_seq`; their log positions."""
    positions = []
    for i, (event, text) in enumerate(zip(batch.events, batch.jsons, strict=True)):
        row = tx.fetchone(
            "INSERT INTO events (tenant_id, stream_type, stream_id, seq, event_id, type, at, payload_hash,"
            " prev_chain_hash, chain_hash, signature, signer_key_id, event_json, correlation_id, causation_id,"
            " batch_id) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?) RETURNING position",
            (batch.tenant_id, batch.stream_type, batch.stream_id, cur_seq + i + 1, event["id"], event["type"],
             event["at"], event["payloadHash"], event["prevChainHash"], event["chainHash"], event["signature"],
             event["signerKeyId"], text, batch.correlation_id, batch.causation_id, batch.batch_id))
        assert row is not None
        positions.append(int(row[0]))
    return positions
