"""SQLite append: BEGIN IMMEDIATE makes this the only writer, so a plain head check then inserts is a CAS."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from settlekit.store.sqlite.backend import SqliteDatabase, SqliteTx

AfterAppend = Callable[[SqliteTx, int, list[int]], None]


def append(db: SqliteDatabase, tenant_id: str, stream_id: str, stream_type: str, prev: str | None,
           expected_version: int | None, events: list[dict[str, Any]], jsons: list[str],
           snapshot_json: str | None, batch_id: str, correlation_id: str | None, causation_id: str | None,
           after: AfterAppend) -> tuple[Any, ...]:
    """('ok', base_seq, positions) or ('conflict', seq, chain_hash); `after` runs in the same transaction."""
    with db.transaction() as tx:
        head = tx.fetchone("SELECT head_seq, head_chain_hash FROM streams WHERE tenant_id = ? AND stream_id = ?",
                           (tenant_id, stream_id))
        cur_seq = int(head[0]) if head else 0
        cur_hash = head[1] if head else None
        if cur_hash != prev or (expected_version is not None and cur_seq != expected_version):
            return ("conflict", cur_seq if head else None, cur_hash)
        n = len(events)
        if head is None:
            tx.execute("INSERT INTO streams (tenant_id, stream_id, stream_type, head_seq, head_chain_hash,"
                       " head_event_id, snapshot_json) VALUES (?, ?, ?, ?, ?, ?, ?)",
                       (tenant_id, stream_id, stream_type, n, events[-1]["chainHash"], events[-1]["id"],
                        snapshot_json))
        else:
            tx.execute("UPDATE streams SET head_seq = ?, head_chain_hash = ?, head_event_id = ?,"
                       " snapshot_json = COALESCE(?, snapshot_json),"
                       " updated_at = strftime('%Y-%m-%dT%H:%M:%fZ','now') WHERE tenant_id = ? AND stream_id = ?",
                       (cur_seq + n, events[-1]["chainHash"], events[-1]["id"], snapshot_json, tenant_id,
                        stream_id))
        positions = []
        for i, (event, text) in enumerate(zip(events, jsons, strict=True)):
            row = tx.fetchone(
                "INSERT INTO events (tenant_id, stream_type, stream_id, seq, event_id, type, at, payload_hash,"
                " prev_chain_hash, chain_hash, signature, signer_key_id, event_json, correlation_id, causation_id,"
                " batch_id) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?) RETURNING position",
                (tenant_id, stream_type, stream_id, cur_seq + i + 1, event["id"], event["type"], event["at"],
                 event["payloadHash"], event["prevChainHash"], event["chainHash"], event["signature"],
                 event["signerKeyId"], text, correlation_id, causation_id, batch_id))
            assert row is not None
            positions.append(int(row[0]))
        after(tx, cur_seq, positions)
        tx.notify()
    return ("ok", cur_seq, positions)
