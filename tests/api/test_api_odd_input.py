"""Odd input that used to be answered 500: a payload nested deeper than the append's recursive steps reach, a
Last-Event-ID that is a digit to str.isdigit but not to int, an asOf whose UTC instant lies outside years 1 to
9999. Requests go straight through the ASGI app (raw header bytes, a stack as shallow as uvicorn's)."""

from __future__ import annotations

import json

import pytest

from settlekit.api.guards import MAX_BODY_DEPTH
from settlekit.store.db import Database
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


def test_a_last_event_id_digit_that_is_not_ascii_is_400(db: Database) -> None:
    app = make_app(db)
    key = key_for(db, TENANT_A, ["jobs:read"])
    got = asgi_request(app, "GET", "/v1/events/stream", [(b"authorization", f"Bearer {key}".encode()),
                                                          (b"last-event-id", b"\xb2")])  # latin-1 '²'
    assert got["status"] == 400 and json.loads(got["body"])["code"] == "SCHEMA_INVALID"


@pytest.mark.parametrize("as_of", ["0001-01-01T00:00:00+14:00", "9999-12-31T23:59:59-14:00"])
def test_an_as_of_outside_the_utc_years_is_400(db: Database, as_of: str) -> None:
    api = client(make_app(db), key_for(db, TENANT_A, ["jobs:read"]))
    answer = api.get("/v1/ledger/balances", params={"asOf": as_of})
    assert answer.status_code == 400 and answer.json()["code"] == "LEDGER_AS_OF_INVALID"


def test_an_as_of_of_year_one_is_echoed_as_an_iso_instant(db: Database) -> None:
    api = client(make_app(db), key_for(db, TENANT_A, ["jobs:read"]))
    answer = api.get("/v1/ledger/balances", params={"asOf": "0001-01-01T00:00:00Z"})
    assert answer.status_code == 200 and answer.json()["asOf"] == "0001-01-01T00:00:00.000Z"
