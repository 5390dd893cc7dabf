"""A batch append over HTTP, as the bench measures it: 100 client-finalized events in one request
(`POST /v1/jobs/{id}/events` with a list body), on both backends. All or nothing, every link and signature
checked, a resend answered alreadyExists, a retry under its Idempotency-Key replayed; the SDK's append_events
sends the same list."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from settlekit.client import Client
from settlekit.events.envelope import verify_chain
from settlekit.simulate import Fleet
from settlekit.store.db import Database
from support.api import TENANT_A, key_for, make_app, position_of
from support.http_server import serve

sys.path.append(str(Path(__file__).resolve().parents[2] / "bench"))

from workload import JobWork, new_job  # noqa: E402

BATCH = 100


@pytest.fixture
def env(db: Database) -> Iterator[tuple[httpx.Client, JobWork, dict[str, str], str]]:
    """A client of the API served on loopback, one job of the bench's workload set up (at execution), the
    fleet's public keys, and the API key."""
    api_key = key_for(db, TENANT_A)
    fleet = Fleet.create(robots=1, operators=1)
    with serve(make_app(db)) as base, httpx.Client(base_url=base, headers={"authorization": f"Bearer {api_key}"},
                                                  timeout=30) as http:
        for key in fleet.registrations():
            body = {k: key[k] for k in ("publicKeyPem", "purpose", "entityId") if k in key}
            http.post("/v1/keys", json=body).raise_for_status()
        job = new_job(fleet, "job_batch", 0, TENANT_A)
        http.post(f"/v1/jobs/{job.job_id}/events", json=job.setup).raise_for_status()
        yield http, job, fleet.public_keys(), api_key


def _version(http: httpx.Client, job: JobWork) -> int:
    return int(http.get(f"/v1/jobs/{job.job_id}").json()["version"])


def test_a_batch_of_100_finalized_events_is_one_append(env: tuple[httpx.Client, JobWork, dict[str, str], str],
                                                       db: Database) -> None:
    http, job, keys, _ = env
    path = f"/v1/jobs/{job.job_id}/events"
    batch = job.add_heartbeats(BATCH)
    r = http.post(path, json=batch)
    assert r.status_code == 201, r.text
    body = r.json()
    assert body["firstSeq"] == len(job.setup) + 1 and len(body["positions"]) == BATCH
    positions = [position_of(db, TENANT_A, p) for p in body["positions"]]  # the tenant's cursors
    assert positions == sorted(positions) and body["headChainHash"] == batch[-1]["chainHash"]
    assert body["job"]["execution"]["lastHeartbeatAt"] == batch[-1]["at"]
    stored = http.get(f"/v1/jobs/{job.job_id}/export").json()
    assert stored == job.setup + batch
    verify_chain(stored, keys)
    again = http.post(path, json=batch)
    assert again.status_code == 200 and again.json()["alreadyExists"] is True
    assert again.json()["positions"] == body["positions"] and _version(http, job) == len(job.setup) + BATCH


def test_a_refused_event_in_a_batch_stores_none_of_it(env: tuple[httpx.Client, JobWork, dict[str, str], str]
                                                      ) -> None:
    http, job, _, _ = env
    path = f"/v1/jobs/{job.job_id}/events"
    batch = job.add_heartbeats(BATCH)
    before = _version(http, job)
    forged: list[dict[str, Any]] = [dict(e) for e in batch]
    forged[50]["signature"] = batch[49]["signature"]  # another event's signature
    r = http.post(path, json=forged)
    assert r.status_code == 400 and r.json()["code"] == "SIG_INVALID", r.text
    unlinked = batch[:70] + batch[71:]  # the 71st event links to one that is not sent
    r = http.post(path, json=unlinked)
    assert r.status_code in (400, 409) and r.json()["code"] in ("CHAIN_BREAK", "PREV_CHAIN_HASH_MISMATCH"), r.text
    assert _version(http, job) == before
    assert http.post(path, json=batch[:1]).status_code == 201
    # the rest of the batch still links to the event just stored; the whole batch again is a resend of a stream
    # that has moved on: neither stores anything twice
    assert http.post(path, json=batch[1:]).status_code == 201
    assert _version(http, job) == before + BATCH
    stale = job.add_heartbeats(2)
    r = http.post(path, json=[dict(stale[0], prevChainHash=batch[0]["chainHash"]), stale[1]])
    assert r.status_code in (400, 409) and _version(http, job) == before + BATCH


def test_a_batch_retried_under_its_key_is_replayed(env: tuple[httpx.Client, JobWork, dict[str, str], str]) -> None:
    http, job, _, _ = env
    path = f"/v1/jobs/{job.job_id}/events"
    batch = job.add_heartbeats(BATCH)
    first = http.post(path, json=batch, headers={"Idempotency-Key": "batch-1"})
    assert first.status_code == 201
    retry = http.post(path, json=batch, headers={"Idempotency-Key": "batch-1"})
    assert retry.status_code == 201 and retry.headers.get("Idempotent-Replayed") == "true"
    assert retry.json() == first.json()
    other = http.post(path, json=batch[:BATCH // 2], headers={"Idempotency-Key": "batch-1"})
    assert other.status_code == 409 and other.json()["code"] == "IDEMPOTENCY_CONFLICT"
    assert _version(http, job) == len(job.setup) + BATCH


def test_the_sdk_sends_a_batch_as_one_request(env: tuple[httpx.Client, JobWork, dict[str, str], str]) -> None:
    http, job, _, api_key = env
    batch = job.add_heartbeats(BATCH)
    with Client(str(http.base_url), api_key) as sdk:
        answer = sdk.append_events(job.job_id, batch)
    assert len(answer["positions"]) == BATCH and answer["headChainHash"] == batch[-1]["chainHash"]
    assert _version(http, job) == len(job.setup) + BATCH
