"""API keys: `sk_<keyid>_<secret>`, stored as sha256(secret), bound to one tenant and a set of scopes.

`admin` implies every other scope. A key is looked up by its key id and the secret compared in constant time.
"""

from __future__ import annotations

import hmac
import re
import secrets
from collections.abc import Iterable
from dataclasses import dataclass

from settlekit.errors import NotFoundError, SettlekitError, ValidationError
from settlekit.events.canonical import sha256_hex
from settlekit.store.db import Database

SCOPES = ("jobs:read", "jobs:write", "finance:write", "ops", "admin")
KEY_PREFIX = "sk_"
_KEY_ID_RE = re.compile(r"^[0-9a-f]{16}$")
_TENANT_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._:-]{0,199}$")


class AuthError(SettlekitError):
    code = "UNAUTHENTICATED"
    status = 401


class ForbiddenError(SettlekitError):
    code = "FORBIDDEN"
    status = 403


@dataclass(frozen=True)
class ApiKey:
    key_id: str
    tenant_id: str
    scopes: frozenset[str]
    status: str = "active"
    label: str | None = None

    def allows(self, scope: str) -> bool:
        return "admin" in self.scopes or scope in self.scopes

    def to_json(self) -> dict[str, object]:
        return {"keyId": self.key_id, "tenantId": self.tenant_id, "scopes": sorted(self.scopes),
                "status": self.status, "label": self.label}


def parse_scopes(scopes: Iterable[str] | str) -> frozenset[str]:
    """Scopes from a list or a comma-separated string; unknown names are refused."""
    items = scopes.split(",") if isinstance(scopes, str) else list(scopes)
    out = frozenset(s.strip() for s in items if s.strip())
    unknown = sorted(out - set(SCOPES))
    if unknown:
        raise ValidationError(f"unknown scope {unknown[0]!r}; known: {', '.join(SCOPES)}", code="SCHEMA_INVALID",
                              field="scopes")
    if not out:
        raise ValidationError("at least one scope is required", code="SCHEMA_INVALID", field="scopes")
    return out


def _hash_secret(secret: str) -> str:
    return sha256_hex(secret.encode("utf-8"))


def create_api_key(db: Database, tenant: str, scopes: Iterable[str] | str, *,
                   label: str | None = None) -> tuple[str, str]:
    """Create a key for `tenant`; returns (key_id, the full secret string). The secret is not stored."""
    if not isinstance(tenant, str) or not _TENANT_RE.match(tenant):
        raise ValidationError("tenant must be 1..200 characters of [A-Za-z0-9._:-]", code="SCHEMA_INVALID",
                              field="tenant")
    scope_set = parse_scopes(scopes)
    key_id = secrets.token_hex(8)
    secret = secrets.token_urlsafe(32)
    with db.transaction() as tx:
        tx.execute("INSERT INTO api_keys (key_id, tenant_id, secret_hash, scopes, label) VALUES (?, ?, ?, ?, ?)",
                   (key_id, tenant, _hash_secret(secret), ",".join(sorted(scope_set)), label))
    return key_id, f"{KEY_PREFIX}{key_id}_{secret}"


def revoke_api_key(db: Database, key_id: str, *, tenant: str | None = None) -> None:
    """Revoke a key (optionally only if it belongs to `tenant`); NotFoundError when unknown."""
    now = "now()" if db.dialect == "postgres" else "strftime('%Y-%m-%dT%H:%M:%fZ','now')"
    sql = f"UPDATE api_keys SET status = 'revoked', revoked_at = {now} WHERE key_id = ?"
    params: list[str] = [key_id]
    if tenant is not None:
        sql += " AND tenant_id = ?"
        params.append(tenant)
    with db.transaction() as tx:
        if tx.execute(sql, params) == 0:
            raise NotFoundError(f"API key {key_id} not found", code="API_KEY_NOT_FOUND")


def list_api_keys(db: Database, tenant: str | None = None) -> list[ApiKey]:
    sql = "SELECT key_id, tenant_id, scopes, status, label FROM api_keys"
    params: tuple[str, ...] = ()
    if tenant is not None:
        sql += " WHERE tenant_id = ?"
        params = (tenant,)
    with db.read() as tx:
        rows = tx.fetchall(sql + " ORDER BY tenant_id, key_id", params)
    return [ApiKey(r[0], r[1], frozenset(r[2].split(",")), r[3], r[4]) for r in rows]


def authenticate(db: Database, token: str | None) -> ApiKey:
    """The active key matching a presented `sk_<keyid>_<secret>`; AuthError otherwise (one message for every
    failure, so a caller cannot probe which key ids exist)."""
    if not token:
        raise AuthError("an API key is required (Authorization: Bearer sk_…)", code="UNAUTHENTICATED")
    bad = AuthError("invalid or revoked API key", code="API_KEY_INVALID")
    if not token.startswith(KEY_PREFIX):
        raise bad
    key_id, sep, secret = token[len(KEY_PREFIX):].partition("_")
    if not sep or not secret or not _KEY_ID_RE.match(key_id):
        raise bad
    with db.query() as tx:
        row = tx.fetchone("SELECT tenant_id, secret_hash, scopes, status, label FROM api_keys WHERE key_id = ?",
                          (key_id,))
    if row is None or not hmac.compare_digest(row[1], _hash_secret(secret)) or row[3] != "active":
        raise bad
    return ApiKey(key_id, row[0], frozenset(row[2].split(",")), row[3], row[4])
