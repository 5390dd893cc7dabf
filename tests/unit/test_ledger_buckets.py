"""The bucket levels of the ledger timeline: a sum "as of K" over bucket sums equals the sum of the values up to K;
instants and cursors parse strictly."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from settlekit.ledger.timeline import (
    LEVELS,
    PARTY_LEVELS,
    buckets_of,
    decode_cursor,
    encode_cursor,
    epoch_millis,
    levels_of,
    millis_to_iso,
    parse_instant,
    prefix_ranges,
)


def _as_of(sizes: tuple[int, ...], values: list[int], as_of: int) -> int:
    """Each value counts 1: sum the buckets and the finest bucket's values the way the store query does."""
    sums: dict[tuple[int, int], int] = {}
    for value in values:
        for key in buckets_of(sizes, value):
            sums[key] = sums.get(key, 0) + 1
    ranges, tail = prefix_ranges(sizes, as_of)
    total = sum(n for (level, bucket), n in sums.items() for lv, low, high in ranges
                if level == lv and bucket < high and (low is None or bucket >= low))
    return total + sum(1 for v in values if tail <= v <= as_of)


@settings(max_examples=300, deadline=None)
@given(axis=st.sampled_from(["t", "p"]), party=st.sampled_from(["", "pty_1"]), data=st.data())
def test_bucket_sums_as_of_equal_the_plain_count(axis: str, party: str, data: st.DataObject) -> None:
    sizes = levels_of(axis, party)  # type: ignore[arg-type]
    span = sizes[0] * 3
    values = data.draw(st.lists(st.one_of(st.integers(0, span), st.integers(sizes[-1] * 5, sizes[-1] * 7)),
                                max_size=40))
    as_of = data.draw(st.one_of(st.integers(-1, span + 1), st.sampled_from(values or [0])))
    assert _as_of(sizes, values, as_of) == sum(1 for v in values if v <= as_of)


def test_levels_nest() -> None:
    for sizes in (*LEVELS.values(), *PARTY_LEVELS.values()):
        assert all(big % small == 0 for big, small in zip(sizes, sizes[1:], strict=False))


def test_instants() -> None:
    assert parse_instant("2026-01-31T23:59:59.9999Z") == epoch_millis("2026-01-31T23:59:59.999Z")
    assert parse_instant("2026-02-01T01:00:00+01:00") == epoch_millis("2026-02-01T00:00:00.000Z")
    assert millis_to_iso(epoch_millis("2026-01-05T10:00:20.000Z")) == "2026-01-05T10:00:20.000Z"
    for bad in ("2026-01-31", "2026-01-31T00:00:00", "tomorrow", ""):
        assert parse_instant(bad) is None, bad


def test_cursors_belong_to_their_listing() -> None:
    cursor = encode_cursor("acct_cash", "", (7, 0, 1))
    assert decode_cursor(cursor, "acct_cash", "") == (7, 0, 1)
    assert decode_cursor(cursor, "acct_cash", "pty_x") is None
    assert decode_cursor(cursor, "acct_other", "") is None
    for bad in ("", "!!", encode_cursor("acct_cash", "", (-1, 0, 0)), "WzFd"):
        assert decode_cursor(bad, "acct_cash", "") is None
