"""Pure pending-gap bookkeeping: holes, merging, resolution and the exact retirement conditions."""

from __future__ import annotations

import sys

from settlekit.dispatch.gaps import holes, merge, remove_position, settle
from settlekit.store.consumers import Gap, dump_gaps, parse_gaps


def test_holes_between_fetched_positions_below_the_new_cursor() -> None:
    assert holes(10, 20, [12, 13, 17, 20, 25]) == [(11, 11), (14, 16), (18, 19)]
    assert holes(10, 10, [12]) == []
    assert holes(0, 3, [1, 2, 3]) == []


def test_merge_adjacent_keeps_larger_xmax() -> None:
    assert merge([Gap(5, 6, 9), Gap(1, 2, 7), Gap(3, 4, 8), Gap(10, 10, 1)]) == [Gap(1, 6, 9), Gap(10, 10, 1)]


def test_json_round_trip_stores_xmax_as_string() -> None:
    gaps = [Gap(3, 4, 2**40)]
    assert '"xmax":"1099511627776"' in dump_gaps(gaps)
    assert parse_gaps(dump_gaps(gaps)) == gaps


def test_resolved_positions_split_their_range() -> None:
    out, n_resolved, n_retired = settle([Gap(1, 5, 100)], resolved=[3], fetched=[3], horizon=50, complete_upto=9)
    assert out == [Gap(1, 2, 100), Gap(4, 5, 100)] and (n_resolved, n_retired) == (1, 0)


def test_retire_needs_horizon_at_or_past_xmax() -> None:
    gaps = [Gap(1, 3, 100)]
    assert settle(gaps, resolved=[], fetched=[], horizon=99, complete_upto=sys.maxsize)[0] == gaps
    out, _, retired = settle(gaps, resolved=[], fetched=[], horizon=100, complete_upto=sys.maxsize)
    assert out == [] and retired == 3


def test_retire_keeps_fetched_but_undelivered_and_incomplete_positions() -> None:
    # fetched 2 (visible, but the turn halted before delivering it); the fetch was complete only up to 4
    out, _, retired = settle([Gap(1, 6, 10)], resolved=[], fetched=[2, 4], horizon=20, complete_upto=4)
    assert out == [Gap(2, 2, 10), Gap(4, 6, 10)] and retired == 2


def test_remove_position() -> None:
    assert remove_position([Gap(1, 3, 5), Gap(7, 7, 1)], 2) == [Gap(1, 1, 5), Gap(3, 3, 5), Gap(7, 7, 1)]
    assert remove_position([Gap(7, 7, 1)], 7) == []
