"""API keys table: one row per key with its tenant, scopes and the sha256 of its secret (never the secret)."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from settlekit.store import console_sessions
from settlekit.store.database import Database, Row
from settlekit.store.sql import statements

API_KEY_COLUMNS = "key_id, tenant_id, scopes, status, label, secret_hash"


@dataclass(frozen=True)
class StoredApiKey:
    key_id: str
    tenant_id: str
    scopes: frozenset[str]
    status: str
    label: str | None
    secret_hash: str


def insert(db: Database, key_id: str, tenant_id: str, secret_hash: str, scopes: Iterable[str],
           label: str | None) -> None:
    with db.transaction() as tx:
        tx.execute(statements("api_keys", tx.dialect)["insert"],
                   (key_id, tenant_id, secret_hash, ",".join(sorted(scopes)), label))


def revoke(db: Database, key_id: str, *, tenant_id: str | None = None) -> bool:
    """Mark a key revoked (only if it belongs to `tenant_id`, when given) and end its console sessions; False when
    no such key."""
    with db.transaction() as tx:
        named = statements("api_keys", tx.dialect)
        if tenant_id is None:
            revoked = tx.execute(named["revoke"], (key_id,)) > 0
        else:
            revoked = tx.execute(named["revoke_for_tenant"], (key_id, tenant_id)) > 0
        if revoked:
            console_sessions.delete_for_key(tx, key_id)
        return revoked


def find(db: Database, key_id: str) -> StoredApiKey | None:
    with db.query() as tx:
        row = tx.fetchone(f"SELECT {API_KEY_COLUMNS} FROM api_keys WHERE key_id = ?", (key_id,))
    return stored_api_key(row) if row is not None else None


def list_keys(db: Database, tenant_id: str | None = None) -> list[StoredApiKey]:
    """Every key (of `tenant_id`, when given), by tenant and key id."""
    with db.read() as tx:
        if tenant_id is None:
            rows = tx.fetchall(f"SELECT {API_KEY_COLUMNS} FROM api_keys ORDER BY tenant_id, key_id")
        else:
            rows = tx.fetchall(f"SELECT {API_KEY_COLUMNS} FROM api_keys WHERE tenant_id = ? ORDER BY tenant_id, key_id",
                               (tenant_id,))
    return [stored_api_key(r) for r in rows]


def stored_api_key(row: Row) -> StoredApiKey:
    """A StoredApiKey from the API_KEY_COLUMNS of a row."""
    return StoredApiKey(key_id=row[0], tenant_id=row[1], scopes=frozenset(row[2].split(",")), status=row[3],
                        label=row[4], secret_hash=row[5])
