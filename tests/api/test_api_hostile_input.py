"""Hostile input: every bad input answers a 4xx RFC 9457 problem with a stable code on both backends, and the
keep-alive connection stays usable afterwards. Cases: integers beyond a double, lone surrogates and U+0000
anywhere in a request (path segments, query parameters, cursors, headers, JSON bodies), ids above int64,
malformed and unpadded webhook secrets."""

from __future__ import annotations

import base64
import hashlib
import json
import socket
import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest
from fastapi.routing import APIRoute

from conftest import load_differential
from settlekit.delivery.signing import decode_secret, generate_secret, sign_standard
from settlekit.dispatch import Dispatcher
from settlekit.projections.artifacts import artifacts_consumer
from settlekit.store.db import Database, connect
from support.api import TENANT_A, client, key_for, make_app, tenant_rows

PROBLEM = "application/problem+json"
BIG = 99999999999999999999  # above int64
DRAFT_HEADERS = {"content-type": "application/json"}


@pytest.fixture
def env(db: Database) -> Iterator[tuple[Database, Any, Any, str]]:
    app = make_app(db)
    api = client(app, key_for(db, TENANT_A), raise_server_exceptions=False)
    operator = client(app, key_for(db, "system", ["admin", "ops"]), raise_server_exceptions=False)
    r = api.post("/v1/jobs", json={"jobId": "job_1", "payload": {"templateId": "reset_lite"}})
    assert r.status_code == 201, r.text
    yield db, api, operator, r.json()["headChainHash"]


def _problem(r: Any, status: int, code: str) -> dict[str, Any]:
    assert r.status_code == status, r.text
    assert r.headers["content-type"] == PROBLEM
    body: dict[str, Any] = r.json()
    assert body["code"] == code and body["status"] == status, body
    return body


def _quote(amount: str, actor_id: str = "p") -> bytes:
    return ('{"type":"QUOTE_PROPOSED","actor":{"type":"pricing","id":"' + actor_id + '"},'
            '"payload":{"amountCents":' + amount + ',"currency":"USD"}}').encode()


def test_integer_beyond_a_double(env: tuple[Database, Any, Any, str]) -> None:
    db, api, _, head = env
    headers = {**DRAFT_HEADERS, "x-expected-prev-chain-hash": head}
    for amount in ("1" + "0" * 400, "-" + "9" * 320, "1e400"):
        body = _problem(api.post("/v1/jobs/job_1/events", content=_quote(amount), headers=headers),
                        400, "SCHEMA_INVALID")
        assert "amountCents" in body["detail"]
    many_digits = "1" * 5000  # beyond Python's integer string limit: not JSON this API reads
    _problem(api.post("/v1/jobs/job_1/events", content=_quote(many_digits), headers=headers), 400, "JSON_INVALID")
    big_create = b'{"payload":{"templateId":"x","n":1%s}}' % (b"0" * 400)
    assert api.post("/v1/jobs", content=big_create, headers=DRAFT_HEADERS).status_code == 400
    assert api.get("/v1/jobs/job_1").json()["version"] == 1


@pytest.mark.parametrize("escape", ["\\ud800", "\\udfff", "\\u0000", "x\\ud83dy"])
def test_lone_surrogate_and_nul_in_json_bodies(env: tuple[Database, Any, Any, str], escape: str) -> None:
    """Refused on every route before anything is parsed into a model or stored, naming the JSON path."""
    db, api, operator, head = env
    headers = {**DRAFT_HEADERS, "x-expected-prev-chain-hash": head}
    bodies = [
        ("POST", "/v1/jobs/job_1/events", _quote("1", actor_id=escape), headers),
        ("POST", "/v1/jobs/job_1/events",
         b'[{"type":"QUOTE_PROPOSED","actor":{"type":"pricing","id":"p"},'
         b'"payload":{"amountCents":1,"currency":"USD","note":{"k%s":1}}}]' % escape.encode(), headers),
        ("POST", "/v1/jobs", b'{"actor":{"type":"x","id":"%s"},"payload":{"templateId":"x"}}' % escape.encode(),
         DRAFT_HEADERS),
        ("POST", "/v1/jobs", b'{"jobId":"a%sb","payload":{"templateId":"x"}}' % escape.encode(), DRAFT_HEADERS),
        ("POST", "/v1/destinations", json.dumps({"destinationId": "d", "url": "http://127.0.0.1:9/x",
                                                 "secret": generate_secret()}).encode()[:-1]
         + b',"artifactTypes":["%s"]}' % escape.encode(), DRAFT_HEADERS),
        ("PATCH", "/v1/destinations/d", b'{"url":"http://127.0.0.1:9/%s"}' % escape.encode(), DRAFT_HEADERS),
        ("POST", "/v1/keys", b'{"publicKeyPem":"%s","purpose":"robot"}' % escape.encode(), DRAFT_HEADERS),
    ]
    for method, path, body, hdrs in bodies:
        r = api.request(method, path, content=body, headers=hdrs)
        problem = _problem(r, 400, "SCHEMA_INVALID")
        assert problem["details"]["path"].startswith("$"), problem
    r = operator.post("/v1/ops/consumers/settlekit:artifacts/disable", content=b'{"x":"%s"}' % escape.encode(),
                      headers=DRAFT_HEADERS)
    assert _problem(r, 400, "SCHEMA_INVALID")["details"]["path"] == "$.x"
    assert api.get("/v1/jobs/job_1").json()["version"] == 1
    assert api.get("/v1/jobs").json()["jobs"][0]["jobId"] == "job_1"


