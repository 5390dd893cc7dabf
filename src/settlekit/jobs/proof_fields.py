"""Fields every proof summary copies from a PROOF_EVALUATED payload (the job snapshot, the settlement proof
ref and the artifacts' proof views), kept in one place so their key order cannot drift apart."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any


def list_or_empty(v: Any) -> list[Any]:
    """`v` when it is a list, else a new empty list."""
    return v if type(v) is list else []


def proof_hashes(p: Mapping[str, Any]) -> dict[str, Any]:
    """The hashes a proof evaluation was made against, in settld's key order."""
    return {
        "requiredZonesHash": p.get("requiredZonesHash"),
        "customerPolicyHash": p.get("customerPolicyHash"),
        "operatorPolicyHash": p.get("operatorPolicyHash"),
        "factsHash": p.get("factsHash"),
    }
