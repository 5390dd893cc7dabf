"""Idempotency keys (issue 11 item 5): one reservation per key, taken before the action runs; concurrent
identical requests replay the one answer; a different request with the same key is 409; every write route
honours the key."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from typing import Any

import pytest

from settlekit.store.db import Database, connect
from test_api_support import TENANT_A, client, key_for, make_app

JOB = {"payload": {"templateId": "reset_lite", "constraints": {}}}
ROUNDS = 20
CONCURRENCY = 4


@pytest.fixture
def env(db_url: str) -> Iterator[tuple[Database, Any, str]]:
    db = connect(db_url)
    db.migrate()
    try:
        app = make_app(db)
        yield db, app, key_for(db, TENANT_A)
    finally:
        db.close()


def _concurrent(app: Any, api_key: str, method: str, path: str, body: Any, idem: str) -> list[Any]:
    barrier = threading.Barrier(CONCURRENCY)
    out: list[Any] = [None] * CONCURRENCY

    def one(i: int) -> None:
        api = client(app, api_key)
        barrier.wait()
        out[i] = api.request(method, path, json=body, headers={"Idempotency-Key": idem})

    threads = [threading.Thread(target=one, args=(i,)) for i in range(CONCURRENCY)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return out


def _job_count(db: Database) -> int:
    with db.read() as tx:
        return int(tx.scalar("SELECT count(*) FROM streams WHERE tenant_id = ?", (TENANT_A,)))


@pytest.mark.parametrize("with_job_id", [False, True])
def test_concurrent_identical_job_creates_replay_one_answer(env: tuple[Database, Any, str],
                                                            with_job_id: bool) -> None:
    db, app, api_key = env
    conflicted = 0
    for round_ in range(ROUNDS):
        body = {**JOB, "jobId": f"job_idem_{round_}"} if with_job_id else JOB
        before = _job_count(db)
        answers = _concurrent(app, api_key, "POST", "/v1/jobs", body, f"idem-{with_job_id}-{round_}")
        statuses = [r.status_code for r in answers]
        if any(s == 409 for s in statuses):
            conflicted += 1
            continue
        assert statuses == [201] * CONCURRENCY, [r.text for r in answers]
        bodies = {r.text for r in answers}
        assert len(bodies) == 1, bodies
        assert sum(r.headers.get("idempotent-replayed") == "true" for r in answers) == CONCURRENCY - 1
        assert _job_count(db) == before + 1
    print(f"rounds with a 409: {conflicted} of {ROUNDS} ({db.dialect})")
    assert conflicted == 0
