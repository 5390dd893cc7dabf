"""Database round trips of one append through the API on PostgreSQL, counted on the wire (a count, not a
timing): the first append of a job in this process reads the API key's row with the stream head, its state and
the signer keys the event names (one statement), then appends; the next appends to it, with a key this process
authenticated, are the append alone (the API's caches: the commit checks the head and the key)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from settlekit.simulate import Fleet, job_stream
from settlekit.store.db import Database, connect
from support.api import TENANT_A, client, key_for, make_app
from support.pg_round_trips import RoundTripCounter

# the API key with the stream head (+ snapshot, + signer keys), the append
APPEND_ROUND_TRIPS = 2
# the append alone (the key and the stream from the process's caches)
CACHED_APPEND_ROUND_TRIPS = 1
# statements are prepared on their third use on each pooled connection: count once that is done
WARM_UP = 8


@pytest.fixture
def counted(pg_url: str) -> Iterator[tuple[RoundTripCounter, Database, Any]]:
    counter, url = RoundTripCounter.for_url(pg_url)
    db = connect(url, max_size=4)
    db.migrate()
    try:
        yield counter, db, client(make_app(db), key_for(db, TENANT_A))
    finally:
        db.close()
        counter.close()


def _counted_post(counter: RoundTripCounter, api: Any, path: str, body: Any,
                  headers: dict[str, str] | None = None) -> int:
    counter.take()
    r = api.post(path, json=body, headers=headers or {})
    assert r.status_code in (200, 201), r.text
    return counter.take()


def test_client_finalized_append_round_trips(counted: tuple[RoundTripCounter, Database, Any]) -> None:
    counter, _, api = counted
    fleet = Fleet.create()
    for registration in fleet.registrations():
        body = {k: v for k, v in registration.items() if k != "keyId"}
        assert api.post("/v1/keys", json=body).status_code == 201
    counts: list[tuple[str, int]] = []
    for n in range(WARM_UP + 2):
        job_id = f"job_rt_{n}"
        # JOB_CREATED and QUOTE_PROPOSED (the next, BOOKED, posts ledger entries in the append's transaction)
        for event in job_stream("settle_completed", job_id, fleet, n)[:2]:
            counts.append((event["type"], _counted_post(counter, api, f"/v1/jobs/{job_id}/events", event)))
    measured = counts[WARM_UP * 2:]
    assert measured == [(t, APPEND_ROUND_TRIPS if t == "JOB_CREATED" else CACHED_APPEND_ROUND_TRIPS)
                        for t, _ in measured], measured


def test_draft_append_round_trips(counted: tuple[RoundTripCounter, Database, Any]) -> None:
    counter, _, api = counted
    counts: list[int] = []
    for n in range(WARM_UP + 2):
        r = api.post("/v1/jobs", json={"jobId": f"job_draft_{n}", "payload": {"templateId": "t1"}})
        assert r.status_code == 201, r.text
        quote = {"type": "QUOTE_PROPOSED", "actor": {"type": "pricing", "id": "p1"},
                 "payload": {"amountCents": 6500, "currency": "USD"}}
        counts.append(_counted_post(counter, api, f"/v1/jobs/job_draft_{n}/events", quote,
                                    {"x-expected-prev-chain-hash": r.json()["headChainHash"]}))
    assert counts[0] == APPEND_ROUND_TRIPS  # the key is not known yet (POST /v1/jobs is not the append route)
    assert all(n == CACHED_APPEND_ROUND_TRIPS for n in counts[WARM_UP:]), counts
