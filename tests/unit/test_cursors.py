"""The opaque cursors (settlekit/cursors.py): deterministic, bound to tenant, kind and listing, tamper-evident,
of one length whatever the value, and numbers refused as such."""

from __future__ import annotations

import pytest

from settlekit.cursors import DELIVERY, EVENT, POSTINGS, Cursors
from settlekit.errors import ValidationError

CURSORS = Cursors(b"s" * 64)


def code_of(kind: str, tenant: str, token: str, **kw: object) -> str:
    with pytest.raises(ValidationError) as caught:
        CURSORS.decode(kind, tenant, token, field="after", **kw)  # type: ignore[arg-type]
    return caught.value.code


def test_round_trip_is_deterministic_and_says_nothing_of_the_value() -> None:
    tokens = [CURSORS.event("a", p) for p in (0, 1, 2, 10**6, 2**63 - 1)]
    assert tokens == [CURSORS.event("a", p) for p in (0, 1, 2, 10**6, 2**63 - 1)]  # same position, same token
    assert [CURSORS.position("a", t, field="after") for t in tokens] == [0, 1, 2, 10**6, 2**63 - 1]
    assert len(set(tokens)) == 5 and {len(t) for t in tokens} == {32}, "the size of a value shows"
    assert CURSORS.encode_all(EVENT, "a", [0, 1, 2]) == tokens[:3]
    assert not any(t.isdigit() for t in tokens)


def test_bound_to_tenant_kind_and_listing() -> None:
    token = CURSORS.event("a", 42)
    assert code_of(EVENT, "b", token) == "CURSOR_INVALID"
    assert code_of(DELIVERY, "a", token) == "CURSOR_INVALID"
    assert CURSORS.values(EVENT, "a", token) == (42,)
    assert Cursors(b"t" * 64).values(EVENT, "a", token) is None, "another deployment's secret"
    page = CURSORS.encode(POSTINGS, "a", 5, 0, 1, listing=("1000", "account"))
    assert CURSORS.decode(POSTINGS, "a", page, field="cursor", count=3, listing=("1000", "account")) == (5, 0, 1)
    assert code_of(POSTINGS, "a", page, count=3, listing=("2000", "account")) == "CURSOR_INVALID"
    assert code_of(POSTINGS, "a", page, count=3, listing=("100", "0account")) == "CURSOR_INVALID"


def test_every_altered_character_is_refused() -> None:
    token = CURSORS.event("a", 7)
    for i in range(len(token)):
        for replacement in "A_-9":
            altered = token[:i] + replacement + token[i + 1:]
            if altered != token and CURSORS.values(EVENT, "a", altered) is not None:
                # base64url's last character carries 4 unused bits: only those may differ and read the same
                assert i == len(token) - 1 and CURSORS.values(EVENT, "a", altered) == (7,)
    for bad in ("", "x", token[:-2], token + "AA", token + "=", "é" * 32, " " + token):
        assert code_of(EVENT, "a", bad) == "CURSOR_INVALID", bad


def test_numbers_are_refused_as_old_cursors() -> None:
    for number in ("0", "17", "00012345678901234567890123456789", "9" * 40):
        assert code_of(EVENT, "a", number) == "CURSOR_NUMERIC"
    assert code_of(DELIVERY, "a", "12") == "CURSOR_NUMERIC"


def test_the_secret_is_read_once_on_first_use() -> None:
    reads: list[int] = []

    def secret() -> bytes:
        reads.append(1)
        return b"s" * 64

    lazy = Cursors(secret)
    assert reads == []
    assert lazy.event("a", 3) == CURSORS.event("a", 3) and lazy.event("a", 4) == CURSORS.event("a", 4)
    assert reads == [1]


def test_remembered_tokens_stay_bounded_and_right() -> None:
    from settlekit.cursors import MEMO_SIZE

    cursors = Cursors(b"s" * 64)
    values = list(range(MEMO_SIZE + 10))
    assert cursors.encode_all(EVENT, "a", values) == cursors.encode_all(EVENT, "a", values)
    assert len(cursors._memo) <= MEMO_SIZE
    assert cursors.encode_all(EVENT, "b", [1, 2]) == [CURSORS.event("b", 1), CURSORS.event("b", 2)]
    assert cursors.encode_all(DELIVERY, "a", [1]) == [CURSORS.encode(DELIVERY, "a", 1)] != [CURSORS.event("a", 1)]
