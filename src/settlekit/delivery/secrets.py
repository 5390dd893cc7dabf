"""Destination secret references (spec 06 §1): `file:/abs/path`, `env:NAME` (opt-in), `inline:<s>` (dev).

A file holds one secret per line, oldest first; two lines means a rotation is in progress and both sign.
Failures carry the spec's `last_error` reasons: secret_ref_invalid, secret_not_found,
secret_provider_forbidden.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from settlekit.errors import SettlekitError


class SecretRefError(SettlekitError):
    code = "SECRET_REF_INVALID"
    status = 400

    def __init__(self, message: str, *, reason: str, **details: Any):
        codes = {
            "secret_ref_invalid": "SECRET_REF_INVALID",
            "secret_not_found": "SECRET_NOT_FOUND",
            "secret_provider_forbidden": "SECRET_PROVIDER_FORBIDDEN",
        }
        super().__init__(message, code=codes[reason], reason=reason, **details)
        self.reason = reason


@dataclass(frozen=True)
class SecretResolver:
    allow_env: bool = False
    allow_inline: bool = False

    def validate(self, ref: str) -> None:
        """Check the form of a reference (when a destination is saved) without reading it."""
        scheme, _, rest = ref.partition(":")
        if not rest:
            raise SecretRefError("secret_ref must be file:/abs/path or env:NAME", reason="secret_ref_invalid")
        if scheme == "file":
            if not Path(rest).is_absolute():
                raise SecretRefError("file secret_ref needs an absolute path", reason="secret_ref_invalid")
        elif scheme == "env":
            if not self.allow_env:
                raise SecretRefError("env secret refs are not enabled", reason="secret_provider_forbidden")
        elif scheme == "inline":
            if not self.allow_inline:
                raise SecretRefError("inline secrets are refused", reason="secret_provider_forbidden")
        else:
            raise SecretRefError(f"unknown secret provider {scheme!r}", reason="secret_ref_invalid")

    def resolve(self, ref: str) -> list[str]:
        """The active secrets, oldest first."""
        self.validate(ref)
        scheme, _, rest = ref.partition(":")
        if scheme == "file":
            try:
                text = Path(rest).read_text(encoding="utf-8")
            except FileNotFoundError as exc:
                raise SecretRefError("secret file not found", reason="secret_not_found", path=rest) from exc
            except OSError as exc:
                raise SecretRefError(
                    f"secret file unreadable: {exc.strerror}", reason="secret_not_found", path=rest
                ) from exc
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
