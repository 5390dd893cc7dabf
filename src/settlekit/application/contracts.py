"""Contract documents: validated, stored by settld's hash (old hashes kept as aliases) and read back."""

from __future__ import annotations

from settlekit.store.contracts import get_contract, put_contract, store_contract

__all__ = ["get_contract", "put_contract", "store_contract"]
