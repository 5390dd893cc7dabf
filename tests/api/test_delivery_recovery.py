"""Delivery recovery and endpoint tools on both backends: replay of a destination's window (same webhook-id, new
attempts, the window respected, other destinations and tenants untouched), a signed test send, endpoint
statistics, automatic disabling after a failure streak with its reason, and re-enabling; the routes and the
`settlekit deliveries replay|test|stats` commands. Loopback receivers only; signatures are checked with the
official `standardwebhooks` library."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from standardwebhooks.webhooks import Webhook
from typer.testing import CliRunner

from settlekit.cli import app as cli_app
from settlekit.delivery.auto_disable import AutoDisable
from settlekit.delivery.enqueue import enqueue_artifact
from settlekit.delivery.receiver import ReceiverServer
from settlekit.delivery.retry import RetryPolicy
from settlekit.delivery.sender import SenderConfig
from settlekit.delivery.signing import generate_secret
from settlekit.delivery.worker import DeliveryWorker, WorkerConfig
from settlekit.events.canonical import canonical_hash
from settlekit.store.db import Database
from support.api import TENANT_A, TENANT_B, client, delivery_token, key_for, make_app
from support.receiver import FaultyReceiver

SECRET = generate_secret()


def artifact(tenant: str, n: int) -> dict[str, Any]:
    doc: dict[str, Any] = {"schemaVersion": "WorkCertificate.v1", "artifactType": "WorkCertificate.v1",
                           "artifactId": f"cert_job{n}_evt_1", "tenantId": tenant, "jobId": f"job{n}",
                           "jobVersion": 1}
    doc["artifactHash"] = canonical_hash(doc)
    return doc


class Env:
    """Two tenants' API clients, their artifacts and a delivery worker pass on demand."""

    def __init__(self, db: Database):
        self.db = db
        self.app = make_app(db)
        self.a = client(self.app, key_for(db, TENANT_A, ["ops"]))
        self.b = client(self.app, key_for(db, TENANT_B, ["ops"]))
        self.docs: dict[tuple[str, str], dict[str, Any]] = {}

    def destination(self, api: Any, destination_id: str, url: str) -> None:
        r = api.post("/v1/destinations", json={"destinationId": destination_id, "url": url, "secret": SECRET})
        assert r.status_code == 201, r.text

    def enqueue(self, tenant: str, n: int) -> None:
        doc = artifact(tenant, n)
        self.docs[(tenant, doc["artifactId"])] = doc
        with self.db.transaction() as tx:
            assert enqueue_artifact(tx, tenant, doc, now=datetime.now(UTC)) >= 1

    def deliver(self, rule: AutoDisable | None = None) -> None:
        config = WorkerConfig(allow_insecure_http=True, allow_loopback=True, auto_disable=rule or AutoDisable(),
                              retry=RetryPolicy(base=3600.0, cap=3600.0, max_attempts=5),
                              sender=SenderConfig(timeout=5.0, connect_timeout=2.0))
        worker = DeliveryWorker(self.db, artifact_loader=lambda tx, t, aid: self.docs.get((t, aid)), config=config)

        async def go() -> None:
            async with worker:
                await worker.run_once()

        asyncio.run(go())

    def rows(self, tenant: str) -> dict[int, tuple[str, str, int, str]]:
        """id → (destination, state, attempts, message id)."""
        with self.db.read() as tx:
            found = tx.fetchall("SELECT id, destination_id, state, attempts, message_id FROM deliveries"
                                " WHERE tenant_id = ? ORDER BY id", (tenant,))
        return {int(r[0]): (r[1], r[2], int(r[3]), r[4]) for r in found}

    def attempt_log(self, delivery_id: int) -> list[int]:
        shown = delivery_token(self.db, TENANT_A, delivery_id)
        return [a["attempt"] for a in self.a.get(f"/v1/deliveries/{shown}").json()["attemptLog"]]


@pytest.fixture
def env(db: Database) -> Iterator[Env]:
    yield Env(db)


def _iso(dt: datetime) -> str:
    return dt.astimezone(UTC).isoformat().replace("+00:00", "Z")


