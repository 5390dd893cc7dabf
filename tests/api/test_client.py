"""The client against the API over loopback HTTP: answers decoded, errors typed with the problem's code, status,
detail and requestId, writes retried with the same Idempotency-Key after a lost answer or a 503 (the retry gets
the stored answer: nothing done twice), Retry-After honoured; the async client the same."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import anyio
import httpx
import pytest

from settlekit.client import (
    NO_RETRY,
    ApiConflictError,
    ApiNotFoundError,
    ApiUnavailableError,
    ApiUnreachableError,
    AsyncClient,
    Client,
    RetryPolicy,
)
from settlekit.errors import NotFoundError, SettlekitError
from settlekit.store.db import Database
from support.api import TENANT_A, key_for, make_app
from support.http_server import FaultyTransport, serve

JOB = {"templateId": "reset_lite", "customerId": "cust_1", "siteId": "site_1", "constraints": {"zoneId": "zone_a"}}


@pytest.fixture
def served(db: Database) -> Iterator[tuple[str, str, Database]]:
    with serve(make_app(db)) as url:
        yield url, key_for(db, TENANT_A), db


@pytest.fixture
def faulty(served: tuple[str, str, Database]) -> Iterator[tuple[Client, FaultyTransport, list[float]]]:
    url, key, _ = served
    transport = FaultyTransport()
    waits: list[float] = []
    with Client(url, key, http=httpx.Client(base_url=url, transport=transport), sleep=waits.append,
                retry=RetryPolicy(attempts=4, base_delay=0.01)) as api:
        yield api, transport, waits


def test_answers_and_typed_errors(served: tuple[str, str, Database]) -> None:
    url, key, _ = served
    with Client(url, key) as api:
        created = api.create_job(JOB, job_id="job_c1")
        assert created["jobId"] == "job_c1" and created["job"]["status"] == "CREATED"
        assert api.get_job("job_c1")["headChainHash"] == created["headChainHash"]
        assert [j["jobId"] for j in api.list_jobs()["jobs"]] == ["job_c1"]
        assert api.healthz()["status"] == "ok"
        with pytest.raises(ApiNotFoundError) as missing:
            api.get_job("job_nope")
        with pytest.raises(ApiConflictError) as taken:
            api.create_job(JOB, job_id="job_c1")
    error = missing.value
    assert isinstance(error, NotFoundError) and isinstance(error, SettlekitError)
    assert (error.code, error.status) == ("JOB_NOT_FOUND", 404)
    assert error.request_id and error.problem["requestId"] == error.request_id
    assert error.problem["detail"] == error.detail == error.message
    assert taken.value.code == "JOB_ALREADY_EXISTS" and taken.value.details == {"jobId": "job_c1"}


def test_a_write_whose_answer_was_lost_is_retried_once_with_the_same_key(
        faulty: tuple[Client, FaultyTransport, list[float]]) -> None:
    api, transport, waits = faulty
    transport.plan("drop")
    created = api.create_job(JOB, job_id="job_drop")
    assert transport.seen == 2 and len(waits) == 1  # the first reached the server, its answer was lost
    assert created["jobId"] == "job_drop"
    assert len(api.get_events("job_drop")["events"]) == 1


def test_503_and_refused_connections_are_retried_after_retry_after(
        faulty: tuple[Client, FaultyTransport, list[float]]) -> None:
    api, transport, waits = faulty
    transport.plan("unavailable", "refuse")
    assert api.create_job(JOB, job_id="job_503")["jobId"] == "job_503"
    assert transport.seen == 1 and len(waits) == 2
    transport.plan("unavailable", "unavailable", "unavailable", "unavailable")
    with pytest.raises(ApiUnavailableError) as gave_up:
        api.get_job("job_503")
    assert gave_up.value.code == "DATABASE_UNAVAILABLE" and gave_up.value.retry_after == 0
    transport.down()
    with pytest.raises(ApiUnreachableError):
        api.get_job("job_503")


def test_retry_after_is_a_floor_on_the_wait() -> None:
    policy = RetryPolicy(base_delay=0.01, max_delay=1)
    error = ApiUnavailableError(429, {"code": "RATE_LIMITED"}, retry_after=3)
    assert all(policy.delay(1, error) == 3 for _ in range(20))
    assert not NO_RETRY.should_retry(1, error) and policy.should_retry(1, error)
    assert not policy.should_retry(1, ApiConflictError(409, {"code": "PREV_CHAIN_HASH_MISMATCH"}))
    assert policy.should_retry(1, ApiConflictError(409, {"code": "IDEMPOTENCY_IN_PROGRESS"}))


def test_async_client(served: tuple[str, str, Database]) -> None:
    url, key, _ = served

    async def scenario() -> tuple[Any, str]:
        async with AsyncClient(url, key) as api:
            created = await api.create_job(JOB, job_id="job_async")
            head = (await api.get_job("job_async"))["headChainHash"]
            assert head == created["headChainHash"]
            try:
                await api.get_artifact("art_nope")
            except ApiNotFoundError as exc:
                return created, exc.code
        raise AssertionError("no error")

    created, code = anyio.run(scenario)
    assert created["jobId"] == "job_async" and code == "ARTIFACT_NOT_FOUND"