@pytest.mark.parametrize("body", [
    b"[" * 100_000 + b"]" * 100_000,
    b'{"payload":' * 50_000 + b"1" + b"}" * 50_000,
    b'{"payload":{"a":' + b"1" * 5000 + b"}}",
    b'{"payload":{"a":"\xff\xfe"}}',
    b"not json",
])
def test_unparseable_bodies(env: tuple[Database, Any, Any, str], body: bytes) -> None:
    db, api, _, head = env
    headers = {**DRAFT_HEADERS, "x-expected-prev-chain-hash": head}
    _problem(api.post("/v1/jobs", content=body, headers=DRAFT_HEADERS), 400, "JSON_INVALID")
    _problem(api.post("/v1/jobs/job_1/events", content=body, headers=headers), 400, "JSON_INVALID")
    _problem(api.patch("/v1/destinations/d", content=body, headers=DRAFT_HEADERS), 400, "JSON_INVALID")


def test_a_surrogate_pair_is_fine(env: tuple[Database, Any, Any, str]) -> None:
    db, api, _, head = env
    headers = {**DRAFT_HEADERS, "x-expected-prev-chain-hash": head}
    r = api.post("/v1/jobs/job_1/events", content=_quote("1", actor_id="\\ud83d\\ude00"), headers=headers)
    assert r.status_code == 201, r.text
    assert r.json()["events"][0]["actor"]["id"] == "\U0001f600"


def _routes(app: Any) -> list[tuple[str, str, list[str]]]:
    out = []
    for route in app.routes:
        if isinstance(route, APIRoute):
            queries = [p.alias for p in route.dependant.query_params]
            for method in sorted(route.methods or ()):
                out.append((method, route.path_format, queries))
    return out


def test_nul_in_every_path_segment_and_query_parameter(env: tuple[Database, Any, Any, str]) -> None:
    db, api, operator, _ = env
    routes = _routes(api.app)
    assert len(routes) >= 30
    checked = 0
    for method, template, queries in routes:
        for name in [p[1:-1] for p in template.split("/") if p.startswith("{")]:
            path = template.replace("{" + name + "}", "a%00b")
            for other in [p for p in template.split("/") if p.startswith("{")]:
                path = path.replace(other, "1")
            for caller in (api, operator, client(api.app)):  # refused before authentication too
                _problem(caller.request(method, path, json={}), 400, "INPUT_INVALID")
            checked += 1
        for query in queries:
            path = "/".join("1" if p.startswith("{") else p for p in template.split("/"))
            _problem(operator.request(method, path, params={query: "a\x00b"}), 400, "INPUT_INVALID")
            _problem(api.request(method, path, params={query: "a\x00b"}), 400, "INPUT_INVALID")
            checked += 1
    assert checked >= 40


# incompressible, as PostgreSQL would store them compressed otherwise
NOISE = "".join(hashlib.sha256(str(i).encode()).hexdigest() for i in range(50))


