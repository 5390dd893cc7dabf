"""Standard Webhooks and legacy signing: round trips, rotation, tampering, header sets and delivery keys."""

from __future__ import annotations

import base64
import hashlib
import hmac
from datetime import UTC, datetime

import pytest

from settlekit.delivery.errors import WebhookSecretError, WebhookVerificationError
from settlekit.delivery.message import (
    DeliveryKeys,
    artifact_priority,
    dedupe_key,
    message_id,
    prepare_request,
)
from settlekit.delivery.signing import (
    decode_secret,
    delivery_headers,
    generate_secret,
    sign_legacy,
    sign_standard,
    standard_headers,
    verify_legacy_signature,
    verify_standard_signature,
)
from settlekit.events.canonical import canonical_bytes, sha256_hex

NOW = 1_767_312_000  # 2026-01-02T00:00:00Z
BODY = b'{"a":1,"artifactHash":"x","b":2}'
MSG = "dlv_0123456789abcdef0123456789abcdef"


def test_legacy_signature_matches_the_spec_vector() -> None:
    sig = sign_legacy("s3cr3t", "2026-01-02T00:00:00.000Z", BODY)
    assert sig == "2c0a2deb8657e6dea19063afe22ac42c883ce6fc82728ab34d900faaa5ee50c0"


def test_standard_signature_is_hmac_over_id_timestamp_body() -> None:
    key = b"k" * 32
    secret = "whsec_" + base64.b64encode(key).decode()
    mac = hmac.new(key, f"{MSG}.{NOW}.".encode() + BODY, hashlib.sha256)
    expected = base64.b64encode(mac.digest()).decode()
    assert sign_standard(secret, MSG, NOW, BODY) == "v1," + expected


def test_standard_webhooks_reference_example() -> None:
    # example from the Standard Webhooks specification
    secret = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"
    body = b'{"test": 2432232314}'
    sig = sign_standard(secret, "msg_p5jXN8AQM9LWM0D4loKWxJek", 1614265330, body)
    assert sig == "v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE="


def test_round_trip_and_header_case_insensitivity() -> None:
    secret = generate_secret()
    headers = standard_headers(secret, MSG, NOW, BODY)
    assert verify_standard_signature(headers, BODY, secret, now=NOW) == MSG
    upper = {k.upper(): v for k, v in headers.items()}
    assert verify_standard_signature(upper, BODY, secret, now=NOW + 299) == MSG


def test_rotation_two_active_secrets() -> None:
    old, new = generate_secret(), generate_secret()
    headers = standard_headers([old, new], MSG, NOW, BODY)
    assert len(headers["webhook-signature"].split(" ")) == 2
    # a receiver that knows only one of them accepts
    assert verify_standard_signature(headers, BODY, old, now=NOW) == MSG
    assert verify_standard_signature(headers, BODY, new, now=NOW) == MSG
    # a receiver holding both accepts a sender that already dropped the old one
    only_new = standard_headers(new, MSG, NOW, BODY)
    assert verify_standard_signature(only_new, BODY, [old, new], now=NOW) == MSG
    with pytest.raises(WebhookVerificationError) as exc:
        verify_standard_signature(only_new, BODY, old, now=NOW)
    assert exc.value.code == "WEBHOOK_SIGNATURE_INVALID"


@pytest.mark.parametrize("field", ["body", "timestamp", "id", "signature"])
def test_tampering_is_rejected(field: str) -> None:
    secret = generate_secret()
    headers = standard_headers(secret, MSG, NOW, BODY)
    body = BODY
    if field == "body":
        body = BODY.replace(b'"a":1', b'"a":2')
    elif field == "timestamp":
        headers["webhook-timestamp"] = str(NOW + 1)
    elif field == "id":
        headers["webhook-id"] = MSG[:-1] + "0"
    else:
        headers["webhook-signature"] = "v1," + base64.b64encode(b"\0" * 32).decode()
    with pytest.raises(WebhookVerificationError) as exc:
        verify_standard_signature(headers, body, secret, now=NOW)
    assert exc.value.reason == "bad_signature"
    assert exc.value.status == 401


def test_unknown_versions_are_ignored() -> None:
    secret = generate_secret()
    headers = standard_headers(secret, MSG, NOW, BODY)
    headers["webhook-signature"] = "v2,abc v1a,zzz " + headers["webhook-signature"]
    assert verify_standard_signature(headers, BODY, secret, now=NOW) == MSG
    headers["webhook-signature"] = "v2," + headers["webhook-signature"].split(",", 3)[-1]
    with pytest.raises(WebhookVerificationError):
        verify_standard_signature(headers, BODY, secret, now=NOW)


@pytest.mark.parametrize("skew", [-301, 301, 10_000])
def test_timestamp_window(skew: int) -> None:
    secret = generate_secret()
    headers = standard_headers(secret, MSG, NOW, BODY)
    with pytest.raises(WebhookVerificationError) as exc:
        verify_standard_signature(headers, BODY, secret, now=NOW + skew)
    assert exc.value.code == "WEBHOOK_TIMESTAMP_OUT_OF_TOLERANCE"
    assert verify_standard_signature(headers, BODY, secret, now=NOW + skew, tolerance_seconds=20_000) == MSG


def test_non_integer_timestamp_is_rejected() -> None:
    secret = generate_secret()
    headers = standard_headers(secret, MSG, NOW, BODY)
    headers["webhook-timestamp"] = f"{NOW}.5"
    with pytest.raises(WebhookVerificationError) as exc:
        verify_standard_signature(headers, BODY, secret, now=NOW)
    assert exc.value.reason == "timestamp_out_of_tolerance"


