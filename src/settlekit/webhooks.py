"""Receiver-side helpers (spec 06 §10): `settlekit.webhooks.verify(secret, headers, body)`.

Re-exports of `settlekit.delivery`; receivers import from here.
"""

from settlekit.delivery.errors import WebhookVerificationError
from settlekit.delivery.receiver import verify, verify_legacy, verify_webhook

__all__ = ["WebhookVerificationError", "verify", "verify_legacy", "verify_webhook"]
