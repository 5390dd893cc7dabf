"""The in-process token bucket behind the per-key rate limit and the failed-authentication limit, and the
`RateLimit-Limit` / `RateLimit-Remaining` / `RateLimit-Reset` headers (IETF draft "RateLimit header fields for
HTTP", the separate-header form) describing a key's bucket."""

from __future__ import annotations

import math
import threading
import time
from collections import OrderedDict
from dataclasses import dataclass
from typing import Any

from settlekit.api.auth import token_digest
from settlekit.errors import SettlekitError


@dataclass(frozen=True)
class Quota:
    """A bucket right after a request took (or failed to take) its token: `limit` requests at most in a burst,
    `remaining` now, full again in `reset` seconds; `wait` is 0.0 when the request may go ahead, else the
    seconds until a token is available."""

    limit: int
    remaining: int
    reset: int
    wait: float

    def headers(self) -> list[tuple[bytes, bytes]]:
        """The RateLimit-* response headers (raw ASGI form)."""
        return [(b"ratelimit-limit", str(self.limit).encode()),
                (b"ratelimit-remaining", str(self.remaining).encode()),
                (b"ratelimit-reset", str(self.reset).encode())]


class RateLimitedError(SettlekitError):
    """429 RATE_LIMITED for an API key whose bucket is empty; carries the bucket for the RateLimit-* headers."""

    code = "RATE_LIMITED"
    status = 429

    def __init__(self, message: str, quota: Quota):
        super().__init__(message, retryAfterSeconds=retry_after_seconds(quota.wait))
        self.quota = quota


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

    def acquire(self, key: str) -> Quota | None:
        """Like `take`, with the bucket's state after it; None when the limiter is off (`rate` <= 0)."""
        if self.rate <= 0:
            return None
        now = self.clock()
        with self._lock:
            tokens = self._tokens(key, now)
            wait = 0.0
            if tokens >= 1.0:
                tokens -= 1.0
            else:
                wait = (1.0 - tokens) / self.rate
            self._put(key, tokens, now)
        return Quota(limit=self.burst, remaining=int(tokens), reset=math.ceil((self.burst - tokens) / self.rate),
                     wait=wait)

    def peek(self, key: str) -> float:
        """Like `take` without spending a token."""
        if self.rate <= 0:
            return 0.0
        with self._lock:
            tokens = self._tokens(key, self.clock())
        return 0.0 if tokens >= 1.0 else (1.0 - tokens) / self.rate

    def __len__(self) -> int:
        return len(self._buckets)


class RecentKeys:
    """The API keys (digests of the whole token) that authenticated in this process within `ttl` seconds, at most
    `max_entries` (least recently used dropped first). An address over its failed-authentication limit is refused
    before any lookup, except for these: one client presenting bad keys behind a shared address (a NAT, a proxy)
    does not lock out the clients there that are already working, and a guess never gets past the limit, since
    only a key that authenticated is ever added."""

    def __init__(self, ttl: float = 3600.0, max_entries: int = 50_000, clock: Any = time.monotonic):
        self.ttl = ttl
        self.max_entries = max(1, int(max_entries))
        self.clock = clock
        self._seen: OrderedDict[bytes, float] = OrderedDict()
        self._lock = threading.Lock()

    def add(self, token: str) -> None:
        digest = token_digest(token)
        with self._lock:
            self._seen[digest] = self.clock()
            self._seen.move_to_end(digest)
            while len(self._seen) > self.max_entries:
                self._seen.popitem(last=False)

    def discard(self, token: str) -> None:
        with self._lock:
            self._seen.pop(token_digest(token), None)

    def __contains__(self, token: object) -> bool:
        if not isinstance(token, str):
            return False
        digest = token_digest(token)
        with self._lock:
            seen = self._seen.get(digest)
            if seen is not None and self.clock() - seen > self.ttl:
                del self._seen[digest]
                seen = None
        return seen is not None

    def __len__(self) -> int:
        return len(self._seen)


def retry_after_seconds(wait: float) -> int:
    return max(1, math.ceil(wait))
