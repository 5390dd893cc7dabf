"""Webhook secrets repository: the `webhook_secrets` table (secrets the API received by value, per tenant).

Rows in, rows out; what a `secret:<id>` reference means and how ids are issued lives in
`settlekit.delivery.secrets`. Every lookup is scoped to one tenant.
"""

from __future__ import annotations

from settlekit.store.database import Tx
from settlekit.store.sql import statements


def insert(tx: Tx, tenant_id: str, secret_id: str, value: str) -> None:
    tx.execute(statements("webhook_secrets", tx.dialect)["insert"],
               (tenant_id, secret_id, value))


def exists(tx: Tx, tenant_id: str, secret_id: str) -> bool:
    return tx.fetchone(statements("webhook_secrets", tx.dialect)["exists"],
                       (tenant_id, secret_id)) is not None


def get(tx: Tx, tenant_id: str, secret_id: str) -> str | None:
    """The stored value (one secret per line), or None."""
    row = tx.fetchone(statements("webhook_secrets", tx.dialect)["get"],
                      (tenant_id, secret_id))
    return None if row is None else str(row[0])


def list_ids(tx: Tx, tenant_id: str) -> list[str]:
    return [str(r[0]) for r in tx.fetchall(statements("webhook_secrets", tx.dialect)["list_ids"],
                                           (tenant_id,))]


def delete(tx: Tx, tenant_id: str, secret_id: str) -> int:
    return tx.execute(statements("webhook_secrets", tx.dialect)["delete"], (tenant_id, secret_id))