@pytest.mark.parametrize("segment", [NOISE, "%C3%A9" * 300 + NOISE[:600]])
def test_very_long_path_parameters(env: tuple[Database, Any, Any, str], segment: str) -> None:
    """Every path parameter far beyond any id's length, with an Idempotency-Key on writes (the key's row holds the
    path; PostgreSQL cannot index one that long): a 4xx problem on every route, nothing written."""
    db, api, operator, _ = env
    before = tenant_rows(db, TENANT_A)
    checked = 0
    for n, (method, template, _queries) in enumerate(_routes(api.app)):
        names = [p for p in template.split("/") if p.startswith("{")]
        for name in names:
            if name in ("{delivery_id}", "{month}"):
                continue  # typed: an integer, a YYYY-MM
            path = template.replace(name, segment)
            for other in names:
                path = path.replace(other, "2026-01" if other == "{month}" else "1")
            caller = operator if template.startswith("/v1/ops/") else api
            r = caller.request(method, path, json={}, headers={"idempotency-key": f"long-{n}-{name}"})
            assert 400 <= r.status_code < 500, f"{method} {template}: {r.status_code} {r.text[:200]}"
            assert r.headers["content-type"] == PROBLEM
            checked += 1
    assert checked >= 25
    assert tenant_rows(db, TENANT_A) == before


def test_nul_in_cursors_and_headers(env: tuple[Database, Any, Any, str]) -> None:
    db, api, _, head = env
    nul_cursor = base64.urlsafe_b64encode(b"job\x00x").decode().rstrip("=")
    _problem(api.get("/v1/jobs", params={"cursor": nul_cursor}), 400, "CURSOR_INVALID")
    _problem(api.get("/v1/jobs/job_1/artifacts", params={"cursor": "1:a\x00b"}), 400, "INPUT_INVALID")
    for name in ("idempotency-key", "x-idempotency-key", "x-expected-prev-chain-hash"):
        r = api.post("/v1/jobs/job_1/events", content=_quote("1"),
                     headers=[("content-type", "application/json"), (name, "a\x00b")])
        _problem(r, 400, "INPUT_INVALID")
    r = client(api.app).get("/v1/jobs", headers=[("authorization", "Bearer sk_a\x00b_c")])
    _problem(r, 400, "INPUT_INVALID")
    assert api.get("/v1/jobs/job_1").json()["version"] == 1


def test_ids_above_int64(env: tuple[Database, Any, Any, str]) -> None:
    db, api, operator, _ = env
    # delivery ids are opaque tokens: a number in their place, however large, is refused as such
    _problem(api.get(f"/v1/deliveries/{BIG}"), 400, "CURSOR_NUMERIC")
    _problem(api.post(f"/v1/deliveries/{BIG}/requeue"), 400, "CURSOR_NUMERIC")
    _problem(api.get("/v1/deliveries", params={"afterId": str(BIG)}), 400, "CURSOR_NUMERIC")
    _problem(api.get("/v1/jobs/job_1/events", params={"afterSeq": str(BIG)}), 400, "SCHEMA_INVALID")
    _problem(api.get("/v1/jobs/job_1/artifacts", params={"cursor": f"{BIG}:art"}), 400, "CURSOR_INVALID")
    _problem(api.get("/v1/jobs/job_1/artifacts", params={"cursor": "\u00b2:art"}), 400, "CURSOR_INVALID")
    _problem(operator.post("/v1/ops/consumers/settlekit:artifacts/reset", json={"to": BIG}), 400, "SCHEMA_INVALID")
    _problem(api.get(f"/v1/deliveries/{2**63 - 1}"), 400, "CURSOR_NUMERIC")


def test_webhook_secrets(env: tuple[Database, Any, Any, str]) -> None:
    db, api, _, _ = env
    url = "http://127.0.0.1:9/x"
    for bad in ("abc", "whsec_", "whsec_!!!!", "whsec_a", "whsec_" + "=" * 8):
        r = api.post("/v1/destinations", json={"destinationId": "d_bad", "url": url, "secret": bad})
        _problem(r, 400, "WEBHOOK_SECRET_INVALID")
        echoed = {k: v for k, v in r.json().items() if k != "requestId"}  # the random request id may hold "abc"
        assert bad not in json.dumps(echoed)
    padded = generate_secret(32)
    assert padded.endswith("=")
    unpadded = padded.rstrip("=")
    r = api.post("/v1/destinations", json={"destinationId": "d_unpadded", "url": url, "secret": unpadded})
    assert r.status_code == 201, r.text
    r = api.patch("/v1/destinations/d_unpadded", json={"secret": "whsec_nope!"})
    _problem(r, 400, "WEBHOOK_SECRET_INVALID")
    assert decode_secret(unpadded) == decode_secret(padded)


