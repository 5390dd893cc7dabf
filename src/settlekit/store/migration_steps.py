"""Migration data steps: a migration whose data cannot be moved in SQL alone (a hash computed in Python) has a
function of its open transaction here, which both backends run right after the file's SQL, in the same
transaction, before the migration is recorded."""

from __future__ import annotations

from collections.abc import Callable, Mapping

from settlekit.store import cursor_secret
from settlekit.store.contracts import rekey_contract_documents
from settlekit.store.database import Tx
from settlekit.store.finance import build_log_nodes

DATA_STEPS: Mapping[str, Callable[[Tx], object]] = {
    "0016_contract_hashes": rekey_contract_documents,
    "0024_server_secrets": cursor_secret.create,
    "0025_finance_log_nodes": build_log_nodes,
}


def run_data_step(name: str, tx: Tx) -> None:
    """Run migration `name`'s data step, if it has one, in its transaction."""
    step = DATA_STEPS.get(name)
    if step is not None:
        step(tx)
