"""Jobs as the entry points see them: the append (the appender `job_appender` builds, which the API holds as
`ctx.appender`, and the types of a call: its options, the stream precondition, the idempotency key, the result),
the job streams' reads (heads, stored state, events, the job listing, by id prefix), the event feed's commit-safe
pages (`FeedReader`) and the append rate (events appended in the last minute and hour)."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from settlekit.append import Appender, AppendResult, Idempotency, job_appender
from settlekit.append.appender import AppendOptions, StreamPrecondition, named_key_ids
from settlekit.append.state_cache import CachedStream, CachedStreamStale
from settlekit.dispatch.feed import FeedPage, FeedReader
from settlekit.store import append_rate
from settlekit.store.append_rate import AppendRate
from settlekit.store.database import Database
from settlekit.store.events import MAX_QUEUED_APPENDS
from settlekit.store.feed import FeedEvent
from settlekit.store.streams import StreamHead, StreamRead, Streams, job_page, job_prefix_page

__all__ = ["MAX_QUEUED_APPENDS", "TENANT_APPEND_CAP", "AppendOptions", "AppendRate", "AppendRates", "AppendResult",
           "Appender", "CachedStream", "CachedStreamStale", "FeedEvent", "FeedPage", "FeedReader", "Idempotency",
           "StreamHead", "StreamPrecondition", "StreamRead", "Streams", "append_rates", "job_appender", "job_page",
           "job_prefix_page", "named_key_ids"]

TENANT_APPEND_CAP = append_rate.TENANT_CAP
"""A tenant's events of a window are counted up to this many."""


@dataclass(frozen=True)
class AppendRates:
    minute: int
    hour: int
    deployment: AppendRate | None  # the deployment's, with its per-minute counts, when asked for


def append_rates(db: Database, tenant_id: str, now: datetime, *, deployment: bool) -> AppendRates:
    """The tenant's events appended in the last minute and hour (and the deployment's rate), in one read."""
    with db.read() as tx:
        found = append_rate.bounds(tx, now)
        minute, hour = append_rate.tenant_recent_in(tx, tenant_id, found)
        rate = append_rate.deployment_rate_in(tx, found, now) if deployment else None
    return AppendRates(minute, hour, rate)
