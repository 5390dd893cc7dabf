"""Destination secret references (spec 06 §1).

- `secret:<id>`: a secret the API received by value, stored per tenant in the database (`webhook_secrets`)
  under an opaque id the server issued (`sec_` + 32 hex). It is only ever looked up with the destination's own
  tenant, so a tenant cannot name another tenant's secret. This is the only form the HTTP API accepts.
- `env:NAME` (opt-in), `inline:<s>` (dev): operator forms for the CLI, never from the API.
- `file:/abs/path`: a legacy form. It is never read (`secret_file_refused`, before the path is touched, so the
  answer says nothing about the file); `settlekit deliveries secrets migrate` imports such files from the
  secrets directory into `webhook_secrets` (see `migrate_file_refs`).

A file holds one secret per line, oldest first; two lines means a rotation is in progress and both sign. A
destination may also carry a rotated-out `previous_secret_ref` that keeps signing until its grace period ends.
Failures carry the spec's `last_error` reasons: secret_ref_invalid, secret_not_found,
secret_provider_forbidden, secret_file_refused.
"""

from __future__ import annotations

import os
import re
import secrets as pysecrets
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Final

from settlekit.errors import SettlekitError
from settlekit.store import deliveries, webhook_secrets
from settlekit.store.db import Tx

SECRET_ID_RE: Final = re.compile(r"sec_[0-9a-f]{32}")
FILE_REFUSED_MESSAGE: Final = (
    "file: secret references are no longer read; import them with `settlekit deliveries secrets migrate`"
)
DB_SCHEME: Final = "secret"


class SecretRefError(SettlekitError):
    code = "SECRET_REF_INVALID"
    status = 400

    def __init__(self, message: str, *, reason: str, **details: Any):
        codes = {
            "secret_ref_invalid": "SECRET_REF_INVALID",
            "secret_not_found": "SECRET_NOT_FOUND",
            "secret_provider_forbidden": "SECRET_PROVIDER_FORBIDDEN",
            "secret_file_refused": "SECRET_FILE_REFUSED",
        }
        super().__init__(message, code=codes[reason], reason=reason, **details)
        self.reason = reason


def new_secret_id() -> str:
    return f"sec_{pysecrets.token_hex(16)}"


def db_ref(secret_id: str) -> str:
    return f"{DB_SCHEME}:{secret_id}"


def secret_id_of(ref: str | None) -> str | None:
    """The id of a `secret:<id>` reference (None for other forms)."""
    if ref is None:
        return None
    scheme, _, rest = ref.partition(":")
    return rest if scheme == DB_SCHEME and SECRET_ID_RE.fullmatch(rest) else None


def store_secret(tx: Tx, tenant_id: str, value: str) -> str:
    """Keep a secret for a tenant; returns its `secret:<id>` reference."""
    secret_id = new_secret_id()
    webhook_secrets.insert(tx, tenant_id, secret_id, value)
    return db_ref(secret_id)


def secret_exists(tx: Tx, tenant_id: str, secret_id: str) -> bool:
    return webhook_secrets.exists(tx, tenant_id, secret_id)


def delete_unreferenced(tx: Tx, tenant_id: str, now: datetime) -> int:
    """End the tenant's rotations whose grace is over, then drop the stored secrets no destination uses any
    more (current, or previous within its grace)."""
    deliveries.end_expired_rotations(tx, tenant_id, now=now)
    used: set[str] = set()
    for current, previous in deliveries.secret_refs(tx, tenant_id):
        for ref in (current, previous):
            sid = secret_id_of(ref)
            if sid is not None:
                used.add(sid)
    gone = 0
    for sid in webhook_secrets.list_ids(tx, tenant_id):
        if sid not in used:
            gone += webhook_secrets.delete(tx, tenant_id, sid)
    return gone


@dataclass(frozen=True)
class SecretResolver:
    allow_env: bool = False
    allow_inline: bool = False

    def validate(self, ref: str) -> None:
        """Check the form of a reference (when a destination is saved) without reading it."""
        scheme, _, rest = ref.partition(":")
        if not rest:
            raise SecretRefError("secret_ref must be secret:<id> or env:NAME",
                                 reason="secret_ref_invalid")
        if scheme == DB_SCHEME:
            if not SECRET_ID_RE.fullmatch(rest):
                raise SecretRefError("secret id is not one this server issued", reason="secret_ref_invalid")
        elif scheme == "file":  # legacy: refused on save and never read
            raise SecretRefError(FILE_REFUSED_MESSAGE, reason="secret_file_refused")
        elif scheme == "env":
            if not self.allow_env:
                raise SecretRefError("env secret refs are not enabled", reason="secret_provider_forbidden")
        elif scheme == "inline":
            if not self.allow_inline:
                raise SecretRefError("inline secrets are refused", reason="secret_provider_forbidden")
        else:
            raise SecretRefError(f"unknown secret provider {scheme!r}", reason="secret_ref_invalid")

    def resolve(self, ref: str, *, tx: Tx | None = None, tenant_id: str | None = None) -> list[str]:
        """The active secrets of a reference, oldest first. `secret:` references need the transaction and the
        destination's tenant (the lookup is scoped to it)."""
        self.validate(ref)
        scheme, _, rest = ref.partition(":")
        if scheme == DB_SCHEME:
            if tx is None or tenant_id is None:
                raise SecretRefError("stored secrets are resolved with their tenant", reason="secret_ref_invalid")
            stored = webhook_secrets.get(tx, tenant_id, rest)
            if stored is None:
                raise SecretRefError("secret not found", reason="secret_not_found")
            text = stored
        elif scheme == "file":  # never read, whatever the path: the same answer for every file
            raise SecretRefError(FILE_REFUSED_MESSAGE, reason="secret_file_refused")
        elif scheme == "env":
            value = os.environ.get(rest)
            if value is None:
                raise SecretRefError("secret env var not set", reason="secret_not_found", name=rest)
            text = value
        else:
            text = rest
        secrets = [ln.strip() for ln in text.splitlines() if ln.strip()]
        if not secrets:
            raise SecretRefError("secret is empty", reason="secret_not_found")
        return secrets

    def for_destination(self, tx: Tx, dest: deliveries.Destination, now: datetime) -> list[str]:
        """Every secret a delivery to `dest` signs with at `now`, oldest first: the rotated-out one while its
        grace period lasts, then the current one(s)."""
        out: list[str] = []
        expires = dest.previous_secret_expires_at
        if dest.previous_secret_ref is not None and expires is not None and now < expires:
            out += self.resolve(dest.previous_secret_ref, tx=tx, tenant_id=dest.tenant_id)
        for value in self.resolve(dest.secret_ref, tx=tx, tenant_id=dest.tenant_id):
            if value not in out:
                out.append(value)
        return out