def test_replay_sends_the_window_again_with_the_same_webhook_id(env: Env) -> None:
    with ReceiverServer(secrets=[SECRET]) as rx:
        env.destination(env.a, "d1", f"{rx.url}a1")
        env.destination(env.a, "d2", f"{rx.url}a2")
        env.destination(env.b, "d1", f"{rx.url}b1")
        for n in (1, 2, 3):
            env.enqueue(TENANT_A, n)
        env.enqueue(TENANT_B, 9)
        env.deliver()
        assert len(rx.requests) == 7 and all(r.status == 200 for r in rx.requests)
        a_before, b_before = env.rows(TENANT_A), env.rows(TENANT_B)
        d1 = [i for i, row in a_before.items() if row[0] == "d1"]
        old = d1[0]  # moved out of the window
        with env.db.transaction() as tx:
            tx.execute("UPDATE deliveries SET created_at = ? WHERE id = ?",
                       (_stored_time(env.db, datetime.now(UTC) - timedelta(days=2)), old))
        since = _iso(datetime.now(UTC) - timedelta(hours=1))
        r = env.a.post("/v1/destinations/d1/replay", json={"since": since})
        assert r.status_code == 202, r.text
        replay = r.json()
        assert (replay["replayed"], replay["alreadyPending"], replay["total"]) == (2, 0, 2)
        assert replay["status"] == "done" and replay["finishedAt"]  # a window within one burst is done at once
        assert r.headers["location"] == f"/v1/destinations/d1/replays/{replay['replayId']}"
        assert env.a.get(r.headers["location"]).json() == {k: v for k, v in replay.items() if k != "alreadyPending"}
        after = env.rows(TENANT_A)
        for i, row in a_before.items():
            replayed = i in d1 and i != old
            assert after[i] == ((row[0], "pending", 0, row[3]) if replayed else row)
        assert env.rows(TENANT_B) == b_before
        env.deliver()
        again = rx.requests[7:]
        assert len(again) == 2 and all(r.status == 200 for r in again) and rx.duplicates == 2
        first_ids = {a_before[i][3] for i in d1 if i != old}
        assert {r.headers["webhook-id"] for r in again} == first_ids
        for req in again:
            assert Webhook(SECRET).verify(req.body, req.headers)["tenantId"] == TENANT_A
        for i in d1:
            assert env.attempt_log(i) == ([1] if i == old else [1, 2])  # a new attempt, logged after the first
            assert env.rows(TENANT_A)[i][1] == "delivered"
        # the other tenant cannot reach A's destination; bad windows are refused
        assert env.b.post("/v1/destinations/d2/replay", json={"since": since}).status_code == 404
        for body in ({"since": since, "until": since}, {"since": _iso(datetime.now(UTC) - timedelta(days=200))}):
            r = env.a.post("/v1/destinations/d1/replay", json=body)
            assert r.status_code == 400 and r.json()["code"] == "DELIVERY_WINDOW_INVALID"
        assert env.a.post("/v1/destinations/d1/replay", json={"since": "yesterday"}).status_code == 400
        assert env.rows(TENANT_B) == b_before


def _stored_time(db: Database, dt: datetime) -> Any:
    from settlekit.store.sql import timestamp

    return timestamp(db.dialect, dt)


def test_test_send_is_signed_and_reports_the_outcome(env: Env) -> None:
    with ReceiverServer(secrets=[SECRET], verify_artifact_body=False) as rx:
        env.destination(env.a, "d1", f"{rx.url}hook")
        env.destination(env.a, "dead", "http://127.0.0.1:9/nothing-listens")
        r = env.a.post("/v1/destinations/d1/test")
        assert r.status_code == 200, r.text
        body = r.json()
        assert body["ok"] and body["httpStatus"] == 200 and body["webhookId"].startswith("msg_test_")
        req = rx.requests[-1]
        assert req.headers["webhook-id"] == body["webhookId"]
        sent = Webhook(SECRET).verify(req.body, req.headers)
        assert sent["type"] == "settlekit.test" and sent["destinationId"] == "d1"
        failed = env.a.post("/v1/destinations/dead/test").json()
        assert not failed["ok"] and failed["httpStatus"] is None and failed["error"] == "network_error"
        assert env.b.post("/v1/destinations/d1/test").status_code == 404
        with env.db.read() as tx:
            assert tx.scalar("SELECT count(*) FROM deliveries") == 0  # nothing queued


