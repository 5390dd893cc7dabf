"""Canonical JSON, the settld v1 envelope and the hash chain."""

from settlekit.events.canonical import UNDEFINED, canonical_bytes, canonical_hash, canonical_json, sha256_hex
from settlekit.events.envelope import (
    Event,
    Signer,
    compute_chain_hash,
    compute_payload_hash,
    finalize,
    finalize_chain,
    key_id_for_public_pem,
    make_draft,
    slice_through_chain_hash,
    verify_chain,
)

__all__ = [
    "UNDEFINED", "Event", "Signer", "canonical_bytes", "canonical_hash", "canonical_json", "compute_chain_hash",
    "compute_payload_hash", "finalize", "finalize_chain", "key_id_for_public_pem", "make_draft", "sha256_hex",
    "slice_through_chain_hash", "verify_chain",
]
