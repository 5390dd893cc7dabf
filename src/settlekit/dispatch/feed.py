"""The event feed's commit-safe reads: one tenant's events past a position, never past a position that may still
commit.

A feed client holds one position, not a pending-gap list, so where the dispatcher keeps a hole pending the feed
stops before it. The rule is the dispatcher's (05-dispatcher.md §6, through the consumer repository): a hole seen
in the visible positions was drawn by a writer whose transaction id is below an observation xid assigned after
the read; once the horizon (the oldest running transaction id) reaches that xid, every such writer has ended and
every position up to the read's last one is settled: visible for good or never to appear. The reader keeps the
highest settled position for the process (`settled`), so the walk starts there rather than at the client's
position.
"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from dataclasses import dataclass

from settlekit.store.consumers import ConsumerRepository
from settlekit.store.db import Database
from settlekit.store.feed import FeedEvent, FeedRepository

DEFAULT_SCAN = 10_000
"""Visible positions one gap walk reads at most."""


@dataclass(frozen=True)
class FeedPage:
    """Events of one tenant past the asked position; `next`: the position to show the tenant to ask from next
    (the last event's when the page is full, else the tenant's last settled event's: it moves with the tenant's
    own events only, never with other tenants'); `scanned`: how far the read looked (the settled bound when the
    page is not full), where a reader that keeps its position to itself (the SSE stream) goes on from."""

    events: list[FeedEvent]
    next: int
    scanned: int


class FeedReader:
    """Commit-safe feed reads on one database, shared by every request of a process."""

    def __init__(self, db: Database, *, scan: int = DEFAULT_SCAN):
        self.db = db
        self.scan = scan
        self._feed = FeedRepository(db)
        self._consumers = ConsumerRepository(db)
        self._lock = threading.Lock()
        self._settled = 0
        self._pending: tuple[int, int] | None = None  # (observation xid, settled up to once the horizon passes it)

    @property
    def settled(self) -> int:
        """Every position at or below this one is visible or will never be."""
        return self._settled

    def read(self, tenant_id: str, after: int, *, types: Sequence[str] = (), limit: int = 100) -> FeedPage:
        """The tenant's events past `after` (of `types` when given), at most `limit`, none past a position that
        might still commit."""
        bound = self.safe_bound(after)
        if bound <= after:
            return FeedPage([], after, after)
        with self.db.query() as tx:
            events = self._feed.tenant_events(tx, tenant_id, after, bound, types, limit)
            if len(events) >= limit:
                return FeedPage(events, events[-1].position, events[-1].position)
            # every event of the tenant up to `bound` was read: `next` may pass its last one (of any type, so a
            # type filter does not read the same unmatched events again), never the other tenants' events
            last = self._feed.tenant_last(tx, tenant_id, after, bound) if types else None
        own = last if last is not None else events[-1].position if events else after
        return FeedPage(events, own, bound)

    def safe_bound(self, after: int) -> int:
        """The highest position past `after` below which nothing can still commit (`after` itself when none).
        A walk that met an unsettled hole and drew a fresh observation looks once more: with no writer running,
        the horizon has already passed it."""
        bound, observed = self._walk(after)
        if observed:
            bound = max(bound, self._walk(after)[0])
        return bound

    def _walk(self, after: int) -> tuple[int, bool]:
        """(bound, whether a new observation was drawn) from one read of the visible positions."""
        with self.db.read() as tx:
            horizon = self._consumers.horizon(tx)  # taken before the read, as in a dispatcher turn
            self._retire(horizon)
            start = max(after, self._settled)
            positions = self._feed.positions_after(tx, start, self.scan)
        bound = start
        for position in positions:
            if position > bound + 1 and position - 1 > self._settled:
                return bound, self._observe(positions[-1])
            bound = position
        return bound, False

    def _retire(self, horizon: int) -> None:
        with self._lock:
            if self._pending is not None and self._pending[0] <= horizon:
                self._settled = max(self._settled, self._pending[1])
                self._pending = None

    def _observe(self, upto: int) -> bool:
        """Note that every position up to `upto` settles once the horizon passes a fresh xid (one observation
        at a time); True when one was drawn now."""
        with self._lock:
            if self._pending is not None:
                return False
        xid = self._consumers.observation_xid()
        with self._lock:
            if self._pending is None:
                self._pending = (xid, upto)
        return True
