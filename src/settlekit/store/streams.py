"""Read models of the streams table: the job listing (one page of a tenant's job streams, by stream id)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from settlekit.events.canonical import parse_json
from settlekit.store.db import Database, Row
from settlekit.store.sql import statements

_JOB_PAGE = ("SELECT stream_id, head_seq, head_chain_hash, updated_at, snapshot_json FROM streams"
             " WHERE tenant_id = ? AND stream_type = 'job' AND stream_id > ? ORDER BY stream_id LIMIT ?")
_JOB_AFTER = ("SELECT stream_id FROM streams WHERE tenant_id = ? AND stream_type = 'job' AND stream_id > ?"
              " ORDER BY stream_id LIMIT 1")


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
            rows = tx.fetchall(_JOB_PAGE, (tenant_id, start, limit + 1))
            more = len(rows) > limit
            page = rows[:limit]
            return JobPage([_job_row(r) for r in page], page[-1][0] if page else after, more)
        rows = tx.fetchall(statements("streams", tx.dialect)["job_page_with_status"],
                           (status, tenant_id, start, scan if scan is not None else limit, limit))
        matched: list[Row] = []
        last = after
        for row in rows:
            last = row[0]
            if row[5]:
                matched.append(row)
                if len(matched) == limit:
                    break
        more = last is not None and tx.fetchone(_JOB_AFTER, (tenant_id, last)) is not None
    return JobPage([_job_row(r) for r in matched], last, more)


def _job_row(row: Row) -> JobRow:
    return JobRow(job_id=row[0], version=int(row[1]), head_chain_hash=row[2], updated_at=row[3],
                  state=parse_json(row[4]) if row[4] else None)