def test_unpadded_secret_interoperates_with_the_official_library() -> None:
    standardwebhooks = pytest.importorskip("standardwebhooks")
    secret = generate_secret(32).rstrip("=")
    body = b'{"ok":true}'
    ts = int(time.time())
    signature = sign_standard(secret, "msg_1", ts, body)
    headers = {"webhook-id": "msg_1", "webhook-timestamp": str(ts), "webhook-signature": signature}
    assert standardwebhooks.Webhook(secret).verify(body, headers) == {"ok": True}


# ---------------------------------------------------------------- keep-alive over a real server


def _raw_request(sock: socket.socket, method: str, target: str, key: str, body: bytes = b"",
                 extra: bytes = b"") -> tuple[int, bytes]:
    head = (f"{method} {target} HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Bearer {key}\r\n"
            f"Content-Type: application/json\r\nContent-Length: {len(body)}\r\n").encode() + extra + b"\r\n"
    sock.sendall(head + body)
    data = b""
    while b"\r\n\r\n" not in data:
        chunk = sock.recv(65536)
        assert chunk, "the server closed the keep-alive connection"
        data += chunk
    header, _, rest = data.partition(b"\r\n\r\n")
    lines = header.decode("latin-1").split("\r\n")
    status = int(lines[0].split()[1])
    fields = {k.strip().lower(): v.strip() for k, _, v in (line.partition(":") for line in lines[1:])}
    assert fields.get("connection", "").lower() != "close", lines
    length = int(fields["content-length"])
    while len(rest) < length:
        chunk = sock.recv(65536)
        assert chunk, "the server closed the connection mid-body"
        rest += chunk
    return status, rest[:length]


def test_keep_alive_connection_survives_bad_input(db_url: str) -> None:
    import uvicorn

    db = connect(db_url)
    db.migrate()
    key = key_for(db, TENANT_A)
    app = make_app(db)
    config = uvicorn.Config(app, host="127.0.0.1", port=0, log_level="warning", lifespan="off")
    server = uvicorn.Server(config)
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    try:
        deadline = time.monotonic() + 30
        while not server.started:
            assert time.monotonic() < deadline and thread.is_alive(), "uvicorn did not start"
            time.sleep(0.02)
        port = server.servers[0].sockets[0].getsockname()[1]
        with socket.create_connection(("127.0.0.1", port), timeout=30) as sock:
            status, body = _raw_request(sock, "POST", "/v1/jobs", key,
                                        b'{"jobId":"job_ka","payload":{"templateId":"reset_lite"}}')
            assert status == 201, body
            head = json.loads(body)["headChainHash"]
            bad = [
                ("POST", "/v1/jobs/job_ka/events", _quote("1" + "0" * 400), f"x-expected-prev-chain-hash: {head}"),
                ("POST", "/v1/jobs/job_ka/events", _quote("1", "\\ud800"), f"x-expected-prev-chain-hash: {head}"),
                ("GET", "/v1/jobs/job%00ka", b"", ""),
                ("GET", "/v1/jobs?cursor=a%00b", b"", ""),
                ("GET", f"/v1/deliveries/{BIG}", b"", ""),
                ("POST", "/v1/destinations", json.dumps({"destinationId": "d1", "url": "http://127.0.0.1:9/x",
                                                         "secret": "nope"}).encode(), ""),
                ("POST", "/v1/jobs/job_ka/events", b"{not json", f"x-expected-prev-chain-hash: {head}"),
            ]
            for method, target, body_bytes, extra in bad:
                status, body = _raw_request(sock, method, target, key, body_bytes,
                                            (extra + "\r\n").encode() if extra else b"")
                assert 400 <= status < 500, (target, status, body)
                assert json.loads(body)["code"]
            status, body = _raw_request(sock, "GET", "/v1/jobs/job_ka", key)
            assert status == 200 and json.loads(body)["version"] == 1
    finally:
        server.should_exit = True
        thread.join(30)
        db.close()


