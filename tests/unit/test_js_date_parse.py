"""`js_date_parse_ms` against node 20's `Date.parse` (TZ=UTC).

`tests/vectors/js_date/date_parse.json` holds `[string, ms]` pairs (null for NaN) for ~3,000 strings picked to run
every branch of the parser: ISO forms and their boundaries, mutations of them, legacy formats, garbage, and the code
units V8 classes differently (JS white space vs. word characters). It sits in a folder of its own because
`tests/vectors/*.json` are job scenarios; `date_parse_runs.json` beside it holds strings made of
runs. `tests/reference/js_date_parse.mjs` regenerates the expectations:
`node tests/reference/js_date_parse.mjs IN.json OUT.json` (it forces TZ=UTC).
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from settlekit.events.js_date import js_date_parse_ms

VECTORS = Path(__file__).resolve().parents[1] / "vectors" / "js_date" / "date_parse.json"
# ~3,100 strings built of runs (blanks, junk, symbols, words, numbers, each repeated) around date parts: the
# tokenizer keeps only the first tokens of a run, which must not change a result
RUN_VECTORS = VECTORS.with_name("date_parse_runs.json")
NAN = None


def _agrees(got: float, want: float | None) -> bool:
    return math.isnan(got) if want is None else got == want


@pytest.mark.parametrize("path", [VECTORS, RUN_VECTORS], ids=["picked", "runs"])
def test_every_vendored_string_parses_as_node_parses_it(path: Path) -> None:
    pairs = json.loads(path.read_text(encoding="utf-8"))
    assert len(pairs) > 2500
    mismatches = []
    for s, want in pairs:
        got = js_date_parse_ms(s)
        if not _agrees(got, want):
            mismatches.append(f"{s!r}: node {want}, got {got}")
    assert not mismatches, f"{len(mismatches)} of {len(pairs)} differ, first:\n" + "\n".join(mismatches[:20])


@pytest.mark.parametrize(
    ("s", "want"),
    [
        ("2026-01-01T10:00:00.000Z", 1767261600000),
        ("2026-01-01", 1767225600000),  # date-only: UTC
        ("2026-01-01T10:00", 1767261600000),  # date-time without zone: local time (UTC here)
        ("2026-02-30", 1772409600000),  # rolls over to March 2
        ("2026-01-01T24:00:00Z", 1767312000000),  # end of day
        ("2026-01-01T10:00:00.1234567Z", 1767261600123),  # fraction truncated to ms
        ("2026-01-01T10:00:00+0100", 1767258000000),
        ("+275760-09-13T00:00:00.000Z", 8.64e15),  # the last instant
        ("2026/01/01", 1767225600000),  # legacy reader
        ("Tue, 01 Jan 2026 00:00:00 GMT", 1767225600000),
        ("Jan 1 2026 10:00 PM EST", 1767322800000),
        ("1", 978307200000),  # a lone number is a month: 2001-01-01
        ("foo 1", 978307200000),  # words before the first number are skipped
        ("2026-01-01\x00junk", 1767225600000),  # NUL ends the input
        ("\u00a02026-01-01", 1767225600000),  # NBSP is white space
        ("2026-01-01T23:60:00Z", NAN),
        (" 2026-01-01T10:00:00Z", NAN),  # not ISO, and 'T' is a garbage word after a number
        ("2026-01-01T10:00:00+01", NAN),
        ("+275760-09-13T00:00:00.001Z", NAN),  # past the time range
        ("1e3", NAN),
        ("2026-01-01\u2028", NAN),  # a line terminator is not white space to the word reader
        ("", NAN),
    ],
)
def test_examples(s: str, want: float | None) -> None:
    got = js_date_parse_ms(s)
    assert _agrees(got, want), f"{s!r}: expected {want}, got {got}"


@pytest.mark.parametrize("junk", ["!", " ", ":.", "-", ":", "!:", "(x)"])
def test_a_long_run_of_junk_is_read_as_its_first_tokens(junk: str) -> None:
    """200,000 characters of junk cost a few tokens (the body limit allows such a string in any date field)."""
    long = junk * (200_000 // len(junk))
    assert math.isnan(js_date_parse_ms(long))
    for date in ("2026-01-02 ", "Jan 2 2026 10:00 "):
        short = js_date_parse_ms(date + junk * 3)
        assert _agrees(js_date_parse_ms(date + long), None if math.isnan(short) else short)
