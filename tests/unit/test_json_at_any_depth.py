"""JSON values nested far deeper than Python's recursion limit (imported history may nest thousands of levels):
parsed, written, compared and walked without recursion, where the standard library's recursive code gives up."""

from __future__ import annotations

import json
from typing import Any

import pytest

from settlekit.api.responses import dumps
from settlekit.errors import CanonicalJsonError, ValidationError
from settlekit.events.canonical import (
    canonical_json,
    find_lone_surrogate,
    parse_json,
    plain_json,
    require_well_formed,
    same_json,
    storable_json,
    storable_size,
)
from settlekit.events.recorded import MAX_RECORDED_DEPTH, check_nesting

LEVELS = 100_000


def nested(levels: int, bottom: Any) -> Any:
    """`levels` arrays and objects, alternating from the inside out: `[{"k": [ … bottom … ]}]`."""
    value = bottom
    for n in range(levels):
        value = {"k": value, "a": n} if n % 2 else [value, n]
    return value


def nested_text(levels: int, bottom: str, *, sort_keys: bool) -> str:
    """The compact JSON text of `nested(levels, …)` whose bottom is written `bottom`."""
    opening, closing = [], []
    for n in range(levels - 1, -1, -1):
        if n % 2:
            opening.append(f'{{"a":{n},"k":' if sort_keys else '{"k":')
            closing.append("}" if sort_keys else f',"a":{n}}}')
        else:
            opening.append("[")
            closing.append(f",{n}]")
    return "".join(opening) + bottom + "".join(reversed(closing))


@pytest.fixture(scope="module")
def deep() -> Any:
    return nested(LEVELS, "bottom")


def test_the_standard_library_gives_up_on_such_values(deep: Any) -> None:
    with pytest.raises(RecursionError):
        json.dumps(deep)
    with pytest.raises(RecursionError):
        json.loads(nested_text(LEVELS, '"bottom"', sort_keys=False))
    with pytest.raises(RecursionError):
        assert deep == nested(LEVELS, "bottom")


def test_plain_json_writes_what_json_dumps_writes_at_any_depth(deep: Any) -> None:
    for shallow in ({"a": [1, 2.5, None, True, False, "é\n\u2028"], "b": {}, "c": []}, {1: 2, None: 3, 2.5: 1},
                    [], {}, "x", 1e100, -0.0, (1, 2), nested(300, "x")):
        assert plain_json(shallow) == json.dumps(shallow, ensure_ascii=False, separators=(",", ":"),
                                                 allow_nan=False)
    text = nested_text(LEVELS, '"bottom"', sort_keys=False)
    assert plain_json(deep) == text
    assert storable_json(deep) == text and storable_size(deep) == len(text)
    assert dumps(deep) == text.encode("utf-8")
    with pytest.raises(ValueError):
        plain_json(nested(LEVELS, float("nan")))
    with pytest.raises(TypeError):
        plain_json(nested(LEVELS, object()))


def test_parse_json_reads_it_back(deep: Any) -> None:
    text = nested_text(LEVELS, '"bottom"', sort_keys=False)
    assert same_json(parse_json(text), deep) and same_json(parse_json(text.encode("utf-8")), deep)
    # JavaScript's numbers and a lone surrogate escape, at the bottom
    back = parse_json(nested_text(LEVELS, '[9007199254740993,2.0,"\\udc00"]', sort_keys=False))
    assert same_json(back, nested(LEVELS, [9007199254740992.0, 2, "\udc00"]))


def test_canonical_json_sorts_and_writes_it(deep: Any) -> None:
    assert canonical_json(deep) == nested_text(LEVELS, '"bottom"', sort_keys=True)
    with pytest.raises(CanonicalJsonError) as exc:
        canonical_json(nested(LEVELS, 2**60))
    assert exc.value.details["path"].startswith("$.k[0].k[0].k")


