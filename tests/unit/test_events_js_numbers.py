"""JS number addition (`js_add`, `js_integer`): exact within the safe range, IEEE doubles beyond, written by
canonical JSON as JSON.stringify writes them."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from settlekit.events.canonical import MAX_SAFE_INTEGER, canonical_json
from settlekit.events.js import js_add, js_integer

SAFE = st.integers(min_value=-MAX_SAFE_INTEGER, max_value=MAX_SAFE_INTEGER)


@given(SAFE, SAFE)
def test_the_sum_of_safe_integers_is_the_double_sum(a: int, b: int) -> None:
    total = js_add(a, b)
    assert total == float(a) + float(b)
    if -MAX_SAFE_INTEGER <= a + b <= MAX_SAFE_INTEGER:
        assert type(total) is int and total == a + b
    else:
        assert type(total) is float


@given(st.lists(SAFE, max_size=6))
def test_a_running_sum_is_the_doubles_running_sum(values: list[int]) -> None:
    total: int | float = 0
    doubles = 0.0
    for v in values:
        total = js_add(total, v)
        doubles += float(v)
    assert total == doubles


def test_beyond_the_safe_range_sums_round_and_print_as_javascript_does() -> None:
    top = MAX_SAFE_INTEGER
    assert canonical_json(js_add(top, top)) == "18014398509481982"
    assert canonical_json(js_add(js_add(top, top), 1)) == "18014398509481984"  # 2^54 - 1 rounds up (ties to even)
    assert canonical_json(js_add(js_add(top, top), -top)) == "9007199254740991"
    assert canonical_json(js_add(top, 1)) == "9007199254740992"


def test_js_integer_keeps_safe_integers_and_makes_others_doubles() -> None:
    assert js_integer(MAX_SAFE_INTEGER) == MAX_SAFE_INTEGER and type(js_integer(MAX_SAFE_INTEGER)) is int
    assert type(js_integer(MAX_SAFE_INTEGER + 1)) is float
    assert canonical_json(js_integer(2**53)) == "9007199254740992"
