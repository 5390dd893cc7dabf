"""When the client tries a request again, and how long it waits first: connection errors and the API's 429/502/
503/504 (and a request with the same Idempotency-Key still running) are retried with exponential backoff and full
jitter, never sooner than the answer's Retry-After. Writes always carry an Idempotency-Key, so a retry of a write
that did commit gets the stored answer instead of doing it twice."""

from __future__ import annotations

import random
from dataclasses import dataclass

from settlekit.client.errors import ApiError, ApiUnreachableError
from settlekit.errors import SettlekitError

RETRY_STATUSES = frozenset({429, 502, 503, 504})
RETRY_CODES = frozenset({"IDEMPOTENCY_IN_PROGRESS", "CONSUMER_PROCESSING"})


def is_transient(exc: BaseException) -> bool:
    """Whether the same request may succeed later: no answer at all, a busy or unavailable API, or the same
    idempotent request still running on the server."""
    if isinstance(exc, ApiUnreachableError):
        return True
    if isinstance(exc, ApiError):
        return exc.status in RETRY_STATUSES or exc.code in RETRY_CODES
    return False


@dataclass(frozen=True)
class RetryPolicy:
    """`attempts` tries in all (1 = no retry); the n-th wait is a random time up to `base_delay * 2**n`, capped
    at `max_delay`, and at least the server's Retry-After (itself capped at `max_retry_after`)."""

    attempts: int = 5
    base_delay: float = 0.1
    max_delay: float = 10.0
    max_retry_after: float = 60.0

    def delay(self, attempt: int, exc: SettlekitError, rng: random.Random | None = None) -> float:
        """Seconds to wait before attempt `attempt + 1` (attempts count from 1) after `exc`."""
        ceiling = min(self.max_delay, self.base_delay * (2 ** (attempt - 1)))
        backoff = (rng or random).uniform(0, ceiling)
        retry_after = exc.retry_after if isinstance(exc, ApiError) else None
        if retry_after is not None:
            backoff = max(backoff, min(retry_after, self.max_retry_after))
        return backoff

    def should_retry(self, attempt: int, exc: BaseException) -> bool:
        return attempt < self.attempts and is_transient(exc)


NO_RETRY = RetryPolicy(attempts=1)