def test_walks_find_a_lone_surrogate_and_a_proto_key_at_the_bottom() -> None:
    surrogate = nested(LEVELS, "\ud800")
    found = find_lone_surrogate(surrogate)
    assert found is not None and found.startswith("$.k[0].k[0]") and found.count(".k") == LEVELS // 2
    assert storable_json(surrogate) == nested_text(LEVELS, '"\\ud800"', sort_keys=False)
    with pytest.raises(CanonicalJsonError):
        require_well_formed(surrogate)
    assert find_lone_surrogate(nested(LEVELS, {"\udc00": 1})).endswith('["<key>"]')
    proto = nested(LEVELS, {"__proto__": 1})
    require_well_formed(proto)
    with pytest.raises(CanonicalJsonError) as exc:
        require_well_formed(proto, hashed_keys=True)
    assert exc.value.details["path"].endswith(".__proto__")
    assert find_lone_surrogate(nested(LEVELS, "fine")) is None


def test_same_json_compares_at_any_depth(deep: Any) -> None:
    assert same_json(deep, nested(LEVELS, "bottom"))
    assert not same_json(deep, nested(LEVELS, "other"))
    assert not same_json(deep, nested(LEVELS, ["bottom"]))
    assert same_json({"a": 1}, {"a": 1.0}) and not same_json([1], (1,)) and not same_json({"a": 1}, {"b": 1})


def test_recorded_events_nest_at_most_the_bound() -> None:
    event: dict[str, Any] = {"id": "evt_1", "payload": nested(MAX_RECORDED_DEPTH - 1, "x")}
    check_nesting(event, 0)  # the event's own object is the first level
    with pytest.raises(ValidationError) as exc:
        check_nesting({**event, "payload": [event["payload"]]}, 3)
    assert (exc.value.code, exc.value.details["index"]) == ("JSON_INVALID", 3)
    with pytest.raises(ValidationError):
        check_nesting({"payload": nested(LEVELS, "x")}, 0)


def test_the_payload_validators_walk_without_recursion(deep: Any) -> None:
    """settld's access and booking checks walk whole values (secret-named keys, the policy snapshot's canonical
    text): the same answers as before, at any depth."""
    from settlekit.jobs.api_payloads._js import Rejected
    from settlekit.jobs.api_payloads.access import _forbidden_key_path
    from settlekit.jobs.api_payloads.booking import _canonical_text, _comparable_text
    from settlekit.jobs.server_rules import _copy_tree

    assert _forbidden_key_path({"a": [{"b": 1}, {"pin": 2}], "token": 1}) == "a[1].pin"
    assert _forbidden_key_path([{"x": {"Secret": 1}}]) == "[0].x.Secret"
    assert _forbidden_key_path({"b": 1, "2": {"code": 1}, "1": {"ok": [{"passcode": 1}]}}) == "1.ok[0].passcode"
    assert _forbidden_key_path({"a": [1, {"b": None}]}) is None
    found = _forbidden_key_path(nested(LEVELS, {"lockCode": 1}))
    assert found is not None and found.startswith("k[0].k[0]") and found.endswith("[0].lockCode")
    assert _forbidden_key_path(deep) is None

    assert _canonical_text(deep) == canonical_json(deep)
    assert _canonical_text({"b": [1, 2.5, None, True], "a": {"__proto__": 1, "10": "x", "9": "y"}}) == (
        '{"a":{"9":"y","10":"x"},"b":[1,2.5,null,true]}')
    assert _comparable_text(deep) == canonical_json(deep)
    with pytest.raises(Rejected) as exc:
        _comparable_text(nested(LEVELS, -0.0))
    assert str(exc.value).startswith("Unsupported number for canonical JSON: -0 at $.k[0].k[0]")
    with pytest.raises(Rejected) as exc:
        _comparable_text(nested(LEVELS, {"__proto__": {}}))
    assert str(exc.value) == "Unsupported object for canonical JSON: non-plain object"

    copied = _copy_tree(deep)
    assert same_json(copied, deep) and copied is not deep and copied["k"] is not deep["k"]
    assert list(_copy_tree({"b": 1, "a": [2, {"c": 3}]})) == ["b", "a"]
