"""Every failure settlekit raises on purpose: a stable code, an HTTP status and structured details."""

from __future__ import annotations

from typing import Any


class SettlekitError(Exception):
    """Base error. `code` is stable and machine-readable; `status` is the HTTP status the API maps it to."""

    code: str = "INTERNAL"
    status: int = 500

    def __init__(self, message: str, *, code: str | None = None, status: int | None = None, **details: Any):
        super().__init__(message)
        self.message = message
        if code is not None:
            self.code = code
        if status is not None:
            self.status = status
        self.details: dict[str, Any] = details

    def to_problem(self) -> dict[str, Any]:
        """RFC 9457 problem body."""
        body: dict[str, Any] = {
            "type": f"https://settlekit.dev/problems/{self.code.lower().replace('_', '-')}",
            "title": self.code,
            "status": self.status,
            "detail": self.message,
            "code": self.code,
        }
        if self.details:
            body["details"] = self.details
        return body

    def __str__(self) -> str:
        return f"{self.code}: {self.message}"


class ValidationError(SettlekitError):
    code = "SCHEMA_INVALID"
    status = 400


class CanonicalJsonError(ValidationError):
    code = "SCHEMA_INVALID"


class ConflictError(SettlekitError):
    code = "CONFLICT"
    status = 409


class NotFoundError(SettlekitError):
    code = "NOT_FOUND"
    status = 404


class VerificationError(SettlekitError):
    """A stream or event failed verification; `index` names the first bad event."""

    code = "VERIFICATION_FAILED"
    status = 400

    def __init__(self, message: str, *, code: str, index: int | None = None, **details: Any):
        super().__init__(message, code=code, index=index, **details)
        self.index = index


class SignerPolicyError(SettlekitError):
    code = "SIGNER_POLICY_VIOLATION"
    status = 400


class ConfigurationError(SettlekitError):
    code = "CONFIGURATION_INVALID"
    status = 500


class DatabaseUnavailableError(SettlekitError):
    """The database cannot be reached right now (connection refused or lost, pool wait exhausted, SQLite file
    locked or unopenable). Retry after `retryAfterSeconds`; a write that failed this way may or may not have
    committed, so retry it with the same Idempotency-Key (or the same client-finalized event)."""

    code = "DATABASE_UNAVAILABLE"
    status = 503

    def __init__(self, message: str = "the database is not reachable", *, retry_after: int = 1, **details: Any):
        super().__init__(message, retryAfterSeconds=retry_after, **details)
