"""Request bodies and stream files spelled as clients' JSON writers spell them (numbers with fractions and
exponents, escapes, white space, reordered and duplicate keys, edge tokens), read by settlekit as settld reads them
(tests/vectors/reference_runs/json_spellings.json.gz, made by tests/reference/spelling_xcheck.py): the same value,
canonical JSON, payload hash and payload-validator verdict, or a refusal on both sides, except where the README
says settlekit refuses on purpose."""

from __future__ import annotations

import base64
import gzip
import json
from typing import Any

import pytest

from conftest import VECTORS
from support.json_spellings import digested, settlekit_answers, verdict

BUNDLE: dict[str, Any] = json.loads(
    gzip.decompress((VECTORS / "reference_runs" / "json_spellings.json.gz").read_bytes()).decode("utf-8"))
CASES: list[dict[str, Any]] = BUNDLE["cases"]
EXPECTED_DIFFERENCES = {
    "body": {"same", "refused on purpose (U+0000 or a lone surrogate)", "refused on purpose (not UTF-8)"},
    "file": {"same", "not UTF-8, which settlekit's reader refuses (settld reads U+FFFD)",
             "a BOM before the JSON, which settlekit's reader skips"},
}


@pytest.mark.parametrize("case", CASES, ids=[f"{i}-{c['edge'] or 'spelled'}" for i, c in enumerate(CASES)])
def test_a_client_spelled_body_reads_as_settld_reads_it(case: dict[str, Any]) -> None:
    raw = base64.b64decode(case["body"])
    mine = settlekit_answers(raw)
    for where in ("body", "file"):
        found = verdict(where, raw, digested(mine[where]), case["settld"][where])
        assert found in EXPECTED_DIFFERENCES[where], (where, found, mine[where], case["settld"][where])


def test_the_bundle_holds_every_kind_of_body() -> None:
    edges = {c["edge"] for c in CASES}
    assert {"-0", "1e400", "9007199254740993", '"a\\ud800"', '"x\udce9y"', "1E2"} <= edges
    text = [base64.b64decode(c["body"]).decode("utf-8", "replace") for c in CASES]
    assert sum(t.startswith(("\ufeff", "\u00a0", "\u2028", "\u3000", "\x0b", "\x0c")) for t in text) >= 20
