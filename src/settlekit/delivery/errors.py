"""Delivery errors: each carries a stable code and the HTTP status a receiver or API maps it to."""

from __future__ import annotations

from typing import Any, Final

from settlekit.errors import SettlekitError

# Spec 06 §10 short reasons → stable settlekit codes.
_REASON_CODES: Final = {
    "missing_header": ("WEBHOOK_HEADER_MISSING", 400),
    "timestamp_out_of_tolerance": ("WEBHOOK_TIMESTAMP_OUT_OF_TOLERANCE", 401),
    "bad_signature": ("WEBHOOK_SIGNATURE_INVALID", 401),
    "bad_json": ("WEBHOOK_BODY_INVALID", 400),
    "artifact_hash_mismatch": ("ARTIFACT_HASH_INVALID", 422),
    "unbalanced_settlement": ("SETTLEMENT_TOTALS_UNBALANCED", 422),
    "id_conflict": ("WEBHOOK_ID_CONFLICT", 409),
}


class WebhookVerificationError(SettlekitError):
    """A received webhook failed verification.

    `reason` is the spec 06 §10 short code, `code` the stable settlekit code.
    """

    code = "WEBHOOK_SIGNATURE_INVALID"
    status = 401

    def __init__(self, message: str, *, reason: str, **details: Any):
        code, status = _REASON_CODES[reason]
        super().__init__(message, code=code, status=status, reason=reason, **details)
        self.reason = reason


class WebhookSecretError(SettlekitError):
    """A signing secret is malformed (not `whsec_<base64>` or empty)."""

    code = "WEBHOOK_SECRET_INVALID"
    status = 400


class DestinationForbiddenError(SettlekitError):
    """The SSRF guard refused a destination URL or one of its resolved addresses."""

    code = "DESTINATION_URL_FORBIDDEN"
    status = 400


class QuotaExceededError(SettlekitError):
    """A tenant already has as many pending deliveries as its quota allows."""

    code = "TENANT_QUOTA_EXCEEDED"
    status = 429
