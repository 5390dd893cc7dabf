"""The signer-key registry: each tenant's public keys by key id, with their purpose, status and entity."""

from __future__ import annotations

from collections.abc import Collection, Iterable, Sequence
from dataclasses import dataclass

from settlekit.errors import ConflictError, NotFoundError, ValidationError
from settlekit.events.envelope import key_id_for_public_pem, load_public_key
from settlekit.store.database import Database, Tx
from settlekit.store.sql import fragment, statements

KEY_PURPOSES = ("robot", "operator", "server")
KEY_STATUSES = ("active", "rotated", "revoked")
_STATUS_STAMP = {"rotated": "rotated_at", "revoked": "revoked_at"}
SIGNER_KEY_COLUMNS = "tenant_id, key_id, public_key_pem, purpose, status, entity_id"
_COLUMNS = SIGNER_KEY_COLUMNS


@dataclass
class SignerKey:
    tenant_id: str
    key_id: str
    public_key_pem: str
    purpose: str
    status: str
    entity_id: str | None = None


class SignerKeys:
    """Signer keys of every tenant on one Database."""

    def __init__(self, db: Database):
        self.db = db

    def register(self, tenant_id: str, public_key_pem: str, purpose: str, *, entity_id: str | None = None) -> str:
        """Register a public key for a tenant; returns its key id. Registering it again with the same purpose
        changes nothing; with another purpose it is SIGNER_KEY_CONFLICT."""
        with self.db.transaction() as tx:
            return _register(tx, tenant_id, public_key_pem, purpose, entity_id)[0]

    def register_all(self, tenant_id: str, keys: Sequence[tuple[str, str]]) -> list[str]:
        """Register (public key PEM, purpose) pairs as `register` does, all or none (one SIGNER_KEY_CONFLICT
        registers none); returns the ids of the keys that were not registered before."""
        with self.db.transaction() as tx:
            return [key_id for key_id, created in (_register(tx, tenant_id, pem, purpose, None)
                                                   for pem, purpose in keys) if created]

    def forget(self, tenant_id: str, key_ids: Iterable[str]) -> None:
        """Remove keys just registered that nothing was signed with after all (an import whose file was refused
        before anything was written)."""
        ids = sorted(set(key_ids))
        if ids:
            with self.db.transaction() as tx:
                tx.execute(f"DELETE FROM signer_keys WHERE tenant_id = ? AND key_id IN ({','.join('?' * len(ids))})",
                           (tenant_id, *ids))

    def change_status(self, tenant_id: str, key_id: str, status: str, *, allowed_from: Collection[str],
                      successor_pem: str | None = None) -> str | None:
        """Move a key to `status` when its status is one of `allowed_from` (the time of the first move to a status
        is kept), and register `successor_pem` with the key's purpose and entity in the same transaction: all or
        nothing. Returns the successor's key id. SIGNER_KEY_NOT_FOUND, or SIGNER_KEY_STATUS_CONFLICT when the
        key's status is not one of `allowed_from`."""
        if status not in KEY_STATUSES:
            raise ValidationError(f"status must be one of {KEY_STATUSES}", code="SCHEMA_INVALID")
        column = _STATUS_STAMP.get(status)
        with self.db.transaction() as tx:
            row = tx.fetchone(f"SELECT status, purpose, entity_id FROM signer_keys WHERE tenant_id = ? AND key_id = ?"
                              f" {fragment(tx.dialect, 'row_lock')}", (tenant_id, key_id))
            if row is None:
                raise NotFoundError(f"signer key {key_id} is not registered", code="SIGNER_KEY_NOT_FOUND",
                                    keyId=key_id)
            current, purpose, entity_id = str(row[0]), str(row[1]), row[2]
            if current not in allowed_from:
                raise ConflictError(f"signer key {key_id} is {current}: it cannot become {status}",
                                    code="SIGNER_KEY_STATUS_CONFLICT", keyId=key_id, keyStatus=current)
            if current != status:
                stamp = f", {column} = {fragment(tx.dialect, 'now')}" if column else ""
                tx.execute(f"UPDATE signer_keys SET status = ?{stamp} WHERE tenant_id = ? AND key_id = ?",
                           (status, tenant_id, key_id))
            if successor_pem is None:
                return None
            return _register(tx, tenant_id, successor_pem, purpose, entity_id)[0]

    def of_tenant(self, tenant_id: str) -> list[SignerKey]:
        """Every key of the tenant, by key id."""
        with self.db.read() as tx:
            rows = tx.fetchall(f"SELECT {_COLUMNS} FROM signer_keys WHERE tenant_id = ? ORDER BY key_id",
                               (tenant_id,))
        return [SignerKey(*row) for row in rows]

    def find(self, tenant_id: str, key_ids: Iterable[str]) -> dict[str, SignerKey]:
        """The tenant's registered keys among `key_ids`, by key id."""
        ids = sorted(set(key_ids))
        if not ids:
            return {}
        marks = ",".join("?" for _ in ids)
        with self.db.query() as tx:  # one statement: no transaction around it
            rows = tx.fetchall(f"SELECT {_COLUMNS} FROM signer_keys WHERE tenant_id = ? AND key_id IN ({marks})",
                               (tenant_id, *ids))
        return {row[1]: SignerKey(*row) for row in rows}


def _register(tx: Tx, tenant_id: str, public_key_pem: str, purpose: str, entity_id: str | None) -> tuple[str, bool]:
    """(key id, whether it was inserted now) of one key registered in `tx`; SIGNER_KEY_CONFLICT when the key is
    registered with another purpose."""
    if purpose not in KEY_PURPOSES:
        raise ValidationError(f"purpose must be one of {KEY_PURPOSES}", code="SCHEMA_INVALID")
    load_public_key(public_key_pem)
    key_id = key_id_for_public_pem(public_key_pem)
    row = tx.fetchone(statements("signer_keys", tx.dialect)["register"],
                      (tenant_id, key_id))
    if row is not None:
        if row[0] != purpose:
            raise ConflictError(f"key {key_id} is already registered as {row[0]}", code="SIGNER_KEY_CONFLICT")
        return key_id, False
    tx.execute(statements("signer_keys", tx.dialect)["insert_key"],
               (tenant_id, key_id, public_key_pem, purpose, entity_id))
    return key_id, True
