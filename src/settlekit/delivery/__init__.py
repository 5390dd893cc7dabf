"""settlekit delivery: signed webhook delivery of artifacts (spec 06).

Modules: signing (Standard Webhooks + legacy headers), receiver (verify_webhook, ReceiverServer),
ssrf (guard),
retry (backoff, outcome classification), sender (async httpx sender), message (keys, prepared requests),
secrets (secret_ref resolution), enqueue (deliveries an artifact creates), worker (claim/lease loop), cli;
the destinations/deliveries rows are read and written by `settlekit.store.deliveries`.
"""

from settlekit.delivery.errors import DestinationForbiddenError, WebhookSecretError, WebhookVerificationError
from settlekit.delivery.receiver import ReceiverServer, verify, verify_legacy, verify_webhook

__all__ = [
    "DestinationForbiddenError", "ReceiverServer", "WebhookSecretError", "WebhookVerificationError", "verify",
    "verify_legacy", "verify_webhook",
]
