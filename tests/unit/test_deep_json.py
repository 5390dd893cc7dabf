"""JSON at any depth node reads: `parse_json` and `canonical_json` work without recursion past what Python's own
parsers and encoders take, so a stream with a payload nested thousands of levels verifies, posts and builds."""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from settlekit.errors import CanonicalJsonError
from settlekit.events.canonical import (
    _write_slow,
    canonical_json,
    js_float,
    js_int,
    parse_json,
    parse_json_deep,
)
from settlekit.events.envelope import finalize, make_draft, verify_chain
from settlekit.jobs import process_job_events

_json = st.recursive(
    st.none() | st.booleans() | st.integers(-(2**60), 2**60) | st.text(max_size=5)
    | st.floats(allow_nan=False, allow_infinity=False),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(
        st.sampled_from(["a", "b", "10", "9", "__proto__", "é", "\U0001f600", ""]), inner, max_size=4),
    max_leaves=30,
)


def _nested(depth: int) -> Any:
    value: Any = "bottom"
    for level in range(depth):
        value = [value] if level % 2 else {"d": value, "__proto__": level}
    return value


@given(_json)
def test_the_iterative_parser_reads_as_the_standard_one(value: Any) -> None:
    for text in (json.dumps(value), json.dumps(value, indent=1), json.dumps(value, ensure_ascii=False)):
        expected = json.loads(text, parse_int=js_int, parse_float=js_float)
        assert json.dumps(parse_json_deep(text)) == json.dumps(expected)


@given(_json)
def test_the_iterative_writer_writes_as_the_fast_path(value: Any) -> None:
    try:
        expected = canonical_json(value)
    except CanonicalJsonError as exc:
        with pytest.raises(CanonicalJsonError) as again:
            _write_slow(value)
        assert again.value.message == exc.message
        return
    assert _write_slow(value) == expected


@pytest.mark.parametrize("text", ["[1,]", '{"a":1,}', "[", '{"a"}', "01", "[1]x", "NaN", "[Infinity]", '["a\x01"]',
                                  "", " ", "{'a':1}", "[1 2]", '{"a":1 "b":2}', "tru", "-", "1.", ".5", "1e"])
def test_the_iterative_parser_refuses_what_json_parse_refuses(text: str) -> None:
    with pytest.raises(ValueError):
        parse_json_deep(text)


@pytest.mark.parametrize("depth", [1100, 2200, 5000])
def test_deep_values_parse_and_write_back_alike(depth: int) -> None:
    value = _nested(depth)
    text = canonical_json(value, keep_proto=True)
    assert canonical_json(parse_json(text), keep_proto=True) == text
    assert canonical_json(parse_json(text)) == canonical_json(value)
    assert '"__proto__"' not in canonical_json(value) and '"__proto__"' in text


def test_a_stream_with_a_deep_payload_verifies_and_reduces() -> None:
    events, prev = [], None
    for i, (t, payload) in enumerate([("JOB_CREATED", {"templateId": "t", "constraints": {"deep": _nested(2000)}}),
                                      ("QUOTE_PROPOSED", {"amountCents": 100, "currency": "USD",
                                                          "deep": _nested(1500)})]):
        draft = make_draft(stream_id="job_deep", type=t, actor={"type": "system", "id": "proxy"}, payload=payload,
                           at=f"2026-01-05T10:00:0{i}.000Z", id=f"evt_deep_{i}")
        events.append(finalize(draft, prev))
        prev = events[-1]["chainHash"]
    read = parse_json(canonical_json(events))
    verify_chain(read)
    assert process_job_events(None, read).snapshot["status"] == "QUOTED"
