"""`localeCompare` order: settlekit's collation against an order Node.js produced (committed as data)."""

from __future__ import annotations

import json
import random
from pathlib import Path

import pytest

from settlekit.events import collation
from settlekit.events.collation import icu_version, locale_compare, sort_key
from settlekit.events.js import locale_key

DATA = json.loads((Path(__file__).resolve().parent.parent / "vectors" / "collation" / "node_order.json").read_text())
SORTED: list[str] = DATA["sorted"]
SIGNS: list[int] = DATA["adjacentSigns"]


def test_data_holds_the_hard_cases() -> None:
    assert len(SORTED) > 500 and 0 in SIGNS  # ties (canonically equivalent or ignorable-only differences)
    assert any(any(0xD800 <= ord(c) <= 0xDFFF for c in s) for s in SORTED)  # lone surrogates
    assert any(not s.isascii() for s in SORTED) and any(s.isascii() for s in SORTED)


def test_adjacent_comparisons_match_node() -> None:
    got = [locale_compare(a, b) for a, b in zip(SORTED, SORTED[1:], strict=False)]
    bad = [(SORTED[i], SORTED[i + 1], got[i], SIGNS[i]) for i in range(len(got)) if got[i] != SIGNS[i]]
    assert bad == []


def test_sorting_any_permutation_gives_node_order() -> None:
    # ties may come out in either order, so compare the tie-group sequence
    group: dict[str, int] = {}
    g = 0
    for i, s in enumerate(SORTED):
        if i and SIGNS[i - 1] != 0:
            g += 1
        group[s] = g
    expected = [group[s] for s in SORTED]
    rng = random.Random(10)
    for _ in range(3):
        xs = list(SORTED)
        rng.shuffle(xs)
        assert [group[s] for s in sorted(xs, key=locale_key)] == expected


def test_known_pairs() -> None:
    assert locale_compare("zone_a", "zone_B") < 0 < locale_compare("zone_b", "zone_A")  # case is tertiary
    assert locale_compare("a", "A") < 0  # lowercase first at the tertiary level
    assert locale_compare("zone_é", "zone_e\u0301") == 0  # canonical equivalents compare equal
    assert locale_compare("zone_é", "zone_f") < 0  # not code-unit order
    assert locale_compare("-a", "_a") > 0 and locale_compare("1", "a") < 0
    assert sort_key("\ud800x") == sort_key("\ud800x")  # lone surrogates are accepted
    assert icu_version().startswith("78.")


def test_missing_icu_libraries_fail_with_a_clear_code(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setattr(collation.importlib.util, "find_spec", lambda name: None)
    with pytest.raises(collation.CollationUnavailable) as err:
        collation._icu4py_libdir()
    assert err.value.code == "COLLATION_UNAVAILABLE"
    with pytest.raises(collation.CollationUnavailable):
        collation._Collator(str(tmp_path))  # a folder without the libraries
