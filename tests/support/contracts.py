"""Contract documents from the vendored settld answers (tests/vectors/reference_runs/contract_hashes.json.gz)."""

from __future__ import annotations

import gzip
import json
from pathlib import Path
from typing import Any

from settlekit.ledger import ContractInvalid, compile_contract_policy

BUNDLE = Path(__file__).resolve().parent.parent / "vectors" / "reference_runs" / "contract_hashes.json.gz"


def settld_accepted_contracts() -> list[dict[str, Any]]:
    """The cases ({document, settld}) whose document settld accepts and settlekit too (it refuses some split plans
    on purpose), those with an enabled split plan first."""
    with gzip.open(BUNDLE, "rt", encoding="utf-8") as f:
        cases = json.load(f)["cases"]
    accepted = [c for c in cases if c["settld"]["document"]["ok"] and c["settld"]["template"]["ok"]
                and _settlekit_accepts(c["document"])]
    accepted.sort(key=lambda c: (c["document"].get("connect") or {}).get("enabled") is not True)
    return accepted


def _settlekit_accepts(document: Any) -> bool:
    try:
        compile_contract_policy(document)
    except ContractInvalid:
        return False
    return True
