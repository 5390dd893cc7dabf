"""SQLite append: BEGIN IMMEDIATE makes this the only writer, so a plain head check then inserts is a CAS."""

from __future__ import annotations

import sqlite3

from settlekit.store.events import AfterCommit, CommitBatch, Committed, DuplicateKey, HeadMismatch
from settlekit.store.sqlite.backend import SqliteDatabase


def commit(db: SqliteDatabase, batch: CommitBatch, after: AfterCommit | None) -> Committed | HeadMismatch:
    """Check the head, insert the events, move the head; `after` runs in the same transaction."""
    try:
        return _write(db, batch, after)
    except sqlite3.IntegrityError as exc:
        if "UNIQUE" in str(exc):
            raise DuplicateKey(str(exc)) from exc
        raise


def _write(db: SqliteDatabase, batch: CommitBatch, after: AfterCommit | None) -> Committed | HeadMismatch:
    tenant_id, stream_id, stream_type = batch.tenant_id, batch.stream_id, batch.stream_type
    events, expected_version = batch.events, batch.expected_version
    with db.transaction() as tx:
        head = tx.fetchone("SELECT head_seq, head_chain_hash FROM streams WHERE tenant_id = ? AND stream_id = ?",
                           (tenant_id, stream_id))
        cur_seq = int(head[0]) if head else 0
        cur_hash = head[1] if head else None
        if cur_hash != batch.prev_chain_hash or (expected_version is not None and cur_seq != expected_version):
            return HeadMismatch(cur_seq if head else None, cur_hash)
        n = len(events)
        if head is None:
            tx.execute("INSERT INTO streams (tenant_id, stream_id, stream_type, head_seq, head_chain_hash,"
                       " head_event_id, snapshot_json) VALUES (?, ?, ?, ?, ?, ?, ?)",
                       (tenant_id, stream_id, stream_type, n, events[-1]["chainHash"], events[-1]["id"],
                        batch.snapshot_json))
        else:
            tx.execute("UPDATE streams SET head_seq = ?, head_chain_hash = ?, head_event_id = ?,"
                       " snapshot_json = COALESCE(?, snapshot_json),"
                       " updated_at = strftime('%Y-%m-%dT%H:%M:%fZ','now') WHERE tenant_id = ? AND stream_id = ?",
                       (cur_seq + n, events[-1]["chainHash"], events[-1]["id"], batch.snapshot_json, tenant_id,
                        stream_id))
        positions = []
        correlation_id, causation_id, batch_id = batch.correlation_id, batch.causation_id, batch.batch_id
        for i, (event, text) in enumerate(zip(events, batch.jsons, strict=True)):
            row = tx.fetchone(
                "INSERT INTO events (tenant_id, stream_type, stream_id, seq, event_id, type, at, payload_hash,"
                " prev_chain_hash, chain_hash, signature, signer_key_id, event_json, correlation_id, causation_id,"
                " batch_id) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?) RETURNING position",
                (tenant_id, stream_type, stream_id, cur_seq + i + 1, event["id"], event["type"], event["at"],
                 event["payloadHash"], event["prevChainHash"], event["chainHash"], event["signature"],
                 event["signerKeyId"], text, correlation_id, causation_id, batch_id))
            assert row is not None
            positions.append(int(row[0]))
        if after is not None:
            after(tx, cur_seq, positions)
        tx.notify()
    return Committed(cur_seq, positions)
