"""Retry schedule and attempt-outcome classification (spec 06 §5).

Backoff after the n-th failed attempt (n ≥ 1), by `jitter` mode:

- `band` (spec default): `max(base, min(cap, base·2^(n−1)) · U(low, high))`, low/high = 0.8/1.2 (±20 %).
- `full`: `max(base, U(0, min(cap, base·2^(n−1))))` — AWS "full jitter" with a floor of `base`.
- `decorrelated`: `min(cap, U(base, 3·previous))`, previous = the last delay (base for the first) — AWS
  "decorrelated jitter"; pass the previous delay in.
- `none`: `min(cap, base·2^(n−1))` (deterministic; for tests and documentation).

Every mode stays within `[base, cap·high]`; results never exceed `cap` except by the `band` upper jitter.
A `Retry-After` on 429/503 raises the delay to at least its value, capped by `retry_after_max`.
"""

from __future__ import annotations

import math
import random
from dataclasses import dataclass
from datetime import UTC, datetime
from email.utils import parsedate_to_datetime
from typing import Final, Literal, Protocol

JitterMode = Literal["band", "full", "decorrelated", "none"]
DecisionKind = Literal["delivered", "retry", "failed", "disable"]

# Failure reasons stored in deliveries.last_error (spec 06 §5).
TIMEOUT: Final = "timeout"
NETWORK_ERROR: Final = "network_error"
NON_2XX: Final = "non_2xx"
GONE: Final = "gone"
SSRF_BLOCKED: Final = "ssrf_blocked"
SECRET_REF_INVALID: Final = "secret_ref_invalid"
SECRET_NOT_FOUND: Final = "secret_not_found"
SECRET_PROVIDER_FORBIDDEN: Final = "secret_provider_forbidden"
MISSING_ARTIFACT: Final = "missing_artifact"
UNKNOWN_DESTINATION: Final = "unknown_destination"
EXCEPTION: Final = "exception"
CRASH_LOOP: Final = "crash_loop"  # claimed too often without a recorded outcome: never sent again
SECRET_FILE_REFUSED: Final = "secret_file_refused"  # a legacy file: secret ref; the destination is disabled
TERMINAL: Final = frozenset({CRASH_LOOP})  # fail at once, whatever the attempts left
DISABLING: Final = frozenset({GONE, SECRET_FILE_REFUSED})  # disable the destination, fail this delivery

RETRY_AFTER_STATUSES: Final = frozenset({429, 503})


class _Uniform(Protocol):
    def uniform(self, a: float, b: float) -> float: ...


@dataclass(frozen=True)
class RetryPolicy:
    base: float = 2.0
    cap: float = 3600.0
    max_attempts: int = 15
    jitter: JitterMode = "band"
    jitter_low: float = 0.8
    jitter_high: float = 1.2
    retry_after_max: float = 86400.0

    def __post_init__(self) -> None:
        if self.base <= 0 or self.cap < self.base:
            raise ValueError("need 0 < base <= cap")
        if self.max_attempts < 1:
            raise ValueError("max_attempts must be >= 1")
        if not 0 < self.jitter_low <= self.jitter_high:
            raise ValueError("need 0 < jitter_low <= jitter_high")

    @classmethod
    def settld(cls) -> RetryPolicy:
        """settld 0.1.0 preset: base 1 s, cap 60 s, 10 attempts."""
        return cls(base=1.0, cap=60.0, max_attempts=10)

    def exponential(self, attempt: int) -> float:
        """Un-jittered delay after attempt `attempt` (1-based): min(cap, base·2^(attempt−1))."""
        n = max(1, attempt)
        if n - 1 >= 1024:  # 2**1024 overflows a float; the cap has long been reached
            return self.cap
        return min(self.cap, self.base * math.pow(2.0, n - 1))

    def backoff(self, attempt: int, *, rng: _Uniform | None = None, previous: float | None = None) -> float:
        """Seconds to wait after failed attempt number `attempt` (1-based)."""
        r = rng or random
        d = self.exponential(attempt)
        if self.jitter == "band":
            return max(self.base, d * r.uniform(self.jitter_low, self.jitter_high))
        if self.jitter == "full":
            return max(self.base, r.uniform(0.0, d))
        if self.jitter == "decorrelated":
            prev = self.base if previous is None else max(self.base, previous)
            return min(self.cap, r.uniform(self.base, prev * 3.0))
        return d

    def schedule(self, *, rng: _Uniform | None = None) -> list[float]:
        """The delays after attempts 1..max_attempts−1 (the last attempt fails the delivery)."""
        out: list[float] = []
        prev: float | None = None
        for n in range(1, self.max_attempts):
            prev = self.backoff(n, rng=rng, previous=prev)
            out.append(prev)
        return out


def parse_retry_after(value: str | None, *, now: datetime | None = None) -> float | None:
    """Seconds from a `Retry-After` value (delta-seconds or HTTP-date); None when absent or unparseable.

    Past dates give 0.
    """
    if value is None:
        return None
    text = value.strip()
    if not text:
        return None
    if text.isascii() and text.isdigit():
        return float(int(text))
    try:
        when = parsedate_to_datetime(text)
    except (TypeError, ValueError, IndexError):
        return None
    if when is None:
        return None
    if when.tzinfo is None:
        when = when.replace(tzinfo=UTC)
    current = datetime.now(UTC) if now is None else now
    return max(0.0, (when - current).total_seconds())


@dataclass(frozen=True)
class Decision:
    """What to do with a delivery after an attempt. `delay` is seconds until the next attempt (retry only)."""

    kind: DecisionKind
    reason: str | None = None
    delay: float | None = None


def failure_reason(status: int | None, error: str | None) -> str | None:
    """The `last_error` reason of an attempt, or None for a 2xx."""
    if error is not None:
        return error
    if status is None:
        return EXCEPTION
    if 200 <= status < 300:
        return None
    if status == 410:
        return GONE
    return NON_2XX


def decide(
    *,
    status: int | None,
    error: str | None,
    attempts: int,
    policy: RetryPolicy,
    retry_after: float | None = None,
    previous_delay: float | None = None,
    rng: _Uniform | None = None,
) -> Decision:
    """Classify one attempt (`attempts` counts it) into delivered / disable / retry / failed.

    - 2xx → delivered; 410 → disable the destination and fail this delivery (reason `gone`); a refused legacy
      `file:` secret reference likewise (reason `secret_file_refused`); a crash loop → failed at once;
    - anything else (3xx, 408, 429, other 4xx, 5xx, timeout, network error, SSRF refusal, secret errors) →
      retry after the backoff, or at least `Retry-After` (429/503, capped by `retry_after_max`);
    - once `attempts >= max_attempts` a retryable outcome fails the delivery (the DLQ) with its reason.
    """
    reason = failure_reason(status, error)
    if reason is None:
        return Decision("delivered")
    if reason in DISABLING:
        return Decision("disable", reason)
    if reason in TERMINAL:
        return Decision("failed", reason)
    if attempts >= policy.max_attempts:
        return Decision("failed", reason)
    delay = policy.backoff(attempts, rng=rng, previous=previous_delay)
    if retry_after is not None and status in RETRY_AFTER_STATUSES:
        delay = max(delay, min(retry_after, policy.retry_after_max))
    return Decision("retry", reason, delay)
