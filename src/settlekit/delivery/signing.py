"""Webhook signing (spec 06 §6): Standard Webhooks `webhook-*` headers and settld's legacy `x-proxy-*` ones.

The signed bytes are exactly the body bytes sent. Secrets for Standard Webhooks are `whsec_<base64>`; during
rotation several secrets are active and each contributes one `v1,<sig>` entry to `webhook-signature`.
The legacy signature is keyed with the UTF-8 bytes of the secret string as configured.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import secrets as _secrets
import time
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime, timedelta
from typing import Final, Literal
from urllib.parse import quote

from settlekit.delivery.errors import WebhookSecretError, WebhookVerificationError
from settlekit.events.canonical import iso_millis

SigningMode = Literal["standard", "settld_legacy", "both"]
SIGNING_MODES: Final = ("standard", "settld_legacy", "both")
SECRET_PREFIX: Final = "whsec_"
DEFAULT_TOLERANCE_SECONDS: Final = 300

H_ID: Final = "webhook-id"
H_TIMESTAMP: Final = "webhook-timestamp"
H_SIGNATURE: Final = "webhook-signature"


# --- secrets ------------------------------------------------------------------------------------------------


def generate_secret(nbytes: int = 32) -> str:
    """A fresh `whsec_` secret with `nbytes` (24–64) random key bytes."""
    if not 24 <= nbytes <= 64:
        raise WebhookSecretError("secret length must be 24..64 bytes", nbytes=nbytes)
    return SECRET_PREFIX + base64.b64encode(_secrets.token_bytes(nbytes)).decode("ascii")


def decode_secret(secret: str) -> bytes:
    """HMAC key of a Standard Webhooks secret: base64-decode of the part after `whsec_`."""
    if not isinstance(secret, str) or not secret.startswith(SECRET_PREFIX):
        raise WebhookSecretError("standard webhook secrets must start with 'whsec_'")
    raw = secret[len(SECRET_PREFIX) :]
    try:
        # unpadded base64 is accepted, as the official Standard Webhooks libraries do
        key = base64.b64decode(raw + "=" * (-len(raw) % 4), validate=True)
    except (binascii.Error, ValueError) as exc:
        raise WebhookSecretError("secret after 'whsec_' is not valid base64") from exc
    if not key:
        raise WebhookSecretError("secret key is empty")
    return key


def _as_secret_list(secret: str | Sequence[str]) -> list[str]:
    items = [secret] if isinstance(secret, str) else list(secret)
    if not items:
        raise WebhookSecretError("at least one secret is required")
    return items


# --- Standard Webhooks --------------------------------------------------------------------------------------


def sign_standard(secret: str, message_id: str, timestamp: int, body: bytes) -> str:
    """One `v1,<base64 HMAC-SHA256>` entry over `id.timestamp.` + body."""
    mac = hmac.new(decode_secret(secret), f"{message_id}.{timestamp}.".encode(), hashlib.sha256)
    mac.update(body)
    return "v1," + base64.b64encode(mac.digest()).decode("ascii")


def standard_signature_header(
    secret: str | Sequence[str], message_id: str, timestamp: int, body: bytes
) -> str:
    """`webhook-signature` value: one space-separated `v1,` entry per active secret, in the given order."""
    if "." in message_id:
        raise WebhookSecretError("webhook-id must not contain '.'", message_id=message_id)
    return " ".join(sign_standard(s, message_id, timestamp, body) for s in _as_secret_list(secret))


def standard_headers(
    secret: str | Sequence[str], message_id: str, timestamp: int, body: bytes
) -> dict[str, str]:
    return {
        H_ID: message_id,
        H_TIMESTAMP: str(int(timestamp)),
        H_SIGNATURE: standard_signature_header(secret, message_id, int(timestamp), body),
    }


def _lower(headers: Mapping[str, str]) -> dict[str, str]:
    return {k.lower(): v for k, v in headers.items()}


def _require(h: Mapping[str, str], name: str) -> str:
    value = h.get(name)
    if value is None or value == "":
        raise WebhookVerificationError(f"missing header {name}", reason="missing_header", header=name)
    return value


def check_timestamp(timestamp_text: str, *, tolerance_seconds: float, now: float | None) -> int:
    """Parse a `webhook-timestamp` (integer unix seconds) and require it within ±tolerance of `now`."""
    text = timestamp_text.strip()
    if not text.isascii() or not text.isdigit():
        raise WebhookVerificationError(
            "webhook-timestamp is not integer unix seconds", reason="timestamp_out_of_tolerance"
        )
    ts = int(text)
    current = time.time() if now is None else now
    if abs(current - ts) > tolerance_seconds:
        raise WebhookVerificationError(
            "webhook-timestamp outside the tolerance window",
            reason="timestamp_out_of_tolerance",
            timestamp=ts,
            tolerance_seconds=tolerance_seconds,
        )
    return ts


def verify_standard_signature(
    headers: Mapping[str, str],
    body: bytes,
    secret: str | Sequence[str],
    *,
    tolerance_seconds: float = DEFAULT_TOLERANCE_SECONDS,
    now: float | None = None,
) -> str:
    """Check headers, timestamp window and signature; return the `webhook-id`.

    Accepts when any `v1,` entry matches the signature of any given secret (constant-time compare);
    entries with other versions are ignored.
    """
    h = _lower(headers)
    message_id = _require(h, H_ID)
    ts_text = _require(h, H_TIMESTAMP)
    sig_header = _require(h, H_SIGNATURE)
    ts = check_timestamp(ts_text, tolerance_seconds=tolerance_seconds, now=now)
    offered = [e[3:].encode("ascii", "replace") for e in sig_header.split() if e.startswith("v1,")]
    expected = [sign_standard(s, message_id, ts, body)[3:].encode("ascii") for s in _as_secret_list(secret)]
    matched = False
    for exp in expected:
        for got in offered:
            # no early exit: every pair is compared so timing does not reveal which secret matched
            matched |= hmac.compare_digest(exp, got)
    if not matched:
        raise WebhookVerificationError("no webhook-signature entry matches", reason="bad_signature")
    return message_id


# --- settld legacy ------------------------------------------------------------------------------------------


def sign_legacy(secret: str, timestamp: str, body: bytes) -> str:
    """settld `x-proxy-signature`: hex HMAC-SHA256 keyed by UTF-8(secret) over `timestamp.` + body."""
    if not secret:
        raise WebhookSecretError("legacy secret is empty")
    mac = hmac.new(secret.encode("utf-8"), f"{timestamp}.".encode(), hashlib.sha256)
    mac.update(body)
    return mac.hexdigest()


def encode_order_key(order_key: str) -> str:
    """Header-safe form of an order key (it contains newlines): percent-encoding with no safe characters."""
    return quote(order_key, safe="")


def legacy_headers(
    secret: str,
    *,
    timestamp: str,
    body: bytes,
    dedupe_key: str,
    delivery_id: str,
    artifact_type: str,
    artifact_id: str,
    artifact_hash: str,
    order_key: str,
) -> dict[str, str]:
    return {
        "x-proxy-dedupe-key": dedupe_key,
        "x-proxy-delivery-id": delivery_id,
        "x-proxy-artifact-type": artifact_type,
        "x-proxy-artifact-id": artifact_id,
        "x-proxy-artifact-hash": artifact_hash,
        "x-proxy-order-key": encode_order_key(order_key),
        "x-proxy-timestamp": timestamp,
        "x-proxy-signature": sign_legacy(secret, timestamp, body),
    }


def _parse_iso(text: str) -> datetime:
    value = text.strip()
    if value.endswith("Z"):
        value = value[:-1] + "+00:00"
    try:
        dt = datetime.fromisoformat(value)
    except ValueError as exc:
        raise WebhookVerificationError(
            "x-proxy-timestamp is not an ISO timestamp", reason="timestamp_out_of_tolerance"
        ) from exc
    return dt if dt.tzinfo is not None else dt.replace(tzinfo=UTC)


def verify_legacy_signature(
    headers: Mapping[str, str],
    body: bytes,
    secret: str | Sequence[str],
    *,
    tolerance_seconds: float = DEFAULT_TOLERANCE_SECONDS,
    now: float | None = None,
) -> str:
    """Check the settld `x-proxy-*` headers; return the dedupe key (the legacy message id)."""
    h = _lower(headers)
    dedupe_key = _require(h, "x-proxy-dedupe-key")
    ts_text = _require(h, "x-proxy-timestamp")
    got = _require(h, "x-proxy-signature").strip().lower().encode("ascii", "replace")
    ts = _parse_iso(ts_text)
    current = datetime.now(UTC) if now is None else datetime.fromtimestamp(now, UTC)
    if abs(current - ts) > timedelta(seconds=tolerance_seconds):
        raise WebhookVerificationError(
            "x-proxy-timestamp outside the tolerance window", reason="timestamp_out_of_tolerance"
        )
    matched = False
    for s in _as_secret_list(secret):
        matched |= hmac.compare_digest(sign_legacy(s, ts_text, body).encode("ascii"), got)
    if not matched:
        raise WebhookVerificationError("x-proxy-signature does not match", reason="bad_signature")
    return dedupe_key


# --- full header set for one attempt ------------------------------------------------------------------------


def delivery_headers(
    *,
    mode: SigningMode,
    secrets: Sequence[str],
    body: bytes,
    message_id: str,
    dedupe_key: str,
    delivery_id: str,
    artifact_type: str,
    artifact_id: str,
    artifact_hash: str,
    order_key: str,
    attempt: int,
    now: datetime | None = None,
) -> dict[str, str]:
    """Every header of one attempt for `mode` (spec 06 §6).

    `secrets` are the active secrets, oldest first; Standard Webhooks signs with each of them, the legacy
    signature uses the newest (last) one.
    """
    if mode not in SIGNING_MODES:
        raise WebhookSecretError(f"unknown signing mode {mode!r}", mode=mode)
    active = _as_secret_list(secrets)
    at = datetime.now(UTC) if now is None else now.astimezone(UTC)
    headers: dict[str, str] = {
        "content-type": "application/json; charset=utf-8",
        "x-settlekit-artifact-type": artifact_type,
        "x-settlekit-artifact-id": artifact_id,
        "x-settlekit-artifact-hash": artifact_hash,
        "x-settlekit-order-key": encode_order_key(order_key),
        "x-settlekit-delivery-attempt": str(attempt),
    }
    if mode in ("standard", "both"):
        headers.update(standard_headers(active, message_id, int(at.timestamp()), body))
    if mode in ("settld_legacy", "both"):
        headers.update(
            legacy_headers(
                active[-1],
                timestamp=iso_millis(at),
                body=body,
                dedupe_key=dedupe_key,
                delivery_id=delivery_id,
                artifact_type=artifact_type,
                artifact_id=artifact_id,
                artifact_hash=artifact_hash,
                order_key=order_key,
            )
        )
    return headers