@pytest.mark.parametrize(("field", "value"), [
    ("id", 5), ("id", {"a": 1}), ("id", ["x"]), ("id", True), ("id", "has space"), ("id", "x" * 201),
    ("id", "ab" * 4000),  # a unique index entry PostgreSQL cannot hold
    ("at", 5), ("at", {"a": 1}), ("at", "not a date"), ("at", "2026-01-01T00:00:00"), ("at", "x" * 10_000),
])
def test_a_server_drafts_own_id_and_at_follow_the_envelope_rules(env: tuple[Database, Any, Any, str], field: str,
                                                                   value: Any) -> None:
    """A server draft may bring its own `id` and `at` (a recorded event sent again as a draft); they obey the rules
    of a client-finalized envelope (an id of 1..200 characters without whitespace, an ISO-8601 instant with a time
    zone): 400 SCHEMA_INVALID naming the field, nothing written, on both append routes."""
    db, api, _, head = env
    quote = {"type": "QUOTE_PROPOSED", "actor": {"type": "pricing", "id": "p"},
             "payload": {"amountCents": 1, "currency": "USD"}, field: value}
    before = tenant_rows(db, TENANT_A)
    r = api.post("/v1/jobs/job_1/events", json=quote, headers={"x-expected-prev-chain-hash": head})
    assert _problem(r, 400, "SCHEMA_INVALID")["details"]["field"] == field
    created = {"type": "JOB_CREATED", "actor": {"type": "system", "id": "s"},
               "payload": {"templateId": "reset_lite"}, field: value}
    r = api.post("/v1/jobs/job_2/events", json=created, headers={"x-expected-prev-chain-hash": "null"})
    assert _problem(r, 400, "SCHEMA_INVALID")["details"]["field"] == field
    assert tenant_rows(db, TENANT_A) == before


def test_a_server_draft_cannot_be_dated_in_the_future(env: tuple[Database, Any, Any, str]) -> None:
    """The five-minute rule of client-finalized events holds for a draft's own `at` too: the server would sign it."""
    db, api, _, head = env
    quote = {"type": "QUOTE_PROPOSED", "actor": {"type": "pricing", "id": "p"},
             "payload": {"amountCents": 1, "currency": "USD"}, "at": "2999-01-01T00:00:00.000Z"}
    before = tenant_rows(db, TENANT_A)
    r = api.post("/v1/jobs/job_1/events", json=quote, headers={"x-expected-prev-chain-hash": head})
    _problem(r, 400, "FUTURE_TIMESTAMP")
    assert tenant_rows(db, TENANT_A) == before
    own = {**quote, "id": "evt_own_1", "at": "2026-01-05T10:00:00.000Z"}
    r = api.post("/v1/jobs/job_1/events", json=own, headers={"x-expected-prev-chain-hash": head})
    assert r.status_code == 201, r.text
    assert r.json()["events"][0]["id"] == "evt_own_1" and r.json()["events"][0]["at"] == own["at"]


@pytest.mark.parametrize(("length", "status"), [(201, 400), (200, 201)])
def test_a_credit_id_is_bounded_like_the_artifact_id_it_names(db: Database, length: int, status: int) -> None:
    """SLA_CREDIT_ISSUED's creditId names its CreditMemo (`credit_<jobId>_<creditId>`), stored under a unique index
    that every tenant's artifacts share one consumer for: one over 200 characters is refused at the append (400
    SCHEMA_INVALID, nothing written) instead of stopping the artifact consumer for everyone on PostgreSQL; one of
    200 is stored and its memo built."""
    stream = load_differential("d062_sla")
    app = make_app(db)
    api = client(app, key_for(db, TENANT_A), raise_server_exceptions=False)
    for signer in stream["signers"]:
        assert api.post("/v1/keys", json={"publicKeyPem": signer["publicKeyPem"],
                                          "purpose": signer["role"]}).status_code == 201
    events = stream["events"]
    job_id = events[0]["streamId"]
    at = [e["type"] for e in events].index("SLA_CREDIT_ISSUED")
    for event in events[:at]:
        assert api.post(f"/v1/jobs/{job_id}/events", json=event).status_code == 201
    credit = events[at]
    credit_id = "".join(hashlib.sha256(str(i).encode()).hexdigest() for i in range(4))[:length]
    draft = {"type": credit["type"], "actor": credit["actor"], "at": credit["at"],
             "payload": {**credit["payload"], "creditId": credit_id}}
    head = api.get(f"/v1/jobs/{job_id}").json()["headChainHash"]
    before = tenant_rows(db, TENANT_A)
    r = api.post(f"/v1/jobs/{job_id}/events", json=draft, headers={"x-expected-prev-chain-hash": head})
    assert r.status_code == status, r.text
    if status == 400:
        assert _problem(r, 400, "SCHEMA_INVALID")["details"]["field"] == "creditId"
        assert tenant_rows(db, TENANT_A) == before
        return
    Dispatcher(db, [artifacts_consumer()], listen=False).drain(30)
    memo = api.get(f"/v1/artifacts/credit_{job_id}_{credit_id}")
    assert memo.status_code == 200 and memo.json()["artifactType"] == "CreditMemo.v1", memo.text


