"""API keys: `sk_<keyid>_<secret>`, stored as sha256(secret), bound to one tenant and a set of scopes.

`admin` implies every other scope. A key is looked up by its key id and the secret compared in constant time.
"""

from __future__ import annotations

import hashlib
import hmac
import re
import secrets
import threading
from collections import OrderedDict
from collections.abc import Callable, Iterable
from dataclasses import dataclass

from settlekit.application import keys as api_keys
from settlekit.application.database import Database
from settlekit.application.keys import StoredApiKey
from settlekit.errors import NotFoundError, SettlekitError, ValidationError
from settlekit.events.canonical import sha256_hex

SCOPES = ("jobs:read", "jobs:write", "finance:write", "ops", "admin")
KEY_PREFIX = "sk_"
_KEY_ID_RE = re.compile(r"[0-9a-f]{16}")
_TENANT_RE = re.compile(r"[A-Za-z0-9][A-Za-z0-9._:-]{0,199}")


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


def token_digest(token: str) -> bytes:
    """How a presented token is remembered in this process (never as itself): its SHA-256."""
    return hashlib.sha256(token.encode("utf-8", "surrogatepass")).digest()


def _hash_secret(secret: str) -> str:
    return sha256_hex(secret.encode("utf-8"))


def check_tenant_id(tenant: object) -> None:
    """A tenant id an API key can be bound to: 1..200 characters of [A-Za-z0-9._:-], a letter or digit first
    (SCHEMA_INVALID otherwise)."""
    if not isinstance(tenant, str) or not _TENANT_RE.fullmatch(tenant):
        raise ValidationError("tenant must be 1..200 characters of [A-Za-z0-9._:-]", code="SCHEMA_INVALID",
                              field="tenant")


def create_api_key(db: Database, tenant: str, scopes: Iterable[str] | str, *,
                   label: str | None = None) -> tuple[str, str]:
    """Create a key for `tenant`; returns (key_id, the full secret string). The secret is not stored."""
    check_tenant_id(tenant)
    scope_set = parse_scopes(scopes)
    key_id = secrets.token_hex(8)
    secret = secrets.token_urlsafe(32)
    api_keys.insert(db, key_id, tenant, _hash_secret(secret), scope_set, label)
    return key_id, f"{KEY_PREFIX}{key_id}_{secret}"


def revoke_api_key(db: Database, key_id: str, *, tenant: str | None = None) -> None:
    """Revoke a key (optionally only if it belongs to `tenant`); NotFoundError when unknown."""
    if not api_keys.revoke(db, key_id, tenant_id=tenant):
        raise NotFoundError(f"API key {key_id} not found", code="API_KEY_NOT_FOUND")


def list_api_keys(db: Database, tenant: str | None = None) -> list[ApiKey]:
    return [ApiKey(k.key_id, k.tenant_id, k.scopes, k.status, k.label) for k in api_keys.list_keys(db, tenant)]


def still_active(db: Database, key: ApiKey) -> bool:
    """Whether an authenticated key is still active (not revoked since): a long-lived answer (an event stream)
    asks again now and then."""
    found = api_keys.find(db, key.key_id)
    return found is not None and found.status == "active" and found.tenant_id == key.tenant_id


def authenticate(db: Database, token: str | None,
                 lookup: Callable[[str], StoredApiKey | None] | None = None) -> ApiKey:
    """The active key matching a presented `sk_<keyid>_<secret>`; AuthError otherwise (one message for every
    failure, so a caller cannot probe which key ids exist). `lookup(key_id)`: how the stored key is read (the
    append route reads it with the stream, in one statement); by default on its own."""
    if not token:
        raise AuthError("an API key is required (Authorization: Bearer sk_…)", code="UNAUTHENTICATED")
    bad = AuthError("invalid or revoked API key", code="API_KEY_INVALID")
    if not token.startswith(KEY_PREFIX):
        raise bad
    key_id, sep, secret = token[len(KEY_PREFIX):].partition("_")
    if not sep or not secret or not _KEY_ID_RE.fullmatch(key_id):
        raise bad
    found = lookup(key_id) if lookup is not None else api_keys.find(db, key_id)
    if found is None or not hmac.compare_digest(found.secret_hash, _hash_secret(secret)) or found.status != "active":
        raise bad
    return ApiKey(key_id, found.tenant_id, found.scopes, found.status, found.label)


class KnownKeys:
    """The stored rows of the API keys that authenticated in this process, by the digest of the whole presented
    token, at most `max_entries` (least recently used dropped first): the append route authenticates such a token
    without reading its key, and its commit writes nothing unless the key is still active then
    (CommitBatch.active_api_key), so a revocation takes effect for appends as it does with a read."""

    def __init__(self, max_entries: int = 10_000):
        self.max_entries = max_entries
        self._rows: OrderedDict[bytes, StoredApiKey] = OrderedDict()
        self._lock = threading.Lock()

    def get(self, token: str) -> StoredApiKey | None:
        digest = token_digest(token)
        with self._lock:
            row = self._rows.get(digest)
            if row is not None:
                self._rows.move_to_end(digest)
            return row

    def add(self, token: str, row: StoredApiKey) -> None:
        """Keep `row` for `token`, which authenticated with it just now."""
        if self.max_entries <= 0 or row.status != "active":
            return
        digest = token_digest(token)
        with self._lock:
            self._rows[digest] = row
            self._rows.move_to_end(digest)
            while len(self._rows) > self.max_entries:
                self._rows.popitem(last=False)

    def discard(self, token: str) -> None:
        with self._lock:
            self._rows.pop(token_digest(token), None)
