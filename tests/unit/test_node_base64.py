"""Signatures in the base64 spellings settld reads: node's `Buffer.from(s, "base64")` decodes leniently, and
settlekit's offline verification reads a signature exactly as node does (`node_base64_decode`), checked against
node 20 on every vendored corner case (`vectors/node_base64.json.gz`, made by `tests/reference/node_base64.py`)."""

from __future__ import annotations

import base64
import gzip
import json
from collections.abc import Callable

import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from hypothesis import given
from hypothesis import strategies as st

from conftest import VECTORS
from settlekit.errors import VerificationError
from settlekit.events.envelope import Signer, finalize, make_draft, node_base64_decode, verify_chain

CASES: list[list[str]] = json.loads(gzip.decompress((VECTORS / "node_base64.json.gz").read_bytes()))["cases"]
SIGNER = Signer.from_private_key(Ed25519PrivateKey.from_private_bytes(bytes(range(32))))


def test_the_vendored_cases_cover_the_corners() -> None:
    assert len(CASES) >= 1000
    strings = [s for s, _ in CASES]
    assert any("=" in s.rstrip("=") for s in strings)  # '=' inside
    assert any("-" in s or "_" in s for s in strings)  # the URL-safe alphabet
    assert any("\n" in s for s in strings) and any(" " in s for s in strings)
    assert any(len(s) > 5000 for s in strings)  # node's other allocation path
    assert any(any(ord(c) >= 0x100 for c in s) for s in strings)  # low bytes of wider code units


def test_every_case_decodes_as_node_decodes_it() -> None:
    wrong = [(s, h, node_base64_decode(s).hex()) for s, h in CASES if node_base64_decode(s).hex() != h]
    assert wrong == []


@pytest.mark.parametrize(("text", "hex_"), [
    ("QUJD", "414243"), ("QUI", "4142"), ("QQ", "41"), ("Q", ""), ("", ""), ("QQ===", "41"),
    ("QU=JD", "41"),  # the end at the first '='
    ("Q UJ\nD", "414243"), ("QU.J!D", "414243"),  # skipped
    ("-_-_", "fbffbf"), ("+/+/", "fbffbf"),
    ("QUJ\u0144", "414243"),  # U+0144's low byte is 'D'
    ("QUJ\u013d", "4142"),  # U+013D's low byte is '='
    ("QU\U0001f600JD", "41"),  # U+1F600 is D83D DE00 in UTF-16: '=' again
])
def test_corners(text: str, hex_: str) -> None:
    assert node_base64_decode(text).hex() == hex_


@given(st.binary(max_size=80))
def test_every_base64_spelling_of_bytes_gives_them_back(raw: bytes) -> None:
    plain = base64.b64encode(raw).decode("ascii")
    assert node_base64_decode(plain) == raw
    assert node_base64_decode(plain.rstrip("=")) == raw
    assert node_base64_decode(base64.urlsafe_b64encode(raw).decode("ascii")) == raw
    assert node_base64_decode("\r\n ".join(plain[i:i + 7] for i in range(0, len(plain), 7))) == raw


def _signed() -> dict:
    draft = make_draft(stream_id="job_b64", type="JOB_CREATED", actor={"type": "system", "id": "proxy"},
                       payload={"templateId": "t"}, at="2026-01-05T10:00:00.000Z", id="evt_b64_1")
    return finalize(draft, None, SIGNER)


@pytest.mark.parametrize("respell", [
    lambda s: s.rstrip("="),
    lambda s: s.replace("+", "-").replace("/", "_"),
    lambda s: s[:40] + "\n" + s[40:],
    lambda s: " ".join(s),
    lambda s: s + "=garbage after the end",
])
def test_verify_reads_a_signature_in_any_spelling_node_reads(respell: Callable[[str], str]) -> None:
    event = _signed()
    event["signature"] = respell(event["signature"])
    verify_chain([event], {SIGNER.key_id: SIGNER.public_key_pem})


def test_a_spelling_that_decodes_to_other_bytes_is_invalid() -> None:
    event = _signed()
    event["signature"] = event["signature"][:20] + "=" + event["signature"][20:]
    with pytest.raises(VerificationError) as exc:
        verify_chain([event], {SIGNER.key_id: SIGNER.public_key_pem})
    assert exc.value.code == "SIG_INVALID"


@pytest.mark.parametrize("key_id", ["", None, "key_other"])
def test_an_empty_signature_is_no_signature(key_id: str | None) -> None:
    """settld verifies a signature only when `event.signature` is truthy: "" is unsigned, whatever the key id."""
    event = _signed()
    event["signature"], event["signerKeyId"] = "", key_id
    verify_chain([event], {SIGNER.key_id: SIGNER.public_key_pem})
    verify_chain([event], {})


def test_a_signature_with_an_empty_key_id_is_refused() -> None:
    event = _signed()
    event["signerKeyId"] = ""
    with pytest.raises(VerificationError) as exc:
        verify_chain([event], {SIGNER.key_id: SIGNER.public_key_pem})
    assert exc.value.code == "SIGNER_KEY_ID_REQUIRED"
