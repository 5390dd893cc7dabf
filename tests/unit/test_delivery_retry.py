"""Retry schedule properties, Retry-After parsing and outcome classification."""

from __future__ import annotations

import random
from datetime import UTC, datetime, timedelta
from email.utils import format_datetime

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from settlekit.delivery.retry import RetryPolicy, decide, failure_reason, parse_retry_after

MODES = ["band", "full", "decorrelated", "none"]


class Fixed:
    """rng stub returning a fixed fraction of the interval."""

    def __init__(self, frac: float):
        self.frac = frac

    def uniform(self, a: float, b: float) -> float:
        return a + (b - a) * self.frac


def test_defaults_and_settld_preset() -> None:
    p = RetryPolicy()
    assert (p.base, p.cap, p.max_attempts, p.jitter) == (2.0, 3600.0, 15, "band")
    s = RetryPolicy.settld()
    assert (s.base, s.cap, s.max_attempts) == (1.0, 60.0, 10)


def test_exponential_schedule_without_jitter() -> None:
    p = RetryPolicy(jitter="none")
    assert p.schedule()[:6] == [2, 4, 8, 16, 32, 64]
    assert p.schedule()[-1] == 3600.0
    assert len(p.schedule()) == 14
    assert RetryPolicy.settld().exponential(7) == 60.0
    assert p.exponential(10_000) == 3600.0


def test_band_jitter_bounds() -> None:
    p = RetryPolicy()
    assert p.backoff(3, rng=Fixed(0.0)) == pytest.approx(8 * 0.8)
    assert p.backoff(3, rng=Fixed(1.0)) == pytest.approx(8 * 1.2)
    assert p.backoff(1, rng=Fixed(0.0)) == 2.0  # floored at base
    assert p.backoff(20, rng=Fixed(1.0)) == pytest.approx(3600 * 1.2)


@settings(max_examples=200, deadline=None)
@given(
    mode=st.sampled_from(MODES),
    base=st.floats(0.05, 10),
    factor=st.floats(1, 1000),
    attempt=st.integers(1, 2000),
    seed=st.integers(0, 2**32),
)
def test_backoff_stays_within_bounds(mode: str, base: float, factor: float, attempt: int, seed: int) -> None:
    p = RetryPolicy(base=base, cap=base * factor, jitter=mode)  # type: ignore[arg-type]
    rng = random.Random(seed)
    prev = None
    for n in range(attempt, attempt + 5):
        d = p.backoff(n, rng=rng, previous=prev)
        assert p.base <= d <= p.cap * p.jitter_high + 1e-9
        if mode != "band":
            assert d <= p.cap + 1e-9
        prev = d


@settings(max_examples=100, deadline=None)
@given(seed=st.integers(0, 2**32))
def test_band_schedule_grows_until_cap(seed: int) -> None:
    p = RetryPolicy()
    sched = p.schedule(rng=random.Random(seed))
    for n, d in enumerate(sched, start=1):
        nominal = min(p.cap, p.base * 2 ** (n - 1))
        assert max(p.base, nominal * 0.8) - 1e-9 <= d <= nominal * 1.2 + 1e-9


def test_invalid_policies() -> None:
    for kwargs in ({"base": 0}, {"base": 5, "cap": 1}, {"max_attempts": 0}, {"jitter_low": 0}):
        with pytest.raises(ValueError):
            RetryPolicy(**kwargs)  # type: ignore[arg-type]


def test_parse_retry_after() -> None:
    now = datetime(2026, 1, 2, tzinfo=UTC)
    assert parse_retry_after("120", now=now) == 120.0
    assert parse_retry_after(" 0 ", now=now) == 0.0
    assert parse_retry_after(format_datetime(now + timedelta(seconds=90), usegmt=True), now=now) == 90.0
    assert parse_retry_after("Fri, 02 Jan 2026 00:01:00 GMT", now=now) == 60.0
    assert parse_retry_after(format_datetime(now - timedelta(hours=1), usegmt=True), now=now) == 0.0
    for bad in (None, "", "soon", "-5", "1.5", "Fri, 99 Foo 2026"):
        assert parse_retry_after(bad, now=now) is None


def test_failure_reasons() -> None:
    assert failure_reason(200, None) is None
    assert failure_reason(204, None) is None
    assert failure_reason(410, None) == "gone"
    assert failure_reason(301, None) == "non_2xx"
    assert failure_reason(None, "timeout") == "timeout"
    assert failure_reason(None, None) == "exception"


@pytest.mark.parametrize(
    ("status", "error", "kind", "reason"),
    [
        (200, None, "delivered", None),
        (299, None, "delivered", None),
        (410, None, "disable", "gone"),
        (302, None, "retry", "non_2xx"),
        (400, None, "retry", "non_2xx"),
        (401, None, "retry", "non_2xx"),
        (404, None, "retry", "non_2xx"),
        (408, None, "retry", "non_2xx"),
        (429, None, "retry", "non_2xx"),
        (500, None, "retry", "non_2xx"),
        (503, None, "retry", "non_2xx"),
        (None, "timeout", "retry", "timeout"),
        (None, "network_error", "retry", "network_error"),
        (None, "ssrf_blocked", "retry", "ssrf_blocked"),
        (None, "secret_not_found", "retry", "secret_not_found"),
    ],
)
def test_decide_classification(status: int | None, error: str | None, kind: str, reason: str | None) -> None:
    d = decide(status=status, error=error, attempts=1, policy=RetryPolicy(), rng=Fixed(0.5))
    assert (d.kind, d.reason) == (kind, reason)
    if kind == "retry":
        assert d.delay == pytest.approx(2.0)


def test_decide_max_attempts_fails_with_reason() -> None:
    p = RetryPolicy(max_attempts=3)
    assert decide(status=500, error=None, attempts=2, policy=p).kind == "retry"
    d = decide(status=500, error=None, attempts=3, policy=p)
    assert (d.kind, d.reason, d.delay) == ("failed", "non_2xx", None)
    # 410 disables even on the last attempt, 2xx always delivers
    assert decide(status=410, error=None, attempts=3, policy=p).kind == "disable"
    assert decide(status=200, error=None, attempts=99, policy=p).kind == "delivered"


def test_retry_after_raises_the_delay_and_is_capped() -> None:
    p = RetryPolicy(retry_after_max=600)
    d = decide(status=429, error=None, attempts=1, policy=p, retry_after=120, rng=Fixed(0.5))
    assert d.delay == 120
    d = decide(status=503, error=None, attempts=1, policy=p, retry_after=10**6, rng=Fixed(0.5))
    assert d.delay == 600
    # a short Retry-After never shortens the backoff
    d = decide(status=503, error=None, attempts=5, policy=p, retry_after=1, rng=Fixed(0.5))
    assert d.delay == pytest.approx(32)
    # only 429/503 honour it
    d = decide(status=500, error=None, attempts=1, policy=p, retry_after=120, rng=Fixed(0.5))
    assert d.delay == pytest.approx(2)
