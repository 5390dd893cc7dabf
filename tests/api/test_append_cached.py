"""The append route serves a key it has authenticated and a job it has appended to from this process's caches
(api.auth.KnownKeys, append.state_cache): no read before the commit, which checks the head and the key. The
answers are those of a read: with two API processes appending to one job in turn, after a revocation made
elsewhere, and on a head that moved in the other process. Both backends."""

from __future__ import annotations

from typing import Any

import pytest
from prometheus_client import CollectorRegistry

from settlekit.api.auth import revoke_api_key
from settlekit.events.envelope import finalize, make_draft
from settlekit.simulate import Fleet, job_stream
from settlekit.store.db import Database
from support.api import TENANT_A, client, key_for, make_app

JOB = "job_cached"


def _created(app: Any) -> float:
    value = app.state.settlekit.registry.get_sample_value("settlekit_append_total", {"outcome": "created"})
    return float(value or 0)


@pytest.fixture
def two_processes(db: Database) -> Any:
    """Two API apps on one database (as two processes: each its own caches and metrics), one key, one fleet."""
    token = key_for(db, TENANT_A)
    apps = [make_app(db, registry=CollectorRegistry()) for _ in range(2)]
    clients = [client(app, token) for app in apps]
    fleet = Fleet.create()
    for registration in fleet.registrations():
        body = {k: v for k, v in registration.items() if k != "keyId"}
        assert clients[0].post("/v1/keys", json=body).status_code == 201
    return apps, clients, fleet, token


def _cache_results(app: Any) -> dict[str, float]:
    registry = app.state.settlekit.registry
    return {r: float(registry.get_sample_value("settlekit_append_cache_total", {"result": r}) or 0)
            for r in ("hit", "miss", "stale")}


def _cached(app: Any, token: str) -> bool:
    ctx = app.state.settlekit
    return ctx.known_keys.get(token) is not None and ctx.appender.stream_cache.get(TENANT_A, JOB, ()) is not None


def test_two_processes_append_to_one_job_in_turn(two_processes: Any) -> None:
    apps, clients, fleet, token = two_processes
    events = job_stream("settle_completed", JOB, fleet, 0)[:8]
    for i, event in enumerate(events):
        r = clients[i % 2].post(f"/v1/jobs/{JOB}/events", json=event)
        assert r.status_code == 201, r.text
        assert r.json()["firstSeq"] == i + 1
    assert all(_cached(app, token) for app in apps)
    assert clients[0].get(f"/v1/jobs/{JOB}/export").json() == events
    # each append counted once, though each one after the first two met a stale cache first
    assert _created(apps[0]) + _created(apps[1]) == len(events)


def test_a_head_moved_elsewhere_is_answered_from_a_read(two_processes: Any) -> None:
    apps, clients, fleet, token = two_processes
    events = job_stream("settle_completed", JOB, fleet, 0)[:3]
    for event in events[:2]:
        assert clients[0].post(f"/v1/jobs/{JOB}/events", json=event).status_code == 201
    assert clients[1].post(f"/v1/jobs/{JOB}/events", json=events[2]).status_code == 201
    assert _cached(apps[0], token)  # at event 2: stale
    again = clients[0].post(f"/v1/jobs/{JOB}/events", json=events[2])
    assert again.status_code == 200 and again.json()["alreadyExists"] is True
    fork = make_draft(stream_id=JOB, type=events[2]["type"], actor=events[2]["actor"], payload=events[2]["payload"],
                      at=events[2]["at"], id="evt_fork")
    r = clients[0].post(f"/v1/jobs/{JOB}/events", json=finalize(fork, events[1]["chainHash"], fleet.server))
    assert r.status_code == 409 and r.json()["code"] == "PREV_CHAIN_HASH_MISMATCH", r.text
    assert r.json()["details"]["currentPrevChainHash"] == events[2]["chainHash"]
    assert clients[0].get(f"/v1/jobs/{JOB}/export").json() == events


def test_a_key_revoked_elsewhere_appends_nothing(two_processes: Any, db: Database) -> None:
    apps, clients, fleet, token = two_processes
    events = job_stream("settle_completed", JOB, fleet, 0)[:3]
    for event in events[:2]:
        assert clients[0].post(f"/v1/jobs/{JOB}/events", json=event).status_code == 201
    assert _cached(apps[0], token)
    assert _cache_results(apps[0]) == {"hit": 1, "miss": 1, "stale": 0}  # the first read, the second did not
    key_id = token.split("_")[1]
    revoke_api_key(db, key_id)  # not through this process: its caches do not hear of it
    r = clients[0].post(f"/v1/jobs/{JOB}/events", json=events[2])
    assert r.status_code == 401 and r.json()["code"] == "API_KEY_INVALID", r.text
    assert apps[0].state.settlekit.known_keys.get(token) is None
    assert _cache_results(apps[0]) == {"hit": 1, "miss": 1, "stale": 1}
    fresh = client(apps[1], key_for(db, TENANT_A))
    assert fresh.get(f"/v1/jobs/{JOB}/export").json() == events[:2]


def test_a_refusal_from_the_cache_is_the_refusal_of_a_read(two_processes: Any) -> None:
    """A bad event on the cached path is answered as the first path answers it (after a read, once the cached
    attempt refused it), and the cache serves the next good one."""
    apps, clients, fleet, token = two_processes
    events = job_stream("settle_completed", JOB, fleet, 0)[:3]
    for event in events[:2]:
        assert clients[0].post(f"/v1/jobs/{JOB}/events", json=event).status_code == 201
    tampered = {**events[2], "signature": events[1]["signature"]}
    cached = clients[0].post(f"/v1/jobs/{JOB}/events", json=tampered)
    read = clients[1].post(f"/v1/jobs/{JOB}/events", json=tampered)
    assert cached.status_code == read.status_code == 400
    assert cached.json()["code"] == read.json()["code"]
    assert clients[0].post(f"/v1/jobs/{JOB}/events", json=events[2]).status_code == 201
    assert _cached(apps[0], token)
