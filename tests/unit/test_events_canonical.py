"""Canonical JSON and envelope vectors, plus property tests."""

from __future__ import annotations

import json
import math
import re

import pytest
from hypothesis import given
from hypothesis import strategies as st

from conftest import load_vector, scenario_names
from settlekit.api.guards import parse_body
from settlekit.errors import CanonicalJsonError, VerificationError
from settlekit.events.canonical import (
    UNDEFINED,
    _has_negative_zero,
    canonical_hash,
    canonical_json,
    find_lone_surrogate,
    js_float,
    js_int,
    js_number,
    normalize,
    parse_json,
    require_well_formed,
    sha256_hex,
    storable_json,
    storable_size,
)
from settlekit.events.envelope import (
    Signer,
    compute_chain_hash,
    compute_payload_hash,
    finalize,
    key_id_for_public_pem,
    parse_keys_file,
    slice_through_chain_hash,
    verify_chain,
)

ENVELOPE = load_vector("envelope.json")


@pytest.mark.parametrize("case", ENVELOPE["canonical"], ids=lambda c: c["name"])
def test_canonical_vectors(case: dict) -> None:
    text = canonical_json(case["input"])
    assert text == case["canonical"]
    assert sha256_hex(text) == case["sha256"]
    assert len(text.encode("utf-8")) == case["utf8Bytes"]


def test_spec_vectors() -> None:
    e1 = {"v": 1, "id": "evt_1", "at": "2026-01-01T00:00:00.000Z", "streamId": "job_1", "type": "JOB_CREATED",
          "actor": {"type": "system", "id": "proxy"},
          "payload": {"templateId": "reset_lite", "constraints": {}, "tenantId": "tenant_default"}}
    ph1 = compute_payload_hash(e1)
    assert ph1 == "5c0f12c3fd42de75b629c5f68174362442a86c99cc98e7c844c8c7c829008d2e"
    ch1 = compute_chain_hash(None, ph1)
    assert ch1 == "593798237039d02e4fdfb561fc1e043368f99bda2725e1653a81a7df597e1860"
    e2 = {**e1, "id": "evt_2", "at": "2026-01-01T00:01:00.000Z", "type": "QUOTE_PROPOSED",
          "actor": {"type": "pricing", "id": "pricing_v1"},
          "payload": {"amountCents": 6500, "currency": "USD", "z": 1.5, "a": [True, None, "é"]}}
    ph2 = compute_payload_hash(e2)
    assert ph2 == "1418432e341de83e657e6b8a368e4c34caf888092c329c10f457cb364940fca7"
    assert compute_chain_hash(ch1, ph2) == "e0dd2745faeb428666618ceffcee42376d30d4eed1d7a579856d925d6aa8d3d6"
    pem = "-----BEGIN PUBLIC KEY-----\nMCowBQYDK2VwAyEA\n-----END PUBLIC KEY-----\n"
    assert key_id_for_public_pem(pem) == "key_35a6d320445946f549882d58"


def test_signed_event_vector() -> None:
    signed = ENVELOPE["signedEvent"]
    assert key_id_for_public_pem(signed["publicKeyPem"]) == signed["keyId"]
    signer = Signer.from_pem(signed["privateKeyPem"], signed["publicKeyPem"])
    draft = {k: signed["event"][k] for k in ("v", "id", "at", "streamId", "type", "actor", "payload")}
    from settlekit.events.envelope import payload_material

    assert payload_material(draft) == signed["payloadHashMaterial"]
    assert finalize(draft, None, signer) == signed["event"]
    verify_chain(signed["chain"], {signed["keyId"]: signed["publicKeyPem"]})


@pytest.mark.parametrize("name", scenario_names())
def test_scenario_streams_verify_and_rehash(name: str) -> None:
    vector = load_vector(name)
    keys = parse_keys_file(vector["signers"])
    verify_chain(vector["events"], keys)
    prev = None
    for event in vector["events"]:
        assert compute_payload_hash(event) == event["payloadHash"]
        assert compute_chain_hash(prev, event["payloadHash"]) == event["chainHash"]
        prev = event["chainHash"]


