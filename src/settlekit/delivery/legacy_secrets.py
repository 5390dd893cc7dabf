"""One-off import of legacy `file:` secret references into `webhook_secrets` (`settlekit deliveries secrets
migrate`).

Workers never read `file:` references (`secret_file_refused`). This module imports the ones an operator vouches
for: a referenced file is imported only when, after every symlink is resolved, it lies inside the secrets
directory in its destination's own tenant's area, which is either

- `<dir>/<tenant>/…` (where the HTTP API used to write: `<dir>/<tenant>/<destination>.<hex>.secret`), or
- `<dir>/<tenant>.<destination>.whsec` (where `destinations add --generate-secret` used to write).

Anything else is refused and left as it is: a relative path or one with a `..` component (never followed), a
missing or non-regular file, a file outside the directory or in another tenant's area, a file referenced by
destinations of more than one tenant, a file too large, empty or not holding valid secrets. A migrated
destination gets a `secret:<id>` reference in its own tenant; one disabled because its file ref was refused is
enabled again and the deliveries failed for that reason are requeued.
"""

from __future__ import annotations

import logging
import os
import stat
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any, Final

from settlekit.delivery.errors import WebhookSecretError
from settlekit.delivery.retry import SECRET_FILE_REFUSED
from settlekit.delivery.secrets import store_secret
from settlekit.delivery.signing import decode_secret
from settlekit.store import deliveries as store
from settlekit.store.db import Database, Tx

audit = logging.getLogger("settlekit.delivery.audit")

MAX_SECRET_FILE_BYTES: Final = 64 * 1024
_FIELDS: Final = ("secret_ref", "previous_secret_ref")


@dataclass(frozen=True)
class RefOutcome:
    tenant_id: str
    destination_id: str
    field: str  # secret_ref | previous_secret_ref
    path: str
    migrated: bool
    reason: str  # "migrated" or why it was refused

    def to_json(self) -> dict[str, Any]:
        return {"tenant_id": self.tenant_id, "destination_id": self.destination_id, "field": self.field,
                "path": self.path, "migrated": self.migrated, "reason": self.reason}


@dataclass
class MigrationReport:
    outcomes: list[RefOutcome] = field(default_factory=list)
    enabled: list[tuple[str, str]] = field(default_factory=list)  # destinations enabled again
    requeued: int = 0

    @property
    def migrated(self) -> list[RefOutcome]:
        return [o for o in self.outcomes if o.migrated]

    @property
    def refused(self) -> list[RefOutcome]:
        return [o for o in self.outcomes if not o.migrated]

    def to_json(self) -> dict[str, Any]:
        return {"migrated": [o.to_json() for o in self.migrated], "refused": [o.to_json() for o in self.refused],
                "enabled": [{"tenant_id": t, "destination_id": d} for t, d in self.enabled],
                "requeued": self.requeued}


class _Refused(Exception):
    def __init__(self, reason: str):
        super().__init__(reason)
        self.reason = reason


def _inside(path: Path, folder: Path) -> bool:
    return path == folder or folder in path.parents


def _locate(raw: str, root: Path | None, tenant_id: str, destination_id: str) -> Path:
    """The resolved file of a `file:` ref when it lies in the tenant's area of `root`; _Refused otherwise."""
    if root is None:
        raise _Refused("no secrets directory given")
    if not tenant_id or "/" in tenant_id or tenant_id in (".", ".."):
        raise _Refused("tenant id cannot name a folder")
    if not raw.startswith("/"):
        raise _Refused("path is not absolute")
    if ".." in raw.split("/"):
        raise _Refused("path has a '..' component")
    try:
        real = Path(raw).resolve(strict=True)
    except (FileNotFoundError, NotADirectoryError):
        raise _Refused("file not found") from None
    except (OSError, RuntimeError):  # a symlink loop, permissions
        raise _Refused("path cannot be resolved") from None
    if not _inside(real, root):
        raise _Refused("file is outside the secrets directory")
    if not (_inside(real, root / tenant_id) and real != root / tenant_id) and \
            real != root / f"{tenant_id}.{destination_id}.whsec":
        raise _Refused("file is not in this tenant's area of the secrets directory")
    try:
        info = real.stat()
    except OSError:
        raise _Refused("file cannot be read") from None
    if not stat.S_ISREG(info.st_mode):
        raise _Refused("not a regular file")
    if info.st_size > MAX_SECRET_FILE_BYTES:
        raise _Refused("file too large")
    return real