def test_stats_auto_disable_with_reason_and_re_enable(env: Env) -> None:
    rx = FaultyReceiver(secrets=[SECRET])
    with rx:
        env.destination(env.a, "d1", f"{rx.url}hook")
        env.destination(env.b, "d1", f"{rx.url}other")
        env.enqueue(TENANT_A, 1)
        env.deliver()  # one success
        rx.inject(500, count=3)
        for n in (2, 3, 4):
            env.enqueue(TENANT_A, n)
        env.deliver(AutoDisable(3, timedelta(hours=1)))  # three failures, but the run is younger than an hour
        stats = env.a.get("/v1/destinations/d1/stats").json()
        assert stats["status"] == "active" and stats["consecutiveFailures"] == 3 and stats["failingSince"]
        assert stats["attempts"] == {"total": 4, "succeeded": 1, "failed": 3, "truncated": False}
        assert stats["successRate"] == 0.25 and stats["lastError"]["httpStatus"] == 500
        # the failing delivery is named by the tenant's token, which its own route takes
        failing = stats["lastError"]["deliveryId"]
        assert not failing.isdigit() and env.a.get(f"/v1/deliveries/{failing}").json()["id"] == failing
        assert stats["deliveries"] == {"pending": 3, "delivered": 1, "failed": 0, "truncated": False,
                                       "countedSince": stats["since"]}
        # a count reads at most the newest STATS_DELIVERIES deliveries of the window, and says so
        with pytest.MonkeyPatch.context() as patch:
            patch.setattr("settlekit.application.destinations.tools.STATS_DELIVERIES", 2)
            bounded = env.a.get("/v1/destinations/d1/stats").json()["deliveries"]
        assert bounded["truncated"] and bounded["pending"] + bounded["delivered"] + bounded["failed"] == 2
        assert stats["since"] < bounded["countedSince"] <= stats["until"]
        assert all(stats["latencyMs"][p] is not None for p in ("p50", "p90", "p99"))
        # a run long enough: the next failed attempt disables the destination, with a reason the tenant sees
        rx.inject(500, count=1)
        env.enqueue(TENANT_A, 5)
        env.deliver(AutoDisable(3, timedelta(0)))
        dest = env.a.get("/v1/destinations/d1").json()
        assert dest["status"] == "disabled", dest
        assert dest["disabledReason"].startswith("failing: 4 failed attempts in a row since ")
        assert "HTTP 500" in dest["disabledReason"]
        assert env.b.get("/v1/destinations/d1").json()["status"] == "active"  # the other tenant's is untouched
        assert env.b.get("/v1/destinations/d1/stats").json()["attempts"]["total"] == 0
        r = env.a.post("/v1/destinations/d1/enable")
        assert r.status_code == 200 and r.json()["status"] == "active" and r.json()["disabledReason"] is None
        stats = env.a.get("/v1/destinations/d1/stats").json()
        assert stats["consecutiveFailures"] == 0 and stats["failingSince"] is None
        # a success ends a streak
        rx.inject(500, count=1)
        env.enqueue(TENANT_A, 6)
        env.deliver()
        assert env.a.get("/v1/destinations/d1/stats").json()["consecutiveFailures"] == 1
        env.enqueue(TENANT_A, 7)
        env.deliver()
        assert env.a.get("/v1/destinations/d1/stats").json()["consecutiveFailures"] == 0
        assert env.a.get("/v1/destinations/nope/stats").status_code == 404
        r = env.a.get("/v1/destinations/d1/stats", params={"since": _iso(datetime.now(UTC)),
                                                         "until": _iso(datetime.now(UTC) - timedelta(hours=1))})
        assert r.status_code == 400 and r.json()["code"] == "DELIVERY_WINDOW_INVALID"