def test_verify_reports_first_bad_index() -> None:
    vector = load_vector("settle_completed.json")
    keys = parse_keys_file(vector["signers"])
    events = [dict(e) for e in vector["events"]]
    events[5] = {**events[5], "payload": {**(events[5]["payload"] or {}), "tampered": True}}
    with pytest.raises(VerificationError) as err:
        verify_chain(events, keys)
    assert err.value.index == 5 and err.value.code == "PAYLOAD_HASH_MISMATCH"
    events = [dict(e) for e in vector["events"]]
    events[3]["prevChainHash"] = events[1]["chainHash"]
    with pytest.raises(VerificationError) as err:
        verify_chain(events, keys)
    assert err.value.index == 3 and err.value.code == "CHAIN_BREAK"
    with pytest.raises(VerificationError) as err:
        verify_chain(vector["events"], {})
    assert err.value.code == "SIGNER_UNKNOWN" and err.value.index == 0
    events = [dict(e) for e in vector["events"]]
    other = Signer.generate()
    events[2]["signature"] = other.sign_payload_hash(events[2]["payloadHash"])
    with pytest.raises(VerificationError) as err:
        verify_chain(events, keys)
    assert err.value.index == 2 and err.value.code == "SIG_INVALID"


def test_slice_through_chain_hash() -> None:
    events = load_vector("settle_aborted.json")["events"]
    assert slice_through_chain_hash(events, events[2]["chainHash"]) == events[:3]
    with pytest.raises(Exception) as err:
        slice_through_chain_hash(events, "0" * 64)
    assert getattr(err.value, "code", None) == "ATCHAINHASH_NOT_FOUND"


@pytest.mark.parametrize(
    ("value", "path"),
    [
        ({"a": float("nan")}, "$.a"),
        ({"a": [1, float("inf")]}, "$.a[1]"),
        ({"a": {"b": -0.0}}, "$.a.b"),
        ({"n": 2**53}, "$.n"),
        ({"t": (1, 2)}, "$.t"),
        ({"s": {1, 2}}, "$.s"),
        ({"b": b"x"}, "$.b"),
        ({1: "a"}, "$"),
    ],
)
def test_rejections_name_the_path(value: object, path: str) -> None:
    with pytest.raises(CanonicalJsonError) as err:
        canonical_json(value)
    assert err.value.details["path"] == path
    assert err.value.code == "SCHEMA_INVALID"


def test_js_number_formatting() -> None:
    cases = {0.1: "0.1", 1e21: "1e+21", 1e-7: "1e-7", -0.5: "-0.5", 100.0: "100", 2.5e-6: "0.0000025",
             1e20: "100000000000000000000", 5e-324: "5e-324", 1.7976931348623157e308: "1.7976931348623157e+308",
             123456789012345680000.0: "123456789012345680000", 1.5e-5: "0.000015", 1e-6: "0.000001",
             -1e-7: "-1e-7", 0.000001234: "0.000001234", 1.2345e25: "1.2345e+25", 2**53 * 1.0: "9007199254740992"}
    for value, text in cases.items():
        assert js_number(value) == text, value
        assert canonical_json(value) == text


def test_normalize_drops_undefined() -> None:
    assert normalize({"a": UNDEFINED, "b": 1}) == {"b": 1}
    with pytest.raises(CanonicalJsonError):
        normalize([UNDEFINED])


json_values = st.recursive(
    st.none() | st.booleans() | st.integers(min_value=-(2**53) + 1, max_value=2**53 - 1)
    | st.floats(allow_nan=False, allow_infinity=False).filter(lambda f: not (f == 0 and math.copysign(1, f) < 0))
    | st.text(alphabet=st.characters(exclude_categories=["Cs"])),
    lambda children: st.lists(children, max_size=4)
    | st.dictionaries(st.text(alphabet=st.characters(exclude_categories=["Cs"]), max_size=6), children, max_size=4),
    max_leaves=20,
)


@given(json_values)
def test_canonical_round_trip_and_idempotence(value: object) -> None:
    text = canonical_json(value)
    parsed = parse_json(text)
    assert canonical_json(parsed) == text
    assert parsed == value or _floats_equal(parsed, value)


def _floats_equal(a: object, b: object) -> bool:
    return json.dumps(a, sort_keys=True) == json.dumps(b, sort_keys=True)


@given(st.dictionaries(st.text(max_size=5, alphabet=st.characters(exclude_categories=["Cs"])),
                       st.integers(), max_size=8), st.randoms())
