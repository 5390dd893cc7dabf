"""Pending-gap bookkeeping (05-dispatcher.md §6): pure functions over inclusive position ranges
(stored as JSON by settlekit.store.consumers)."""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from settlekit.store.consumers import Gap


def _earliest(a: float, b: float) -> float:
    """The earlier of two `seen_at` values, 0 (unknown) only when both are."""
    return min(a, b) if a and b else (a or b)


def merge(gaps: Iterable[Gap]) -> list[Gap]:
    """Sort and merge overlapping or adjacent ranges; a merged range keeps the larger xmax and the earlier
    `seen_at`."""
    out: list[Gap] = []
    for g in sorted(gaps, key=lambda g: g.lo):
        if out and g.lo <= out[-1].hi + 1:
            last = out[-1]
            out[-1] = Gap(last.lo, max(last.hi, g.hi), max(last.xmax, g.xmax), _earliest(last.seen_at, g.seen_at))
        else:
            out.append(g)
    return out


def oldest_seen_at(gaps: Sequence[Gap]) -> float | None:
    """When the oldest pending range was first recorded (unix seconds), None without gaps or timestamps."""
    known = [g.seen_at for g in gaps if g.seen_at]
    return min(known) if known else None


def _minus(lo: int, hi: int, xmax: int, remove: Sequence[int], seen_at: float = 0.0) -> list[Gap]:
    """[lo, hi] without the sorted positions in `remove`."""
    out: list[Gap] = []
    start = lo
    for p in remove:
        if p < start or p > hi:
            continue
        if p > start:
            out.append(Gap(start, p - 1, xmax, seen_at))
        start = p + 1
    if start <= hi:
        out.append(Gap(start, hi, xmax, seen_at))
    return out


def holes(start_cursor: int, new_cursor: int, fetched_above: Sequence[int]) -> list[tuple[int, int]]:
    """Positions in (start_cursor, new_cursor) that were not fetched, as inclusive ranges."""
    out: list[tuple[int, int]] = []
    prev = start_cursor
    for p in fetched_above:
        if p > new_cursor:
            break
        if p > prev + 1:
            out.append((prev + 1, p - 1))
        prev = p
    return out


def settle(
    gaps: Sequence[Gap],
    *,
    resolved: Iterable[int],
    fetched: Iterable[int],
    horizon: int | None,
    complete_upto: int,
) -> tuple[list[Gap], int, int]:
    """Apply one turn's outcome to the pending gaps.

    `resolved`: gap positions delivered (or skipped) this turn. `fetched`: every position the fetch returned.
    A range whose xmax is at or below `horizon` (xmin at the start of the turn; None = never) retires its
    positions that the fetch did not return, as far as the fetch was complete (`complete_upto`).
    Returns (remaining gaps, positions resolved, positions retired).
    """
    resolved_set = set(resolved)
    fetched_set = set(fetched)
    out: list[Gap] = []
    n_resolved = 0
    n_retired = 0
    for g in gaps:
        in_range_resolved = sorted(p for p in resolved_set if g.lo <= p <= g.hi)
        n_resolved += len(in_range_resolved)
        if horizon is not None and g.xmax <= horizon:
            keep = sorted(p for p in fetched_set if g.lo <= p <= g.hi and p not in resolved_set)
            kept_tail = max(g.lo, complete_upto + 1)
            retired = max(0, min(g.hi, complete_upto) - g.lo + 1)
            retired -= sum(1 for p in fetched_set if g.lo <= p <= min(g.hi, complete_upto))
            n_retired += retired
            out.extend(Gap(p, p, g.xmax, g.seen_at) for p in keep)
            if kept_tail <= g.hi:
                out.append(Gap(kept_tail, g.hi, g.xmax, g.seen_at))
        else:
            out.extend(_minus(g.lo, g.hi, g.xmax, in_range_resolved, g.seen_at))
    return merge(out), n_resolved, n_retired


def remove_position(gaps: Sequence[Gap], position: int) -> list[Gap]:
    out: list[Gap] = []
    for g in gaps:
        out.extend(_minus(g.lo, g.hi, g.xmax, [position], g.seen_at) if g.lo <= position <= g.hi else [g])
    return out
