"""settlekit delivery: signed webhook delivery of artifacts (spec 06).

Modules: signing (Standard Webhooks + legacy headers), receiver (verify_webhook, ReceiverServer),
ssrf (guard),
retry (backoff, outcome classification), sender (async httpx sender), message (keys, prepared requests),
secrets (secret_ref resolution), store (destinations/deliveries repository), worker (claim/lease loop), cli.
"""

from settlekit.delivery.errors import DestinationForbiddenError, WebhookSecretError, WebhookVerificationError
from settlekit.delivery.receiver import ReceiverServer, verify, verify_legacy, verify_webhook

__all__ = [
    "DestinationForbiddenError", "ReceiverServer", "WebhookSecretError", "WebhookVerificationError", "verify",
    "verify_legacy", "verify_webhook",
]
