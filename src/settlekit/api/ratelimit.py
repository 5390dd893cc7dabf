"""The in-process token bucket behind the per-key rate limit and the failed-authentication limit."""

from __future__ import annotations

import math
import threading
import time
from collections import OrderedDict
from typing import Any


class RateLimiter:
    """In-process token bucket per key (an API key id, a client address): `rate` tokens per second, at most
    `burst` saved. At most `max_entries` buckets are kept (least recently used dropped first): memory is bounded
    whatever the number of keys or addresses seen."""

    def __init__(self, rate: float, burst: int, clock: Any = time.monotonic, max_entries: int = 100_000):
        self.rate = float(rate)
        self.burst = max(1, int(burst))
        self.clock = clock
        self.max_entries = max(1, int(max_entries))
        self._buckets: OrderedDict[str, tuple[float, float]] = OrderedDict()
        self._lock = threading.Lock()

    def _tokens(self, key: str, now: float) -> float:
        tokens, last = self._buckets.get(key, (float(self.burst), now))
        return min(float(self.burst), tokens + (now - last) * self.rate)

    def _put(self, key: str, tokens: float, now: float) -> None:
        self._buckets[key] = (tokens, now)
        self._buckets.move_to_end(key)
        while len(self._buckets) > self.max_entries:
            self._buckets.popitem(last=False)

    def take(self, key: str) -> float:
        """0.0 when a request may go ahead, else the seconds until a token is available."""
        if self.rate <= 0:
            return 0.0
        now = self.clock()
        with self._lock:
            tokens = self._tokens(key, now)
            if tokens >= 1.0:
                self._put(key, tokens - 1.0, now)
                return 0.0
            self._put(key, tokens, now)
            return (1.0 - tokens) / self.rate

    def peek(self, key: str) -> float:
        """Like `take` without spending a token."""
        if self.rate <= 0:
            return 0.0
        with self._lock:
            tokens = self._tokens(key, self.clock())
        return 0.0 if tokens >= 1.0 else (1.0 - tokens) / self.rate

    def __len__(self) -> int:
        return len(self._buckets)


def retry_after_seconds(wait: float) -> int:
    return max(1, math.ceil(wait))