def test_cli_replay_test_and_stats(env: Env, db_url: str) -> None:
    runner = CliRunner()
    with ReceiverServer(secrets=[SECRET], verify_artifact_body=False) as rx:
        env.destination(env.a, "d1", f"{rx.url}hook")
        env.enqueue(TENANT_A, 1)
        env.deliver()
        since = _iso(datetime.now(UTC) - timedelta(hours=1))
        out = runner.invoke(cli_app, ["deliveries", "replay", "d1", "--db", db_url, "--tenant", TENANT_A,
                                      "--since", since, "--json"])
        assert out.exit_code == 0, out.output
        assert json.loads(out.output)["replayed"] == 1
        out = runner.invoke(cli_app, ["deliveries", "test", "d1", "--db", db_url, "--tenant", TENANT_A,
                                      "--allow-loopback-webhooks", "--json"])
        assert out.exit_code == 0, out.output
        assert json.loads(out.output)["ok"] is True
        out = runner.invoke(cli_app, ["deliveries", "stats", "d1", "--db", db_url, "--tenant", TENANT_A, "--json"])
        assert out.exit_code == 0, out.output
        assert json.loads(out.output)["attempts"]["total"] == 1
        out = runner.invoke(cli_app, ["deliveries", "stats", "d1", "--db", db_url, "--tenant", TENANT_A])
        assert out.exit_code == 0 and "success rate 100.0%" in out.output, out.output
        out = runner.invoke(cli_app, ["deliveries", "test", "d1", "--db", db_url, "--tenant", TENANT_A])
        assert out.exit_code == 1  # loopback is refused without the flag: the SSRF guard answers


def _delivered(env: Env, tenant: str, n: int) -> None:
    """`n` deliveries of `tenant` to its destination, delivered an hour ago."""
    for i in range(n):
        env.enqueue(tenant, 100 + i)
    with env.db.transaction() as tx:
        tx.execute("UPDATE deliveries SET state = 'delivered', created_at = ? WHERE tenant_id = ?",
                   (_stored_time(env.db, datetime.now(UTC) - timedelta(hours=1)), tenant))


def test_a_replay_is_a_bounded_job_with_progress_one_per_destination_and_cancelable(db: Database) -> None:
    from settlekit.delivery import replays

    env = Env(db)
    env.app.state.settlekit.replay_policy = replays.ReplayPolicy(rate=5.0, max_deliveries=30)
    env.destination(env.a, "d1", "http://127.0.0.1:9/a")  # no worker sends here
    _delivered(env, TENANT_A, 12)
    since = _iso(datetime.now(UTC) - timedelta(hours=2))
    r = env.a.post("/v1/destinations/d1/replay", json={"since": since})
    assert r.status_code == 202, r.text
    job = r.json()
    assert (job["status"], job["total"], job["replayed"]) == ("running", 12, 5)  # one second's worth at once
    assert sum(1 for row in env.rows(TENANT_A).values() if row[1] == "pending") == 5
    # one replay at a time per destination
    again = env.a.post("/v1/destinations/d1/replay", json={"since": since})
    assert again.status_code == 409 and again.json()["code"] == "REPLAY_RUNNING"
    # the worker moves it on at the rate, from when it last moved
    later = datetime.fromisoformat(job["updatedAt"].replace("Z", "+00:00")) + timedelta(seconds=1.01)
    assert replays.advance(db, replays.ReplayPolicy(rate=5.0), later) == 5
    progress = env.a.get(r.headers["location"]).json()
    assert (progress["status"], progress["replayed"]) == ("running", 10)
    assert replays.advance(db, replays.ReplayPolicy(rate=5.0), later) == 0  # nothing more within the same second
    # canceled: what it requeued stays queued, the rest is not sent again
    canceled = env.a.post(f"{r.headers['location']}/cancel")
    assert canceled.status_code == 200 and canceled.json()["status"] == "canceled" and canceled.json()["finishedAt"]
    assert replays.advance(db, replays.ReplayPolicy(rate=5.0), later + timedelta(seconds=10)) == 0
    assert sum(1 for row in env.rows(TENANT_A).values() if row[1] == "pending") == 10
    twice = env.a.post(f"{r.headers['location']}/cancel")
    assert twice.status_code == 409 and twice.json()["code"] == "REPLAY_NOT_RUNNING"
    listed = env.a.get("/v1/destinations/d1/replays").json()["replays"]
    assert [x["replayId"] for x in listed] == [job["replayId"]]
    # another tenant sees none of it; unknown ids and destinations are 404
    assert env.b.get(r.headers["location"]).status_code == 404
    assert env.b.post(f"{r.headers['location']}/cancel").status_code == 404
    assert env.a.get("/v1/destinations/d1/replays/rpl_" + "0" * 32).status_code == 404
    assert env.a.get("/v1/destinations/nope/replays").status_code == 404


