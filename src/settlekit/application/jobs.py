"""Jobs as the entry points see them: the append (its appender is built by `settlekit.append.job_appender`; the
API holds it as `ctx.appender`) and the job streams' reads (heads, stored state, events, the job listing)."""

from __future__ import annotations

from settlekit.store.events import MAX_QUEUED_APPENDS
from settlekit.store.feed import FeedEvent
from settlekit.store.streams import StreamHead, StreamRead, Streams, job_page

__all__ = ["MAX_QUEUED_APPENDS", "FeedEvent", "StreamHead", "StreamRead", "Streams", "job_page"]