@pytest.mark.parametrize("missing", ["webhook-id", "webhook-timestamp", "webhook-signature"])
def test_missing_header(missing: str) -> None:
    secret = generate_secret()
    headers = standard_headers(secret, MSG, NOW, BODY)
    del headers[missing]
    with pytest.raises(WebhookVerificationError) as exc:
        verify_standard_signature(headers, BODY, secret, now=NOW)
    assert exc.value.code == "WEBHOOK_HEADER_MISSING"
    assert exc.value.details["header"] == missing


@pytest.mark.parametrize("bad", ["", "secret", "whsec_", "whsec_!!!notbase64", 'whsec_"'])
def test_bad_secrets(bad: str) -> None:
    with pytest.raises(WebhookSecretError):
        decode_secret(bad)


def test_generated_secret_sizes() -> None:
    assert len(decode_secret(generate_secret(24))) == 24
    assert len(decode_secret(generate_secret(64))) == 64
    with pytest.raises(WebhookSecretError):
        generate_secret(16)


def test_message_id_with_dot_is_refused() -> None:
    with pytest.raises(WebhookSecretError):
        standard_headers(generate_secret(), "a.b", NOW, BODY)


def test_legacy_verify_round_trip_and_tamper() -> None:
    ts = "2026-01-02T00:00:00.000Z"
    headers = {
        "x-proxy-dedupe-key": "t:d:T:a:h",
        "x-proxy-timestamp": ts,
        "x-proxy-signature": sign_legacy("s3cr3t", ts, BODY),
    }
    assert verify_legacy_signature(headers, BODY, "s3cr3t", now=NOW + 10) == "t:d:T:a:h"
    with pytest.raises(WebhookVerificationError) as exc:
        verify_legacy_signature(headers, BODY + b" ", "s3cr3t", now=NOW)
    assert exc.value.reason == "bad_signature"
    with pytest.raises(WebhookVerificationError) as exc:
        verify_legacy_signature(headers, BODY, "s3cr3t", now=NOW + 301)
    assert exc.value.reason == "timestamp_out_of_tolerance"


def test_delivery_headers_modes() -> None:
    secret = generate_secret()
    at = datetime(2026, 1, 2, tzinfo=UTC)
    common = dict(
        secrets=[secret],
        body=BODY,
        message_id=MSG,
        dedupe_key="t:d:T:a:h",
        delivery_id="42",
        artifact_type="T",
        artifact_id="a",
        artifact_hash="h",
        order_key="job\n3\n10\na",
        attempt=2,
        now=at,
    )
    std = delivery_headers(mode="standard", **common)  # type: ignore[arg-type]
    assert std["webhook-timestamp"] == str(NOW)
    assert std["x-settlekit-order-key"] == "job%0A3%0A10%0Aa"
    assert std["x-settlekit-delivery-attempt"] == "2"
    assert std["content-type"] == "application/json; charset=utf-8"
    assert not any(k.startswith("x-proxy-") for k in std)
    legacy = delivery_headers(mode="settld_legacy", **common)  # type: ignore[arg-type]
    assert "webhook-signature" not in legacy
    assert legacy["x-proxy-timestamp"] == "2026-01-02T00:00:00.000Z"
    assert legacy["x-proxy-signature"] == sign_legacy(secret, "2026-01-02T00:00:00.000Z", BODY)
    both = delivery_headers(mode="both", **common)  # type: ignore[arg-type]
    assert both["webhook-signature"] == std["webhook-signature"]
    assert both["x-proxy-signature"] == legacy["x-proxy-signature"]
    with pytest.raises(WebhookSecretError):
        delivery_headers(mode="hmac", **common)  # type: ignore[arg-type]


def test_delivery_keys() -> None:
    artifact = {
        "artifactType": "SettlementStatement.v1",
        "artifactId": "settlement_j1_e9",
        "artifactHash": "ab" * 32,
        "jobId": "j1",
        "jobVersion": 9,
    }
    keys = DeliveryKeys.for_job_artifact("ten", "dst", artifact)
    assert keys.dedupe_key == dedupe_key(
        "ten", "dst", "SettlementStatement.v1", "settlement_j1_e9", "ab" * 32
    )
    assert keys.dedupe_key == f"ten:dst:SettlementStatement.v1:settlement_j1_e9:{'ab' * 32}"
    assert keys.message_id == "dlv_" + sha256_hex(keys.dedupe_key)[:32] == message_id(keys.dedupe_key)
    assert "." not in keys.message_id and len(keys.message_id) == 36
    assert (keys.scope_key, keys.order_seq, keys.priority) == ("j1", 9, 40)
    assert keys.order_key == "j1\n9\n40\nsettlement_j1_e9"
    assert [artifact_priority(t) for t in ("WorkCertificate.v1", "ProofReceipt.v1", "Other.v1")] == [
        10,
        12,
        100,
    ]


def test_prepare_request_signs_the_canonical_bytes() -> None:
    secret = generate_secret()
    artifact = {
        "jobVersion": 1,
        "artifactType": "WorkCertificate.v1",
        "artifactId": "cert_j_e",
        "artifactHash": "h",
        "jobId": "j",
        "note": "é",
    }
    req = prepare_request(
        url="https://example.test/hook",
        artifact=artifact,
        tenant_id="t",
        destination_id="d",
        secrets=[secret],
        now=datetime(2026, 1, 2, tzinfo=UTC),
    )
    assert req.body == canonical_bytes(artifact)
    assert req.body.startswith(b'{"artifactHash":"h","artifactId"')
    assert req.group == "j"
    assert verify_standard_signature(req.headers, req.body, secret, now=NOW) == req.headers["webhook-id"]
