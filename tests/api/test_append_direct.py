"""The event append has two ways in: the middleware serves it directly when the body has a Content-Length (what
clients send), FastAPI's route when it does not (a chunked body). Both give the same answers, in the same order of
checks. Both backends."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import orjson
import pytest

from settlekit.simulate import Fleet, job_stream
from settlekit.store.db import Database
from support.api import TENANT_A, client, key_for, make_app


def _chunked(body: Any) -> Iterator[bytes]:
    """The body as a stream of chunks: sent without Content-Length, so it takes FastAPI's route."""
    data = orjson.dumps(body)
    yield data[:10]
    yield data[10:]


@pytest.fixture
def api(db: Database) -> Any:
    app = make_app(db, max_body_bytes=16 * 1024)
    fleet = Fleet.create()
    keyed = client(app, key_for(db, TENANT_A))
    for registration in fleet.registrations():
        assert keyed.post("/v1/keys", json={k: v for k, v in registration.items() if k != "keyId"}).status_code == 201
    return app, keyed, fleet


def test_both_ways_append_alike(api: Any) -> None:
    app, keyed, fleet = api
    events = job_stream("settle_completed", "job_two_ways", fleet, 0)
    answers = []
    for i, event in enumerate(events[:4]):
        path = "/v1/jobs/job_two_ways/events"
        r = keyed.post(path, json=event) if i % 2 == 0 else keyed.post(path, content=_chunked(event))
        assert r.status_code == 201, r.text
        answers.append(r.json())
    assert [a["firstSeq"] for a in answers] == [1, 2, 3, 4]
    assert keyed.get("/v1/jobs/job_two_ways/export").json() == events[:4]
    again = keyed.post("/v1/jobs/job_two_ways/events", content=_chunked(events[3]))
    assert again.status_code == 200 and again.json()["alreadyExists"] is True


@pytest.mark.parametrize("chunked", [False, True])
def test_both_ways_refuse_alike(api: Any, chunked: bool) -> None:
    app, keyed, fleet = api
    anon = client(app)
    event = job_stream("settle_completed", "job_refused", fleet, 0)[0]

    def post(who: Any, body: Any, headers: dict[str, str] | None = None) -> Any:
        if chunked:
            return who.post("/v1/jobs/job_refused/events", content=_chunked(body), headers=headers or {})
        return who.post("/v1/jobs/job_refused/events", content=orjson.dumps(body), headers=headers or {})

    assert post(anon, event).json()["code"] == "UNAUTHENTICATED"
    big = {**event, "payload": {"blob": "x" * 20_000}}
    assert post(anon, big).status_code == 401  # who you are comes before what you sent
    assert post(keyed, big).json()["code"] == "PAYLOAD_TOO_LARGE"
    assert post(keyed, {**event, "payload": {"s": "a\u0000b"}}).json()["code"] == "SCHEMA_INVALID"
    reader = client(app, key_for(keyed.app.state.settlekit.db, TENANT_A, ["jobs:read"]))
    r = post(reader, event)
    assert r.status_code == 403 and r.json()["code"] == "SCOPE_REQUIRED"
    r = post(keyed, event, {"x-request-id": "req-123"})
    assert r.status_code == 201 and r.headers["x-request-id"] == "req-123"
    assert "ratelimit-limit" in {k.lower() for k in r.headers}
