"""events.ed25519: libsodium's speed, OpenSSL's answers (the reference verifies with Node's crypto, OpenSSL)."""

from __future__ import annotations

from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey, Ed25519PublicKey
from hypothesis import given, settings
from hypothesis import strategies as st
from nacl.bindings import crypto_sign_open
from nacl.exceptions import BadSignatureError

from settlekit.events.ed25519 import verify_ed25519, verify_with_openssl

# the group order of Ed25519's base point
L = 2**252 + 27742317777372353535851937790883648493
IDENTITY = bytes([1]) + bytes(31)  # the neutral point's encoding: a small-order public key


def _libsodium_accepts(public: bytes, signature: bytes, message: bytes) -> bool:
    try:
        crypto_sign_open(signature + message, public)
    except BadSignatureError:
        return False
    return True


@settings(max_examples=200, deadline=None)
@given(seed=st.binary(min_size=32, max_size=32), message=st.binary(min_size=0, max_size=64),
       flip=st.one_of(st.none(), st.integers(min_value=0, max_value=64 * 8 - 1)),
       other_message=st.booleans())
def test_answers_as_openssl_for_valid_and_tampered_signatures(seed: bytes, message: bytes, flip: int | None,
                                                               other_message: bool) -> None:
    key = Ed25519PrivateKey.from_private_bytes(seed)
    signature = bytearray(key.sign(message))
    if flip is not None:
        signature[flip // 8] ^= 1 << (flip % 8)
    checked = message + b"!" if other_message else message
    expected = verify_with_openssl(key.public_key(), bytes(signature), checked)
    assert verify_ed25519(key.public_key(), bytes(signature), checked) is expected
    assert expected is (flip is None and not other_message)


def test_a_signature_libsodium_refuses_and_openssl_accepts_is_accepted() -> None:
    # a small-order key with the neutral commitment and S = 0: [0]B = R + [k]A holds for every message. OpenSSL
    # (and so settld) accepts it, libsodium refuses small-order keys: OpenSSL's answer is the one given
    public = Ed25519PublicKey.from_public_bytes(IDENTITY)
    signature = IDENTITY + bytes(32)
    message = bytes(range(32))
    assert not _libsodium_accepts(IDENTITY, signature, message)
    assert verify_with_openssl(public, signature, message)
    assert verify_ed25519(public, signature, message)


def test_a_short_signature_is_not_read_across_into_the_message() -> None:
    # libsodium takes signature and message as one buffer: 63 bytes of a valid signature of a 31-byte message,
    # followed by a "message" of its last byte and those 31 bytes, reads there as the valid pair
    key = Ed25519PrivateKey.generate()
    public_raw = key.public_key().public_bytes_raw()
    inner = b"m" * 31
    valid = key.sign(inner)
    signature, message = valid[:63], valid[63:] + inner
    assert _libsodium_accepts(public_raw, signature, message)
    assert not verify_with_openssl(key.public_key(), signature, message)
    assert not verify_ed25519(key.public_key(), signature, message)


def test_a_non_canonical_s_is_refused_as_openssl_refuses_it() -> None:
    key = Ed25519PrivateKey.generate()
    message = b"x" * 32
    valid = key.sign(message)
    s = int.from_bytes(valid[32:], "little") + L
    assert s < 2**256
    malleated = valid[:32] + s.to_bytes(32, "little")
    assert not verify_with_openssl(key.public_key(), malleated, message)
    assert not verify_ed25519(key.public_key(), malleated, message)


def test_wrong_key_and_garbage_are_refused() -> None:
    key, other = Ed25519PrivateKey.generate(), Ed25519PrivateKey.generate()
    message = b"y" * 32
    assert not verify_ed25519(other.public_key(), key.sign(message), message)
    assert not verify_ed25519(key.public_key(), bytes(64), message)
    assert not verify_ed25519(key.public_key(), b"", message)
    assert not verify_ed25519(key.public_key(), key.sign(message) + b"\x00", message)