def _integer_params(app: Any) -> list[tuple[str, str, str, str]]:
    """(method, path template, "query" or "path", name) of every integer parameter of the API."""
    out = []
    for route in app.routes:
        if not isinstance(route, APIRoute):
            continue
        for where, params in (("query", route.dependant.query_params), ("path", route.dependant.path_params)):
            for p in params:
                if p.field_info.annotation in (int, int | None):
                    out.extend((method, route.path_format, where, p.alias) for method in sorted(route.methods or ()))
    return out


@pytest.mark.parametrize("written", ["+1", " 1", "1_0", "0x1", "1 ", "１", "1.5", "1e0"])
def test_an_integer_parameter_is_decimal_digits_only(env: tuple[Database, Any, Any, str], written: str) -> None:
    """`limit=+1`, `afterSeq=0x5` and the like are refused (400 SCHEMA_INVALID), not read as numbers. `1.0` is the
    integer 1, as JSON Schema reads it."""
    _, api, operator, _ = env
    params = _integer_params(api.app)
    # positions and delivery ids are opaque cursors (settlekit/cursors.py), not integers
    assert {name for _, _, _, name in params} >= {"limit", "afterSeq"}
    assert not {name for _, _, _, name in params} & {"after", "position", "afterId", "delivery_id"}
    for method, template, where, name in params:
        caller = operator if template.startswith(("/v1/ops/", "/v1/deliveries")) else api
        path = "/".join("1" if p.startswith("{") else p for p in template.split("/"))
        assert where == "query", (method, template, name)
        r = caller.request(method, path, params={name: written}, json={})
        _problem(r, 400, "SCHEMA_INVALID")
        if not template.endswith("/stream"):  # written plainly, or with a fraction of zeros, it is accepted
            for plain in ("1", "1.0"):
                r = caller.request(method, path, params={name: plain}, json={})
                assert r.status_code != 400 or r.json()["code"] != "SCHEMA_INVALID", f"{method} {template}: {r.text}"


def test_a_trailing_newline_is_not_part_of_an_id(env: tuple[Database, Any, Any, str]) -> None:
    """Python's `$` matches before a final newline: ids checked with it took "x\n" (a destination stored so, whose
    deliveries then failed forever). Every id, reference, hash and month check refuses it now."""
    from settlekit.api.auth import check_tenant_id
    from settlekit.errors import ValidationError
    from settlekit.events.envelope import check_envelope_shape
    from settlekit.ledger.close import require_month

    db, api, _, _ = env
    secret = generate_secret()
    r = api.post("/v1/destinations", json={"destinationId": "dst_nl\n", "url": "http://127.0.0.1:9/x",
                                          "secret": secret})
    assert r.status_code == 400 and r.json()["code"] == "SCHEMA_INVALID", r.text
    r = api.post("/v1/destinations", json={"destinationId": "dst_nl", "url": "http://127.0.0.1:9/x",
                                          "secretRef": "sec_" + "0" * 32 + "\n"})
    assert r.status_code == 400 and r.json()["code"] == "SECRET_REF_FORBIDDEN", r.text
    assert api.get("/v1/destinations").json()["destinations"] == []
    with pytest.raises(ValidationError):
        check_tenant_id("tenant_x\n")
    with pytest.raises(ValidationError):
        require_month("2026-01\n")
    event = {"v": 1, "id": "evt_1", "at": "2026-01-01T00:00:00.000Z", "streamId": "job_1", "type": "JOB_CREATED",
             "actor": {"type": "system", "id": "x"}, "payload": {}, "payloadHash": "a" * 64,
             "prevChainHash": None, "chainHash": "b" * 64 + "\n", "signature": None, "signerKeyId": None}
    with pytest.raises(ValidationError, match="chainHash"):
        check_envelope_shape(event)
