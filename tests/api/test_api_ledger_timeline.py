"""GET /v1/ledger/balances as of an instant or position (per party) and GET /v1/ledger/accounts/{id}/postings:
tenant-scoped answers, cursor pages, and a 400/404 problem with a catalogue code for bad input."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from settlekit.store import ledger as ledger_rows
from settlekit.store.db import Database
from support.api import client, event_cursor, key_for, make_app
from support.ledger import OTHER_TENANT, TENANT, load_vectors


@pytest.fixture
def api(db: Database) -> Iterator[Any]:
    load_vectors(db)
    yield client(make_app(db), key_for(db, TENANT))


def test_balances_now_as_of_and_per_party(api: Any, db: Database) -> None:
    now = api.get("/v1/ledger/balances").json()
    assert now["balances"] == ledger_rows.balances(db, TENANT)[TENANT] and now["totalCents"] == 0
    late = api.get("/v1/ledger/balances", params={"asOf": "2100-01-01T00:00:00+02:00"}).json()
    assert late["balances"] == now["balances"] and late["asOf"] == "2099-12-31T22:00:00.000Z"
    assert api.get("/v1/ledger/balances", params={"asOf": "2000-01-01T00:00:00Z"}).json()["balances"] == {}
    last = event_cursor(db, TENANT, last_position(db, TENANT))
    head = api.get("/v1/ledger/balances", params={"position": last}).json()
    assert head["balances"] == now["balances"] and head["position"] == last
    first = event_cursor(db, TENANT, first_position(db, TENANT))
    assert api.get("/v1/ledger/balances", params={"position": first}).json()["balances"] != now["balances"]
    platform = api.get("/v1/ledger/balances", params={"party": "pty_platform"}).json()
    assert platform["partyId"] == "pty_platform" and platform["balances"]
    assert api.get("/v1/ledger/balances", params={"party": "pty_none"}).json()["balances"] == {}


def test_balances_of_another_tenant_are_its_own(api: Any, db: Database) -> None:
    other = client(make_app(db), key_for(db, OTHER_TENANT))
    body = other.get("/v1/ledger/balances",
                     params={"position": event_cursor(db, OTHER_TENANT, last_position(db, OTHER_TENANT))}).json()
    assert body["tenantId"] == OTHER_TENANT and body["balances"] == ledger_rows.balances(db, OTHER_TENANT)[OTHER_TENANT]


@pytest.mark.parametrize("params", [{"asOf": "yesterday"}, {"asOf": "2026-01-01T00:00:00"},
                                    {"asOf": "2026-01-01T00:00:00Z", "position": "AAAA"}])
def test_bad_as_of_is_a_400(api: Any, params: dict[str, Any]) -> None:
    r = api.get("/v1/ledger/balances", params=params)
    assert r.status_code == 400 and r.json()["code"] == "LEDGER_AS_OF_INVALID"


def last_position(db: Database, tenant: str) -> int:
    with db.read() as tx:
        return int(tx.scalar("SELECT MAX(position) FROM events WHERE tenant_id = ?", (tenant,)))


def first_position(db: Database, tenant: str) -> int:
    with db.read() as tx:
        return int(tx.scalar("SELECT MIN(position) FROM events WHERE tenant_id = ?", (tenant,)))


def test_postings_pages_follow_the_cursor(api: Any, db: Database) -> None:
    seen: list[tuple[str, str]] = []
    cursor = None
    while True:
        r = api.get("/v1/ledger/accounts/acct_cash/postings", params={"limit": 2, **({"cursor": cursor} if cursor
                                                                                     else {})})
        assert r.status_code == 200, r.text
        body = r.json()
        assert body["accountId"] == "acct_cash" and len(body["postings"]) <= 2
        seen.extend((p["position"], p["entryId"]) for p in body["postings"])
        cursor = body["nextCursor"]
        if cursor is None:
            break
    everything = api.get("/v1/ledger/accounts/acct_cash/postings", params={"limit": 500}).json()
    assert seen == [(p["position"], p["entryId"]) for p in everything["postings"]] and len(seen) > 2
    assert everything["nextCursor"] is None
    # each posting's position is its event's cursor, as the event feed shows it
    posting = everything["postings"][0]
    with db.read() as tx:
        position = int(tx.scalar("SELECT position FROM events WHERE tenant_id = ? AND event_id = ?",
                                 (TENANT, posting["eventId"])))
    assert posting["position"] == event_cursor(db, TENANT, position)


def test_bad_cursor_and_unknown_account(api: Any) -> None:
    first = api.get("/v1/ledger/accounts/acct_cash/postings", params={"limit": 1}).json()
    old_style = "WyJhY2N0X2Nhc2giLCIiLDEsMCwwXQ"  # the base64 JSON cursors before they were sealed
    for cursor in ("not base64!", "e30", first["nextCursor"] + "x", old_style, "12"):
        r = api.get("/v1/ledger/accounts/acct_cash/postings", params={"cursor": cursor})
        assert r.status_code == 400 and r.json()["code"] == "CURSOR_INVALID", cursor
    # a cursor of another listing
    r = api.get("/v1/ledger/accounts/acct_customer_escrow/postings", params={"cursor": first["nextCursor"]})
    assert r.status_code == 400 and r.json()["code"] == "CURSOR_INVALID"
    r = api.get("/v1/ledger/accounts/acct_nope/postings")
    assert r.status_code == 404 and r.json()["code"] == "LEDGER_ACCOUNT_NOT_FOUND"
    assert api.get("/v1/ledger/accounts/acct_claims_expense/postings").json()["postings"] is not None