def test_canonical_key_order_independent(d: dict, rnd) -> None:  # type: ignore[no-untyped-def]
    d = {k: v % 1000 for k, v in d.items()}
    items = list(d.items())
    rnd.shuffle(items)
    assert canonical_json(dict(items)) == canonical_json(d)


# lone UTF-16 surrogates: JSON.stringify (ES2019) writes each as a lower-case \\udxxx escape; expected texts from node
@pytest.mark.parametrize(
    ("value", "text"),
    [
        (["x\ud800y"], '["x\\ud800y"]'),
        ({"\udfffk": "\udbff\udc00", "a": "\udc00\ud800"}, '{"a":"\\udc00\\ud800","\\udfffk":"\U0010fc00"}'),
        ("\U0001f600\ud83d", '"\U0001f600\\ud83d"'),
        ("\ud83d\ude00", '"\U0001f600"'),  # a high+low pair held as two code points is one JS character
        ("\x7f\x00\x1f\u2028", '"\x7f\\u0000\\u001f\u2028"'),
    ],
)
def test_lone_surrogates_are_written_like_json_stringify(value: object, text: str) -> None:
    assert canonical_json(value) == text
    text.encode("utf-8")  # the canonical text is valid UTF-8


def test_lone_surrogate_hash_matches_node() -> None:
    # node: sha256(JSON.stringify({note: "a\ud800"}))
    assert canonical_hash({"note": "a\ud800"}) == "21ca01e86b871d1c8e15ac4f7c3b1099a14e0c88e5541da4a40cdcf5da37f424"
    assert parse_json(canonical_json({"note": "a\ud800"})) == {"note": "a\ud800"}


def test_events_with_lone_surrogates_verify() -> None:
    event = finalize(
        {"v": 1, "id": "evt_1", "at": "2026-01-05T10:00:00.000Z", "streamId": "job_1", "type": "JOB_CREATED",
         "actor": {"type": "system", "id": "proxy\udc00"}, "payload": {"templateId": "t\ud800"}},
        None,
    )
    verify_chain([event], None)
    assert compute_payload_hash(event) == event["payloadHash"]


@pytest.mark.parametrize(
    ("value", "path"),
    [({"x": "\ud800"}, "$.x"), ({"a": [{"b": "ok"}, "\udfff"]}, "$.a[1]"), ({"\ud800": 1}, "$[\"<key>\"]")],
)
def test_require_well_formed_names_the_path(value: object, path: str) -> None:
    with pytest.raises(CanonicalJsonError) as err:
        require_well_formed(value)
    assert err.value.details["path"] == path and err.value.code == "SCHEMA_INVALID"
    require_well_formed({"x": "\U0001f600 é", "n": 1.5})


# JSON values as stored and parsed: any integer (the unsafe ones become doubles), finite floats, any text
# (lone surrogates included), nested.
stored_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False, allow_infinity=False) | st.text(),
    lambda children: st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=6), children, max_size=4),
    max_leaves=20,
)


def _standard_parse(text: str | bytes) -> object:
    return json.loads(text, parse_int=js_int, parse_float=js_float)


def _same(a: object, b: object) -> bool:
    """Equal as parsed JSON, with float(-0.0) and NaN compared by their spelling."""
    return json.dumps(a, sort_keys=True) == json.dumps(b, sort_keys=True) and type(a) is type(b)


@given(stored_values)
def test_storable_json_parses_back_as_the_standard_encoder_writes(value: object) -> None:
    standard = json.dumps(value, ensure_ascii=False, separators=(",", ":"), allow_nan=False)
    text = storable_json(value)
    assert _same(parse_json(text), _standard_parse(standard.encode("utf-8", "surrogatepass")))
    text.encode("utf-8")  # storable: lone surrogates are escaped


@given(stored_values)
def test_parse_json_reads_as_the_standard_parser_with_javascript_integers(value: object) -> None:
    for text in (json.dumps(value), json.dumps(value, ensure_ascii=False)):
        assert _same(parse_json(text), _standard_parse(text))
        data = text.encode("utf-8", "surrogatepass")
        assert _same(parse_json(data), _standard_parse(data))


