"""Odd input that used to be answered 500: a payload nested deeper than the append's recursive steps reach, a
Last-Event-ID that is a digit to str.isdigit but not to int, an asOf whose UTC instant lies outside years 1 to
9999. Requests go straight through the ASGI app (raw header bytes, a stack as shallow as uvicorn's)."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from conftest import load_vector
from settlekit.api.guards import MAX_BODY_DEPTH
from settlekit.events.canonical import parse_json
from settlekit.events.envelope import compute_payload_hash
from settlekit.store.db import Database, connect
from support.api import TENANT_A, client, key_for, make_app
from support.asgi_raw import asgi_request


def test_a_payload_nested_deeper_than_the_limit_is_400_at_every_depth(db: Database) -> None:
    app = make_app(db)
    key = key_for(db, TENANT_A)
    head = client(app, key).post("/v1/jobs", json={"jobId": "job_1", "payload": {"templateId": "reset_lite"}}
                                 ).json()["headChainHash"]
    answers = {}
    for depth in (MAX_BODY_DEPTH - 1, *range(300, 1100, 20), MAX_BODY_DEPTH - 2):  # the accepted one last
        nested = b"[" * depth + b"]" * depth
        body = (b'{"type":"QUOTE_PROPOSED","actor":{"type":"p","id":"p"},'
                b'"payload":{"amountCents":1,"currency":"USD","x":%s}}' % nested)
        got = asgi_request(app, "POST", "/v1/jobs/job_1/events",
                           [(b"authorization", f"Bearer {key}".encode()), (b"content-type", b"application/json"),
                            (b"x-expected-prev-chain-hash", head.encode())], body)
        answers[depth] = (got["status"], json.loads(got["body"]).get("code"))
    # the body's own object and the payload take two levels: the deepest accepted value sits at the limit
    assert answers.pop(MAX_BODY_DEPTH - 2) == (201, None), answers
    assert answers.pop(MAX_BODY_DEPTH - 1) == (400, "JSON_INVALID")
    assert set(answers.values()) == {(400, "JSON_INVALID")}, answers


@pytest.mark.parametrize(("around", "encoding", "answer"), [
    (("\ufeff\u00a0", "\u2028\u3000\x0b"), "utf-8", (201, None)),  # JavaScript's trim takes these, as settld does
    (("\x0c", "\r\n"), "utf-8", (201, None)),
    (("", ""), "utf-16", (400, "JSON_INVALID")),  # settld reads every body as UTF-8
    (("", ""), "latin-1", (400, "JSON_INVALID")),  # not UTF-8: refused on purpose (settld reads U+FFFD)
])
def test_an_append_body_is_read_as_settld_reads_it(db: Database, around: tuple[str, str], encoding: str,
                                                  answer: tuple[int, str | None]) -> None:
    app = make_app(db)
    key = key_for(db, TENANT_A)
    head = client(app, key).post("/v1/jobs", json={"jobId": "job_1", "payload": {"templateId": "reset_lite"}}
                                 ).json()["headChainHash"]
    text = '{"type":"QUOTE_PROPOSED","actor":{"type":"p","id":"p"},"payload":{"amountCents":1,"currency":"USD",' \
           '"note":"café"}}'
    body = (around[0] + text + around[1]).encode(encoding)
    got = asgi_request(app, "POST", "/v1/jobs/job_1/events",
                       [(b"authorization", f"Bearer {key}".encode()), (b"content-type", b"application/json"),
                        (b"x-expected-prev-chain-hash", head.encode())], body)
    assert (got["status"], json.loads(got["body"]).get("code")) == answer, got["body"]


def test_a_last_event_id_digit_that_is_not_ascii_is_400(db: Database) -> None:
    app = make_app(db)
    key = key_for(db, TENANT_A, ["jobs:read"])
    got = asgi_request(app, "GET", "/v1/events/stream", [(b"authorization", f"Bearer {key}".encode()),
                                                          (b"last-event-id", b"\xb2")])  # latin-1 '²'
    assert got["status"] == 400 and json.loads(got["body"])["code"] == "CURSOR_INVALID"


@pytest.mark.parametrize("as_of", ["0001-01-01T00:00:00+14:00", "9999-12-31T23:59:59-14:00"])
def test_an_as_of_outside_the_utc_years_is_400(db: Database, as_of: str) -> None:
    api = client(make_app(db), key_for(db, TENANT_A, ["jobs:read"]))
    answer = api.get("/v1/ledger/balances", params={"asOf": as_of})
    assert answer.status_code == 400 and answer.json()["code"] == "LEDGER_AS_OF_INVALID"


def test_an_as_of_of_year_one_is_echoed_as_an_iso_instant(db: Database) -> None:
    api = client(make_app(db), key_for(db, TENANT_A, ["jobs:read"]))
    answer = api.get("/v1/ledger/balances", params={"asOf": "0001-01-01T00:00:00Z"})
    assert answer.status_code == 200 and answer.json()["asOf"] == "0001-01-01T00:00:00.000Z"


def test_integral_numbers_written_with_a_fraction_are_the_integers_settld_reads(db: Database, tmp_path: Path) -> None:
    """A client whose JSON writer spells integers as floats (Python's json.dumps of 6500.0): settld's JSON.parse
    reads `"amountCents": 6500.0` as 6500 and settles the job; settlekit refused it (SCHEMA_INVALID, not an
    integer). The whole client-finalized vector goes through with every amountCents so spelled, and the ledger
    is the one of the vector as written (appended to a second database)."""
    vector = load_vector("settle_completed.json")
    job_id = vector["events"][0]["streamId"]
    balances = []
    for database, spelled_as_float in ((connect(f"sqlite:///{tmp_path / 'as-written.db'}"), False), (db, True)):
        database.migrate()
        api = client(make_app(database), key_for(database, TENANT_A))
        for signer in vector["signers"]:
            assert api.post("/v1/keys", json={"publicKeyPem": signer["publicKeyPem"],
                                              "purpose": signer["role"]}).status_code == 201
        floats = 0
        for event in vector["events"]:
            text = json.dumps(event)
            if spelled_as_float and '"amountCents": ' in text:
                text = re.sub(r'"amountCents": (\d+)', r'"amountCents": \1.0', text)
                floats += 1
            r = api.post(f"/v1/jobs/{job_id}/events", content=text, headers={"content-type": "application/json"})
            assert r.status_code == 201, (event["type"], r.text)
        assert floats >= spelled_as_float
        balances.append(api.get("/v1/ledger/balances").json()["balances"])
    assert balances[0] == balances[1] and balances[0]


def test_a_job_created_with_python_numbers_reads_them_as_javascript_does(db: Database) -> None:
    """POST /v1/jobs reads its body with FastAPI (Python's numbers): an integer beyond 2^53 in the payload was
    refused (SCHEMA_INVALID, outside the JS safe range) and `2.0` stayed a float, where settld's JSON.parse gives a
    double and the integer 2. The payload now holds what JSON.parse gives, as on the events route."""
    api = client(make_app(db), key_for(db, TENANT_A))
    body = b'{"jobId": "job_1", "payload": {"templateId": "reset_lite", "x": 2.0, "big": 12345678901234567890}}'
    r = api.post("/v1/jobs", content=body, headers={"content-type": "application/json"})
    assert r.status_code == 201, r.text
    [event] = api.get("/v1/jobs/job_1/export").json()
    payload = event["payload"]
    assert payload["x"] == 2 and type(payload["x"]) is int
    assert payload["big"] == float(12345678901234567890)
    assert event["payloadHash"] == compute_payload_hash(parse_json(json.dumps(event)))


def test_a_proto_key_in_an_appended_payload_is_400(db: Database) -> None:
    """settld's hash leaves a "__proto__" key out: the live path takes none (README, deliberate differences)."""
    app = make_app(db)
    key = key_for(db, TENANT_A)
    head = client(app, key).post("/v1/jobs", json={"jobId": "job_1", "payload": {"templateId": "reset_lite"}}
                                 ).json()["headChainHash"]
    body = b'{"type":"QUOTE_PROPOSED","actor":{"type":"p","id":"p"},"payload":{"amountCents":1,"currency":"USD",' \
           b'"breakdown":{"\\u005f_proto__":1}}}'
    got = asgi_request(app, "POST", "/v1/jobs/job_1/events",
                       [(b"authorization", f"Bearer {key}".encode()), (b"content-type", b"application/json"),
                        (b"x-expected-prev-chain-hash", head.encode())], body)
    problem = json.loads(got["body"])
    assert (got["status"], problem["code"]) == (400, "SCHEMA_INVALID"), problem
    assert "__proto__" in problem["detail"]


_ACTOR = {"type": "system", "id": "ops"}


@pytest.mark.parametrize("at", ["20260115T120000.000Z", "2026-W03-4T12:00:00.000Z", "2026-015T12:00:00.000Z"])
def test_an_event_at_in_a_basic_week_or_ordinal_form_is_refused(db: Database, at: str) -> None:
    """Python's fromisoformat reads ISO's basic, week and ordinal forms, which settld's Date.parse does not; the live
    path took them, and the month close (placing entries by their text a day or more from a bound) counted such
    an entry in no month. Now 400 SCHEMA_INVALID naming `at`, nothing stored. Found by a reviewer."""
    api = client(make_app(db), key_for(db, TENANT_A))
    r = api.post("/v1/jobs/job_w/events", json={"type": "JOB_CREATED", "actor": _ACTOR,
                                                "payload": {"templateId": "t"}, "at": at},
                 headers={"x-expected-prev-chain-hash": ""})
    assert r.status_code == 400 and r.json()["code"] == "SCHEMA_INVALID", r.text
    assert r.json()["details"]["field"] == "at"
    assert api.get("/v1/jobs/job_w").status_code == 404


def test_a_booking_at_an_instant_just_before_year_1_is_stored(db: Database) -> None:
    """`0001-01-01T00:00:00.000+00:01` is an instant of year 0 (settld's Date.parse reads it): the BOOKED's ledger
    entry could not be placed on the timeline (OverflowError, a 500). Found by a reviewer."""
    api = client(make_app(db), key_for(db, "tenant_y"), raise_server_exceptions=False)
    at, path = "0001-01-01T00:00:00.000+00:01", "/v1/jobs/job_y/events"
    head = ""
    booked = load_vector("settle_completed.json")["events"][2]["payload"]
    lean = {k: v for k, v in booked.items() if k not in ("policySnapshot", "policyHash", "creditPolicy",
                                                         "evidencePolicy")}
    for event in ({"type": "JOB_CREATED", "actor": _ACTOR, "payload": {"templateId": "t"}},
                  {"type": "QUOTE_PROPOSED", "actor": {"type": "pricing", "id": "p1"},
                   "payload": {"amountCents": 6500, "currency": "USD"}},
                  {"type": "BOOKED", "actor": _ACTOR, "payload": lean}):
        r = api.post(path, json={**event, "at": at}, headers={"x-expected-prev-chain-hash": head})
        assert r.status_code == 201, (r.status_code, r.text)
        head = r.json()["headChainHash"]
    assert api.get("/v1/ledger/balances").json()["balances"]["acct_cash"] == 6500


@pytest.mark.parametrize("encoding", ["utf-16", "utf-16-le", "utf-32"])
def test_a_job_create_body_that_is_not_utf8_is_refused(db: Database, encoding: str) -> None:
    """POST /v1/jobs read its body with FastAPI's parser, which detects UTF-16 and UTF-32 (settld refuses them, as
    the events route does): now 400 JSON_INVALID, nothing created. Found by a reviewer."""
    app = make_app(db)
    key = key_for(db, TENANT_A)
    body = '{"jobId":"job_u16","payload":{"templateId":"reset_lite"}}'.encode(encoding)
    got = asgi_request(app, "POST", "/v1/jobs", [(b"authorization", f"Bearer {key}".encode()),
                                                (b"content-type", b"application/json")], body)
    assert (got["status"], json.loads(got["body"]).get("code")) == (400, "JSON_INVALID"), got["body"]
    assert client(app, key).get("/v1/jobs/job_u16").status_code == 404
