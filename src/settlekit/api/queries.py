"""Read queries the API needs that the store does not offer (yet): job rows with their snapshots, by page."""

from __future__ import annotations

from typing import Any

from settlekit.store.db import Database, Row


def job_rows(db: Database, tenant_id: str, *, after: str | None, limit: int) -> list[Row]:
    """(stream_id, head_seq, head_chain_hash, updated_at, snapshot_json) of job streams, by stream id."""
    sql = ("SELECT stream_id, head_seq, head_chain_hash, updated_at, snapshot_json FROM streams"
           " WHERE tenant_id = ? AND stream_type = 'job'")
    params: list[Any] = [tenant_id]
    if after is not None:
        sql += " AND stream_id > ?"
        params.append(after)
    sql += " ORDER BY stream_id LIMIT ?"
    params.append(limit)
    with db.read() as tx:
        return tx.fetchall(sql, params)