def _read(real: Path, signing: str) -> str:
    try:
        text = real.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError):
        raise _Refused("file cannot be read") from None
    values = [ln.strip() for ln in text.splitlines() if ln.strip()]
    if not values:
        raise _Refused("file holds no secret")
    if signing in ("standard", "both"):
        for v in values:
            try:
                decode_secret(v)
            except WebhookSecretError:
                raise _Refused("file does not hold valid whsec_ secrets") from None
    return "\n".join(values)


def migrate_file_refs(db: Database, secrets_dir: Path | None, *, now: datetime) -> MigrationReport:
    """Import every legacy `file:` reference (current or rotated-out) whose file lies in its destination's
    tenant area of `secrets_dir`; refuse and report the others. One transaction; idempotent (a second run
    finds no `file:` reference it migrated)."""
    root = _secrets_root(secrets_dir)
    report = MigrationReport()
    with db.transaction() as tx:
        rows = store.destinations_with_ref_scheme(tx, "file")
        located, tenants_of = _locate_all(rows, root)
        touched: set[tuple[str, str]] = set()
        for tenant_id, destination_id, signing, name, ref, real, why in located:
            raw = ref[len("file:"):]
            try:
                if real is None:
                    raise _Refused(why)
                if len(tenants_of[real]) > 1:
                    raise _Refused("file is referenced by destinations of more than one tenant")
                value = _read(real, signing)
            except _Refused as exc:
                report.outcomes.append(RefOutcome(tenant_id, destination_id, name, raw, False, exc.reason))
                continue
            new_ref = store_secret(tx, tenant_id, value)
            store.replace_secret_ref(tx, tenant_id, destination_id, name, old=ref, new=new_ref, now=now)
            report.outcomes.append(RefOutcome(tenant_id, destination_id, name, raw, True, "migrated"))
            touched.add((tenant_id, destination_id))
        for tenant_id, destination_id in sorted(touched):
            _enable_if_refused(tx, tenant_id, destination_id, now, report)
    for o in report.outcomes:
        audit.info("legacy secret ref %s", "migrated" if o.migrated else "refused", extra=o.to_json())
    return report


def _secrets_root(secrets_dir: Path | None) -> Path | None:
    """`secrets_dir` resolved, or None when not given, missing or not a directory."""
    root: Path | None = None
    if secrets_dir is not None:
        try:
            root = Path(os.path.abspath(secrets_dir)).resolve(strict=True)
        except (OSError, RuntimeError):
            root = None
        if root is not None and not root.is_dir():
            root = None
    return root


# (tenant_id, destination_id, signing, field name, ref, the file it names or None, why it was refused)
_Located = tuple[str, str, str, str, str, Path | None, str]


def _locate_all(rows: Sequence[tuple[str, str, str, str, str | None]],
                root: Path | None) -> tuple[list[_Located], dict[Path, set[str]]]:
    """Every `file:` reference of `rows` with the file it names (or why it is refused), and the tenants
    referencing each file."""
    located: list[_Located] = []
    tenants_of: dict[Path, set[str]] = defaultdict(set)
    for tenant_id, destination_id, signing, current, previous in rows:
        for name, ref in zip(_FIELDS, (current, previous), strict=True):
            if ref is None or not str(ref).startswith("file:"):
                continue
            raw = str(ref)[len("file:"):]
            try:
                real: Path | None = _locate(raw, root, tenant_id, destination_id)
                why = ""
            except _Refused as exc:
                real, why = None, exc.reason
            if real is not None:
                tenants_of[real].add(tenant_id)
            located.append((tenant_id, destination_id, signing, name, str(ref), real, why))
    return located, tenants_of


def _enable_if_refused(tx: Tx, tenant_id: str, destination_id: str, now: datetime, report: MigrationReport) -> None:
    """A destination disabled because its file ref was refused, and now without any: enabled again, its
    deliveries failed for that reason requeued (attempts reset, same message id)."""
    dest = store.get_destination(tx, tenant_id, destination_id)
    if dest is None or dest.status != "disabled" or dest.disabled_reason != SECRET_FILE_REFUSED:
        return
    if any(r is not None and r.startswith("file:") for r in (dest.secret_ref, dest.previous_secret_ref)):
        return
    store.set_destination_status(tx, tenant_id, destination_id, status="active", reason=None, now=now)
    report.requeued += store.requeue_failed_with_error(tx, tenant_id, destination_id, error=SECRET_FILE_REFUSED,
                                                       now=now)
    report.enabled.append((tenant_id, destination_id))
