"""Ed25519 verification that accepts exactly what OpenSSL accepts (settld verifies with Node's crypto, OpenSSL),
at libsodium's speed.

libsodium verifies in about a third of OpenSSL's time here, and it is stricter: beyond the equation both check, it
refuses small-order public keys and commitments and non-canonical key encodings, which OpenSSL accepts. So
libsodium's yes is final, and its no is asked of OpenSSL again: what it accepts is OpenSSL's answer, whatever
libsodium refused. Only invalid (and odd) signatures pay for both."""

from __future__ import annotations

from typing import Final

from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey
from nacl.bindings import crypto_sign_open
from nacl.exceptions import BadSignatureError

SIGNATURE_BYTES: Final = 64


def verify_ed25519(public_key: Ed25519PublicKey, signature: bytes, message: bytes) -> bool:
    """Whether `signature` is `public_key`'s Ed25519 signature of `message`, as OpenSSL decides."""
    # libsodium takes the signature and the message as one buffer: only a 64-byte signature can be split back
    if len(signature) == SIGNATURE_BYTES:
        try:
            crypto_sign_open(signature + message, public_key.public_bytes_raw())
            return True
        except BadSignatureError:
            pass
    return verify_with_openssl(public_key, signature, message)


def verify_with_openssl(public_key: Ed25519PublicKey, signature: bytes, message: bytes) -> bool:
    """OpenSSL's own answer (the reference's)."""
    try:
        public_key.verify(signature, message)
    except InvalidSignature:
        return False
    return True