@pytest.mark.parametrize("text", [
    "9007199254740993", "[1, 12345678901234567890123]", '{"n": -9007199254740993}', "NaN", "[1e400, -Infinity]",
    '"\\ud800"', '{"a": 1, "a": 2}', "1.5e308", '"1234567890123456"', "-0", "-0.0", '{"a": -0}', "[1,-0]",
    '{"at": "2026-01-05"}', '[ \n -0 ]', '{"a":\t-0}', ' -0', '{"a": "x-0", "b": -0e1}', '[1, -0.5, -0e-0]',
    '{"score": 0.87}', '[0.87, 12.5e1]', '[0.5, 2.0]', '[1.5e3]', '[-2.5E-3, 7.25]', '[1e400, 0.5]', '[0.1e1]',
    '{"v": "1.2.3", "n": 0.5}', '["v1.0", 0.5]', '[3.5, "2.0,"]', '{"t": "10:00:00.000Z", "x": 1.25}',
])
def test_parse_json_edge_texts_match_the_standard_parser(text: str) -> None:
    assert _same(parse_json(text), _standard_parse(text))


def test_parse_json_reads_a_negative_zero_token_as_javascript_does() -> None:
    """JSON.parse("-0") is the number -0, which settld's canonical JSON refuses; orjson would read the integer 0."""
    value = parse_json('{"a": [-0]}')["a"][0]
    assert type(value) is float and math.copysign(1.0, value) == -1.0


def test_a_number_with_a_fraction_or_exponent_whose_value_is_a_safe_integer_is_that_integer() -> None:
    """JavaScript has one number type: JSON.parse gives `6500.0` and `65e2` as 6500, which passes every integer check
    (a Python client's json.dumps writes integral floats that way). settld accepted such an amountCents; settlekit
    refused it as not an integer."""
    text = '{"a": 6500.0, "b": [65e2, 1E+2, 2.50, -3.0], "c": 1e20, "d": -0.0, "at": "2026-01-05T11:00:00.000Z"}'
    for parsed in (parse_json(text), parse_json(text.encode()), parse_body(text.encode())):
        assert parsed == {"a": 6500, "b": [6500, 100, 2.5, -3], "c": 1e20, "d": 0.0, "at": "2026-01-05T11:00:00.000Z"}
        assert [type(v) for v in (parsed["a"], *parsed["b"], parsed["c"])] == [int, int, int, float, int, float]
        assert math.copysign(1.0, parsed["d"]) == -1.0
    without_negative_zero = text.replace(', "d": -0.0', "")
    assert canonical_json(parse_json(without_negative_zero)) == canonical_json(json.loads(without_negative_zero))


@given(st.text(alphabet=' \t\n-0123.eE:[,{}"ab', max_size=40))
def test_the_negative_zero_scan_finds_what_a_full_pattern_finds(text: str) -> None:
    full = re.compile(rb"(?:^|[:\[,])\s*-0(?![0-9.eE])")
    data = text.encode()
    assert _has_negative_zero(data) == (full.search(data) is not None)


@pytest.mark.parametrize("text", ["[1,]", "01", "[]]", "", "\ufeff[1]", '"a\x01"'])
def test_parse_json_refuses_what_the_standard_parser_refuses(text: str) -> None:
    with pytest.raises(json.JSONDecodeError):
        parse_json(text)


def test_storable_json_keeps_the_standard_errors_and_size() -> None:
    assert storable_json({"big": 2**70, 1: "int key"}) == '{"big":1180591620717411303424,"1":"int key"}'
    assert storable_json({"s": "a\ud800"}) == '{"s":"a\\ud800"}'
    with pytest.raises(TypeError):
        storable_json({"x": {1, 2}})
    with pytest.raises(ValueError):
        storable_size({"x": math.nan})
    assert storable_size({"x": "é", "f": 1e16}) == len('{"x":"é","f":1e+16}'.encode())


_with_surrogates = st.text(alphabet=st.characters(codec=None, categories=("Cs", "Ll")), max_size=4)
_surrogate_values = st.recursive(
    st.none() | st.integers() | _with_surrogates,
    lambda children: st.lists(children, max_size=3) | st.dictionaries(_with_surrogates, children, max_size=3),
    max_leaves=10,
)


@given(_surrogate_values)
def test_require_well_formed_refuses_exactly_the_values_holding_a_lone_surrogate(value: object) -> None:
    found = find_lone_surrogate(value)
    if found is None:
        require_well_formed(value)
    else:
        with pytest.raises(CanonicalJsonError):
            require_well_formed(value)
