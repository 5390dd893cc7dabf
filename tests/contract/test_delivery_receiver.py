"""verify_webhook and the reference ReceiverServer on 127.0.0.1."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import httpx
import pytest

from settlekit.delivery.errors import WebhookVerificationError
from settlekit.delivery.message import prepare_request
from settlekit.delivery.receiver import (
    ReceiverServer,
    artifact_filename,
    verify,
    verify_artifact,
    verify_legacy,
    verify_webhook,
)
from settlekit.delivery.signing import generate_secret, sign_legacy, standard_headers
from settlekit.events.canonical import canonical_bytes, canonical_hash, parse_json
from support.receiver import FaultyReceiver

VECTORS = Path(__file__).resolve().parent.parent / "vectors"
NOW = 1_767_312_000


def vector_artifacts() -> dict[str, dict[str, Any]]:
    data = parse_json((VECTORS / "settle_completed.json").read_text(encoding="utf-8"))
    return {a["artifactType"]: a for a in data["artifacts"]}


def rehash(doc: dict[str, Any]) -> dict[str, Any]:
    doc = {k: v for k, v in doc.items() if k != "artifactHash"}
    doc["artifactHash"] = canonical_hash(doc)
    return doc


def signed(
    doc: dict[str, Any], secret: str, msg: str = "dlv_test", ts: int = NOW
) -> tuple[dict[str, str], bytes]:
    body = canonical_bytes(doc)
    return standard_headers(secret, msg, ts, body), body


@pytest.fixture
def settlement() -> dict[str, Any]:
    return vector_artifacts()["SettlementStatement.v1"]


def test_verify_webhook_accepts_vector_artifacts() -> None:
    secret = generate_secret()
    for doc in vector_artifacts().values():
        headers, body = signed(doc, secret)
        assert verify_webhook(headers, body, secret, now=NOW) == doc


def test_artifact_hash_mismatch(settlement: dict[str, Any]) -> None:
    secret = generate_secret()
    doc = copy.deepcopy(settlement)
    doc["generatedAt"] = "2030-01-01T00:00:00.000Z"  # signed correctly, but hash no longer matches
    headers, body = signed(doc, secret)
    with pytest.raises(WebhookVerificationError) as exc:
        verify_webhook(headers, body, secret, now=NOW)
    assert exc.value.code == "ARTIFACT_HASH_INVALID"
    # the spec-shaped helper skips artifact checks by default
    assert verify(secret, headers, body, now=NOW)["generatedAt"] == "2030-01-01T00:00:00.000Z"
    with pytest.raises(WebhookVerificationError):
        verify(secret, headers, body, now=NOW, verify_artifact=True)


def test_unbalanced_settlement(settlement: dict[str, Any]) -> None:
    secret = generate_secret()
    doc = copy.deepcopy(settlement)
    doc["settlement"]["totalsByAccountId"]["acct_cash"] += 1
    headers, body = signed(rehash(doc), secret)
    with pytest.raises(WebhookVerificationError) as exc:
        verify_webhook(headers, body, secret, now=NOW)
    assert exc.value.code == "SETTLEMENT_TOTALS_UNBALANCED"
    assert exc.value.details["sum"] == 1


def test_settlement_totals_must_exist(settlement: dict[str, Any]) -> None:
    doc = copy.deepcopy(settlement)
    del doc["settlement"]["totalsByAccountId"]
    with pytest.raises(WebhookVerificationError) as exc:
        verify_artifact(rehash(doc))
    assert exc.value.code == "WEBHOOK_BODY_INVALID"


def test_settlement_totals_must_be_integral(settlement: dict[str, Any]) -> None:
    doc = copy.deepcopy(settlement)
    doc["settlement"]["totalsByAccountId"]["acct_cash"] += 0.5
    with pytest.raises(WebhookVerificationError) as exc:
        verify_artifact(rehash(doc))
    assert exc.value.code == "WEBHOOK_BODY_INVALID"


def test_totals_beyond_the_safe_range_are_doubles_and_checked_for_being_integral_only(
        settlement: dict[str, Any]) -> None:
    """settld sums beyond 2^53 cents in doubles, which need not balance to the cent: such totals are taken."""
    doc = copy.deepcopy(settlement)
    doc["settlement"]["totalsByAccountId"] = {"acct_a": 1.8014398509481984e16, "acct_b": -1.8014398509481982e16}
    verify_artifact(rehash(doc))


@pytest.mark.parametrize("body", [b"not json", b"\xff\xfe", b"[1,2]"])
def test_bad_bodies(body: bytes) -> None:
    secret = generate_secret()
    headers = standard_headers(secret, "dlv_x", NOW, body)
    with pytest.raises(WebhookVerificationError) as exc:
        verify_webhook(headers, body, secret, now=NOW)
    assert exc.value.code == "WEBHOOK_BODY_INVALID"


def test_signature_checked_before_body(settlement: dict[str, Any]) -> None:
    secret = generate_secret()
    headers, _ = signed(settlement, secret)
    with pytest.raises(WebhookVerificationError) as exc:
        verify_webhook(headers, b"garbage", secret, now=NOW)
    assert exc.value.code == "WEBHOOK_SIGNATURE_INVALID"


def test_hash_header_must_match_body(settlement: dict[str, Any]) -> None:
    secret = generate_secret()
    headers, body = signed(settlement, secret)
    headers["x-settlekit-artifact-hash"] = "0" * 64
    with pytest.raises(WebhookVerificationError) as exc:
        verify_webhook(headers, body, secret, now=NOW)
    assert exc.value.code == "ARTIFACT_HASH_INVALID"


def test_legacy_helpers(settlement: dict[str, Any]) -> None:
    body = canonical_bytes(settlement)
    ts = "2026-01-02T00:00:00.000Z"
    headers = {
        "x-proxy-dedupe-key": "k",
        "x-proxy-timestamp": ts,
        "x-proxy-signature": sign_legacy("raw", ts, body),
    }
    assert verify_legacy("raw", headers, body, now=NOW) == settlement
    assert verify_webhook(headers, body, "raw", now=NOW, accept_legacy=True) == settlement
    with pytest.raises(WebhookVerificationError) as exc:
        verify_webhook(headers, body, "raw", now=NOW)  # legacy not accepted by default
    assert exc.value.code == "WEBHOOK_HEADER_MISSING"


def test_artifact_filename_is_safe_and_never_shared() -> None:
    """A plain id is its own file name; any other id a readable prefix and a hash. Before, `cert_job:1_evt` and
    `cert_job_1_evt` (job ids `job:1` and `job_1`) shared one file, so the second artifact was answered accepted
    and never stored; and an id of two 200-character ids was a file name too long to create (the receiver failed
    every delivery of it). Found by a reviewer."""
    assert artifact_filename("cert_job_1_evt_2") == "cert_job_1_evt_2.json"
    for odd in ("../../etc/passwd", ".hidden", "cert_job:1_evt", "", "a/b", "é", "x" * 401):
        name = artifact_filename(odd)
        assert "/" not in name and not name.startswith(".") and len(name.encode()) <= 255, name
        assert "~" in name and name.endswith(".json")
    names = {artifact_filename(i) for i in ("cert_job:1_evt", "cert_job_1_evt", "cert_job/1_evt", "x" * 401, "x" * 402)}
    assert len(names) == 5


# --- server -------------------------------------------------------------------------------------------------


def post(rx: ReceiverServer, client: httpx.Client, headers: dict[str, str], body: bytes) -> httpx.Response:
    return client.post(rx.url, content=body, headers=headers)


def test_server_accepts_dedupes_and_stores(tmp_path: Path) -> None:
    secret = generate_secret()
    arts = vector_artifacts()
    with ReceiverServer(secrets=[secret], out_dir=tmp_path) as rx, httpx.Client(timeout=5) as client:
        reqs = [
            prepare_request(url=rx.url, artifact=a, tenant_id="t", destination_id="d", secrets=[secret])
            for a in arts.values()
        ]
        for r in reqs:
            resp = post(rx, client, dict(r.headers), r.body)
            assert resp.status_code == 200 and resp.json()["status"] == "accepted"
        resp = post(rx, client, dict(reqs[0].headers), reqs[0].body)
        assert resp.status_code == 200 and resp.json()["status"] == "duplicate"
        assert rx.duplicates == 1
        assert set(rx.received) == {r.headers["webhook-id"] for r in reqs}
        assert rx.artifacts == list(arts.values())
        assert rx.connections_opened == 1  # keep-alive
        assert client.get(rx.url + "healthz").json()["received"] == 2
    files = sorted(p.name for p in tmp_path.iterdir())
    assert files == sorted(f"{a['artifactId']}.json" for a in arts.values())
    for a in arts.values():
        assert (tmp_path / f"{a['artifactId']}.json").read_bytes() == canonical_bytes(a)


def test_server_rejects_bad_signature_and_conflicting_id(settlement: dict[str, Any]) -> None:
    secret = generate_secret()
    import time

    now = int(time.time())
    with ReceiverServer(secrets=[secret]) as rx, httpx.Client(timeout=5) as client:
        headers, body = signed(settlement, generate_secret(), "dlv_a", now)
        resp = post(rx, client, headers, body)
        assert resp.status_code == 401
        assert resp.json()["code"] == "WEBHOOK_SIGNATURE_INVALID"
        headers, body = signed(settlement, secret, "dlv_a", now)
        assert post(rx, client, headers, body).status_code == 200
        other = rehash({**settlement, "generatedAt": "2030-01-01T00:00:00.000Z"})
        headers, body = signed(other, secret, "dlv_a", now)
        resp = post(rx, client, headers, body)
        assert resp.status_code == 409 and resp.json()["code"] == "WEBHOOK_ID_CONFLICT"
        broken = {**settlement, "generatedAt": "2030-01-01T00:00:00.000Z"}
        headers, body = signed(broken, secret, "dlv_b", now)
        resp = post(rx, client, headers, body)
        assert resp.status_code == 422 and resp.json()["code"] == "ARTIFACT_HASH_INVALID"
        assert rx.rejected == 3 and len(rx.received) == 1
        resp = client.post(rx.url, content=b"x", headers={"content-length": "1"})
        assert resp.status_code == 400


def test_server_faults(settlement: dict[str, Any]) -> None:
    secret = generate_secret()
    with FaultyReceiver(secrets=[secret]) as rx, httpx.Client(timeout=5) as client:
        r = prepare_request(
            url=rx.url, artifact=settlement, tenant_id="t", destination_id="d", secrets=[secret]
        )
        rx.inject(500, count=2)
        rx.inject(429, retry_after=7)
        rx.inject(410)
        statuses = []
        for _ in range(5):
            resp = post(rx, client, dict(r.headers), r.body)
            statuses.append((resp.status_code, resp.headers.get("retry-after")))
        assert statuses == [(500, None), (500, None), (429, "7"), (410, None), (200, None)]
        assert len(rx.received) == 1
        assert [q.outcome for q in rx.requests] == ["fault"] * 4 + ["accepted"]


def test_server_requires_content_length() -> None:
    secret = generate_secret()
    with ReceiverServer(secrets=[secret]) as rx, httpx.Client(timeout=5) as client:

        def chunks():  # type: ignore[no-untyped-def]
            yield b"{}"

        resp = client.post(rx.url, content=chunks())
        assert resp.status_code == 411


def test_stop_closes_idle_keepalive_connections() -> None:
    secret = generate_secret()
    rx = ReceiverServer(secrets=[secret]).start()
    with httpx.Client(timeout=5) as client:
        assert client.get(rx.url + "healthz").status_code == 200
        rx.stop()
        with pytest.raises(httpx.TransportError):
            client.get(rx.url + "healthz")


def test_json_problem_body_shape(settlement: dict[str, Any]) -> None:
    secret = generate_secret()
    with ReceiverServer(secrets=[secret]) as rx:
        status, payload = rx.handle({"Webhook-Id": "x"}, canonical_bytes(settlement))
    assert status == 400
    assert json.loads(json.dumps(payload))["code"] == "WEBHOOK_HEADER_MISSING"


def test_cli_receive_command(tmp_path: Path, settlement: dict[str, Any]) -> None:
    import signal
    import subprocess
    import sys

    secret = generate_secret()
    code = "from settlekit.cli.deliveries import delivery_app; delivery_app()"
    proc = subprocess.Popen(
        [sys.executable, "-c", code, "receive", "--port", "0", "--secret", secret, "--out", str(tmp_path)],
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert proc.stderr is not None
        line = proc.stderr.readline()
        assert line.startswith("listening on http://127.0.0.1:"), line
        url = line.split()[-1]
        r = prepare_request(url=url, artifact=settlement, tenant_id="t", destination_id="d", secrets=[secret])
        with httpx.Client(timeout=5) as client:
            assert client.post(url, content=r.body, headers=dict(r.headers)).status_code == 200
            assert client.post(url, content=r.body, headers=dict(r.headers)).json()["status"] == "duplicate"
    finally:
        proc.send_signal(signal.SIGINT)
        _, err = proc.communicate(timeout=10)
    assert "accepted SettlementStatement.v1" in err
    assert "'duplicates': 1" in err
    assert (tmp_path / f"{settlement['artifactId']}.json").read_bytes() == canonical_bytes(settlement)


def test_request_cut_off_mid_body_is_not_processed() -> None:
    """A sender killed mid-request leaves a short body: the receiver neither accepts nor rejects it."""
    import socket as socket_module
    import time as time_module

    rx = ReceiverServer(secrets=["whsec_" + "A" * 32], port=0).start()
    try:
        with socket_module.create_connection(("127.0.0.1", rx.port)) as conn:
            conn.sendall(b"POST /hook HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n\r\n{\"partial\":")
            conn.shutdown(socket_module.SHUT_WR)
            conn.settimeout(5)
            assert conn.recv(100) == b""
        deadline = time_module.monotonic() + 5
        while rx.stats()["incomplete"] == 0 and time_module.monotonic() < deadline:
            time_module.sleep(0.01)
        assert rx.stats()["incomplete"] == 1
        assert rx.rejected == 0 and rx.received == {}
    finally:
        rx.stop()