def test_a_replay_window_is_capped_in_count_and_length(db: Database) -> None:
    from settlekit.delivery import replays

    env = Env(db)
    env.app.state.settlekit.replay_policy = replays.ReplayPolicy(rate=5.0, max_deliveries=3,
                                                                 max_window=timedelta(days=1))
    env.destination(env.a, "d1", "http://127.0.0.1:9/a")
    _delivered(env, TENANT_A, 4)
    r = env.a.post("/v1/destinations/d1/replay", json={"since": _iso(datetime.now(UTC) - timedelta(hours=2))})
    assert r.status_code == 422 and r.json()["code"] == "REPLAY_TOO_LARGE"
    assert r.json()["details"] == {"total": 4, "limit": 3}
    r = env.a.post("/v1/destinations/d1/replay", json={"since": _iso(datetime.now(UTC) - timedelta(days=2))})
    assert r.status_code == 400 and r.json()["code"] == "DELIVERY_WINDOW_INVALID"
    assert all(row[1] == "delivered" for row in env.rows(TENANT_A).values())  # nothing requeued


def test_test_sends_are_capped_per_tenant_and_never_hold_other_tenants_requests(db: Database) -> None:
    from concurrent.futures import ThreadPoolExecutor

    from support.endpoints import HoldingReceiver

    env = Env(db)
    with HoldingReceiver(hold=5.0, secrets=[SECRET], verify_artifact_body=False) as slow:
        env.destination(env.a, "slow", f"{slow.url}hook")
        with ThreadPoolExecutor(4) as pool:
            held = [pool.submit(env.a.post, "/v1/destinations/slow/test") for _ in range(2)]
            assert slow.wait_held(2, 10)
            busy = env.a.post("/v1/destinations/slow/test")
            assert busy.status_code == 429 and busy.json()["code"] == "TEST_SEND_BUSY"
            assert int(busy.headers["retry-after"]) >= 1
            assert env.b.get("/v1/destinations").status_code == 200  # another tenant's requests go on
            assert env.a.get("/v1/destinations/slow").status_code == 200
            slow.release()
            assert all(f.result().json()["ok"] for f in held)
        assert env.a.post("/v1/destinations/slow/test").json()["ok"]  # slots given back


def test_destination_saves_resolving_hosts_are_bounded_per_tenant(db: Database) -> None:
    """Saving or enabling a destination resolves its host on a worker thread: a tenant holding its slots (a slow
    DNS answer) gets 429 at once for one more, other tenants are not held up."""
    env = Env(db)
    slots = env.app.state.settlekit.url_checks
    with slots.slot(TENANT_A), slots.slot(TENANT_A), slots.slot(TENANT_A), slots.slot(TENANT_A):
        r = env.a.post("/v1/destinations", json={"destinationId": "d1", "url": "http://127.0.0.1:9/a",
                                                 "secret": SECRET})
        assert r.status_code == 429 and r.json()["code"] == "DESTINATION_CHECKS_BUSY", r.text
        assert int(r.headers["retry-after"]) >= 1
        env.destination(env.b, "d1", "http://127.0.0.1:9/b")
    env.destination(env.a, "d1", "http://127.0.0.1:9/a")  # slots given back


def test_a_tenant_runs_at_most_its_share_of_replays(db: Database) -> None:
    from settlekit.delivery import replays

    env = Env(db)
    env.app.state.settlekit.replay_policy = replays.ReplayPolicy(rate=1.0, max_running_per_tenant=2)
    for name in ("d1", "d2", "d3"):
        env.destination(env.a, name, f"http://127.0.0.1:9/{name}")
    env.destination(env.b, "d1", "http://127.0.0.1:9/b")
    _delivered(env, TENANT_A, 3)  # each of A's 3 destinations has 3 delivered deliveries
    _delivered(env, TENANT_B, 3)
    since = _iso(datetime.now(UTC) - timedelta(hours=2))
    assert env.a.post("/v1/destinations/d1/replay", json={"since": since}).json()["status"] == "running"
    assert env.a.post("/v1/destinations/d2/replay", json={"since": since}).json()["status"] == "running"
    third = env.a.post("/v1/destinations/d3/replay", json={"since": since})
    assert third.status_code == 409 and third.json()["code"] == "REPLAY_RUNNING"
    assert third.json()["details"] == {"running": 2, "limit": 2}
    assert env.b.post("/v1/destinations/d1/replay", json={"since": since}).status_code == 202  # B's own share
