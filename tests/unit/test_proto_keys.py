"""A "__proto__" key: settld's canonical JSON leaves it out (JavaScript's `out[key] = …` sets a prototype instead),
so its hashes do not cover it (tests/vectors/reference_runs/proto_keys.json.gz, settld's canonical JSON of such texts
and its verdict on a stream whose events carry one). The offline tools hash as settld does; the live append path
refuses such a key in new input on purpose (README)."""

from __future__ import annotations

import gzip
import json
from typing import Any

import pytest

from conftest import VECTORS
from settlekit.errors import SettlekitError
from settlekit.events.canonical import canonical_json, parse_json, require_well_formed
from settlekit.events.envelope import verify_chain

BUNDLE: dict[str, Any] = parse_json(gzip.decompress((VECTORS / "reference_runs" / "proto_keys.json.gz").read_bytes()))


@pytest.mark.parametrize("case", BUNDLE["canonical"], ids=[c["text"] for c in BUNDLE["canonical"]])
def test_canonical_json_leaves_a_proto_key_out_as_settld_does(case: dict[str, Any]) -> None:
    value = parse_json(case["text"])
    if "error" in case:
        with pytest.raises(SettlekitError):
            canonical_json(value)
    else:
        assert canonical_json(value) == case["canonical"]


def test_a_stream_whose_payloads_carry_a_proto_key_verifies_as_in_settld() -> None:
    assert BUNDLE["streamVerify"] == {"ok": True}
    verify_chain(BUNDLE["stream"])


def test_the_live_path_refuses_a_proto_key_in_new_input() -> None:
    event = json.loads('{"type":"QUOTE_PROPOSED","payload":{"breakdown":{"__proto__":7}}}')
    require_well_formed(event)  # without hashed_keys: the history check
    with pytest.raises(SettlekitError) as refused:
        require_well_formed(event, "$[0]", hashed_keys=True)
    assert refused.value.code == "SCHEMA_INVALID"
    assert refused.value.details["path"] == "$[0].payload.breakdown.__proto__"
    require_well_formed({"payload": {"note": '"__proto__":'}}, hashed_keys=True)  # a string is no key


