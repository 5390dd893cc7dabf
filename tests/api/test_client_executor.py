"""The executor and its spool against the API over loopback HTTP, on both backends: a robot's signed events
appended online; spooled while the API is down and sent in order when it is back; lost answers and 503s that
change nothing (each event is stored once); a conflict that stops one stream and not the others; a crash of the
flusher between any two of its steps, then a restart, that loses nothing and sends nothing twice."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest

from settlekit.client import ApiConflictError, ApiValidationError, Client, RetryPolicy, SpoolError
from settlekit.client.executor import Executor
from settlekit.client.flusher import Flusher
from settlekit.events.envelope import Signer, verify_chain
from settlekit.store.db import Database
from support.api import TENANT_A, key_for, make_app
from support.failpoints import SimulatedCrash, crash_at
from support.http_server import FaultyTransport, is_append, serve
from support.sdk import BACK_OFFICE, dispatched_job, heartbeat, start_events

HANG_GUARD = 60.0
ROBOT = "rob_1"


@dataclass
class World:
    url: str
    key: str
    admin: Client
    transport: FaultyTransport
    robot: Executor
    signer: Signer
    spool_path: Path
    server_key: dict[str, str]

    def client(self) -> Client:
        """A new client through the same faulty transport (as a restarted process would make)."""
        return Client(self.url, self.key, http=httpx.Client(base_url=self.url, transport=self.transport),
                      retry=RetryPolicy(attempts=6, base_delay=0.01), sleep=lambda s: None)

    def restart(self) -> Executor:
        """The robot after a crash: the old spool handle dropped, a new one on the same file."""
        self.robot.spool.close()
        self.robot = Executor(self.client(), self.signer, actor_type="robot", actor_id=ROBOT,
                              spool=str(self.spool_path))
        return self.robot

    def stream(self, job_id: str) -> list[dict[str, Any]]:
        events: list[dict[str, Any]] = self.admin.get_events(job_id)["events"]
        return events


@pytest.fixture
def world(db: Database, tmp_path: Path) -> Iterator[World]:
    app = make_app(db)
    server = app.state.settlekit.appender.server_signer
    with serve(app) as url:
        key = key_for(db, TENANT_A)
        transport = FaultyTransport()
        signer = Signer.generate()
        admin = Client(url, key)
        w = World(url, key, admin, transport, None, signer, tmp_path / "spool.db",  # type: ignore[arg-type]
                  {server.key_id: server.public_key_pem})
        w.robot = Executor(w.client(), signer, actor_type="robot", actor_id=ROBOT, spool=str(w.spool_path))
        w.robot.register_key()
        try:
            yield w
        finally:
            w.robot.close()
            admin.close()


def _started(w: World, job_id: str) -> None:
    dispatched_job(w.admin, job_id, ROBOT)
    for event_type, payload in start_events(job_id):
        assert w.robot.append(job_id, event_type, payload).state == "sent"


def _spool_heartbeats(w: World, job_id: str, count: int) -> list[str]:
    ids = []
    for n in range(count):
        event_type, payload, at = heartbeat(job_id, ROBOT, n)
        ids.append(w.robot.append(job_id, event_type, payload, at=at, wait=False).event["id"])
    return ids


def _check_stream(w: World, job_id: str, spooled_ids: list[str]) -> None:
    """The stream holds each spooled event exactly once, in spool order, and its chain and signatures verify."""
    events = w.stream(job_id)
    verify_chain(events, {w.signer.key_id: w.signer.public_key_pem, **_server_keys(w)})
    ids = [e["id"] for e in events]
    assert len(ids) == len(set(ids))
    robot_ids = [i for i in ids if i in set(spooled_ids)]
    assert robot_ids == spooled_ids


def _server_keys(w: World) -> dict[str, str]:
    return {**w.server_key, **{k["keyId"]: k["publicKeyPem"] for k in w.admin.list_keys()["keys"]}}


def _until(check: Callable[[], bool], what: str) -> None:
    deadline = time.monotonic() + HANG_GUARD
    while not check():
        assert time.monotonic() < deadline, f"hang guard: {what}"
        time.sleep(0.02)


def _pending(w: World) -> int:
    return sum(s.pending for s in w.robot.spool.status())


def test_a_robot_reports_a_job_online(world: World) -> None:
    w = world
    _started(w, "job_online")
    event_type, payload, at = heartbeat("job_online", ROBOT, 50)
    assert w.robot.append("job_online", event_type, payload, at=at).state == "sent"
    done = w.robot.append("job_online", "EXECUTION_COMPLETED", {"report": {"tasksCompleted": 1}})
    job = w.admin.get_job("job_online")
    assert job["job"]["status"] == "COMPLETED" and job["headChainHash"] == done.chain_hash
    verify_chain(w.admin.export_job("job_online"), _server_keys(w))
    assert [s.to_json()["state"] for s in w.robot.spool.status()] == ["sent"]


def test_events_spooled_while_the_api_is_down_are_sent_in_order_when_it_is_back(world: World) -> None:
    w = world
    for job_id in ("job_a", "job_b"):
        _started(w, job_id)
    w.transport.down()
    ids = {job_id: _spool_heartbeats(w, job_id, 12) for job_id in ("job_a", "job_b")}
    offline = w.robot.append("job_a", "EXECUTION_COMPLETED", {"report": {"tasksCompleted": 1}})
    assert offline.state == "spooled" and offline.error is not None and offline.error.code == "API_UNREACHABLE"
    ids["job_a"].append(offline.event["id"])
    w.robot.flusher.retry = RetryPolicy(attempts=1, base_delay=0.01)
    w.robot.start()
    _until(lambda: w.robot.flusher.last_report is not None and w.robot.flusher.last_report.error is not None,
           "a pass that met the outage")
    w.transport.up()
    w.robot.flusher.wake()
    _until(lambda: _pending(w) == 0, "the spool drains")
    w.robot.stop()
    for job_id, spooled in ids.items():
        _check_stream(w, job_id, spooled)
    assert w.admin.get_job("job_a")["job"]["status"] == "COMPLETED"


def test_lost_answers_and_503s_store_each_event_once(world: World) -> None:
    w = world
    _started(w, "job_faults")
    w.transport.down()
    spooled = _spool_heartbeats(w, "job_faults", 30)
    w.transport.up()
    w.robot.flusher.batch_events = 4
    w.transport.faults.clear()
    w.transport.plan("drop", "unavailable", "drop", "refuse", "drop", when=is_append)
    report = w.robot.flush()
    assert report.error is None and report.total_sent == 30
    assert [f for f, _ in w.transport.faults] == ["drop", "unavailable", "drop", "refuse", "drop"]
    _check_stream(w, "job_faults", spooled)


def test_a_conflict_stops_that_stream_only(world: World) -> None:
    w = world
    for job_id in ("job_moved", "job_other"):
        _started(w, job_id)
    w.transport.down()
    moved = _spool_heartbeats(w, "job_moved", 5)
    other = _spool_heartbeats(w, "job_other", 5)
    head = w.admin.get_job("job_moved")["headChainHash"]  # someone else appends meanwhile
    w.admin.append_events("job_moved", {"type": "INCIDENT_REPORTED",
                                        "actor": BACK_OFFICE, "payload": _incident()},
                          expected_prev_chain_hash=head)
    w.transport.up()
    report = w.robot.flush()
    assert report.sent == {"job_other": 5} and report.blocked["job_moved"].code == "PREV_CHAIN_HASH_MISMATCH"
    _check_stream(w, "job_other", other)
    status = {s.stream_id: s.to_json() for s in w.robot.spool.status()}
    assert status["job_moved"]["state"] == "blocked" and status["job_moved"]["pending"] == 5
    assert status["job_moved"]["blocked"]["code"] == "PREV_CHAIN_HASH_MISMATCH"
    assert "request" in status["job_moved"]["blocked"]["message"]  # the request id, to quote
    with pytest.raises(SpoolError) as blocked:
        w.robot.append("job_moved", *heartbeat("job_moved", ROBOT, 99)[:2])
    assert blocked.value.code == "SPOOL_STREAM_BLOCKED"
    assert not set(moved) & {e["id"] for e in w.stream("job_moved")}
    assert w.robot.discard("job_moved") == 5
    event_type, payload, at = heartbeat("job_moved", ROBOT, 100)
    assert w.robot.append("job_moved", event_type, payload, at=at).state == "sent"


def _incident() -> dict[str, Any]:
    return {"incidentId": "inc_1", "type": "DAMAGE_PROPERTY", "severity": 2, "summary": "scuffed wall",
            "reportedBy": "ops"}


def test_a_refused_event_raises_the_api_error_and_blocks_its_stream(world: World) -> None:
    w = world
    dispatched_job(w.admin, "job_early", ROBOT)
    with pytest.raises((ApiConflictError, ApiValidationError)) as refused:
        w.robot.append("job_early", "EXECUTION_COMPLETED", {"report": {}})  # not started yet
    assert refused.value.request_id
    assert w.robot.spool.head("job_early").blocked_code == refused.value.code


@pytest.mark.parametrize("point", ["spool.batch_stored", "spool.answered", "spool.marked"])
def test_a_flusher_killed_between_steps_loses_nothing_and_sends_nothing_twice(world: World, point: str) -> None:
    w = world
    for job_id in ("job_k1", "job_k2"):
        _started(w, job_id)
    w.transport.down()
    spooled = {job_id: _spool_heartbeats(w, job_id, 9) for job_id in ("job_k1", "job_k2")}
    w.transport.up()
    w.robot.flusher.batch_events = 4
    for round_ in range(3):  # killed at the point on three batches in a row, restarted each time
        crash_at(point)
        with pytest.raises(SimulatedCrash):
            w.robot.flush()
        w.restart()
        w.robot.flusher.batch_events = 4 + round_
    report = w.robot.flush()
    assert report.error is None and not report.blocked
    assert _pending(w) == 0
    for job_id, ids in spooled.items():
        _check_stream(w, job_id, ids)
        assert sum(1 for e in w.robot.spool.export(job_id) if e["state"] == "sent") == len(ids) + 3


def test_the_background_flusher_killed_mid_batch_is_restarted(world: World) -> None:
    w = world
    _started(w, "job_bg")
    w.transport.down()
    spooled = _spool_heartbeats(w, "job_bg", 10)
    w.transport.up()
    crash_at("spool.answered")
    w.robot.start()
    _until(lambda: not w.robot.flusher.running, "the flusher thread dies at the failpoint")
    assert _pending(w) == 10  # the batch was committed by the API, not yet marked sent
    robot = w.restart()
    robot.start()
    _until(lambda: _pending(w) == 0, "the restarted flusher drains the spool")
    robot.stop()
    _check_stream(w, "job_bg", spooled)


def test_events_already_stored_under_another_key_are_recognised_as_sent(world: World) -> None:
    w = world
    _started(w, "job_elsewhere")
    w.transport.down()
    spooled = _spool_heartbeats(w, "job_elsewhere", 4)
    batch = w.robot.spool.next_batch("job_elsewhere")  # its key is stored, then the process stops
    assert batch is not None
    events = [row["event"] for row in w.robot.spool.export("job_elsewhere") if row["state"] == "pending"]
    stored = w.admin.append_events("job_elsewhere", events)  # the same events reach the API another way
    w.transport.up()
    report = w.restart().flush()
    assert report.sent == {"job_elsewhere": 4} and not report.blocked
    assert [row["position"] for row in w.robot.spool.export("job_elsewhere")][-4:] == stored["positions"]
    _check_stream(w, "job_elsewhere", spooled)


def test_a_refused_api_key_stops_the_pass_and_blocks_nothing(world: World) -> None:
    w = world
    _started(w, "job_key")
    w.transport.down()
    spooled = _spool_heartbeats(w, "job_key", 3)
    w.transport.up()
    bad = Client(w.url, "sk_0000000000000000_not-a-key", retry=RetryPolicy(attempts=1))
    report = Flusher(w.robot.spool, bad).flush()
    assert report.error is not None and report.error.code in ("API_KEY_INVALID", "UNAUTHENTICATED")
    assert not report.blocked and w.robot.spool.head("job_key").blocked_code is None
    assert w.robot.flush().sent == {"job_key": 3}
    _check_stream(w, "job_key", spooled)


def test_offline_a_job_the_spool_never_saw_needs_its_head_first(world: World) -> None:
    w = world
    head = dispatched_job(w.admin, "job_unseen", ROBOT)
    w.transport.down()
    with pytest.raises(SpoolError) as unknown:
        w.robot.append("job_unseen", "EN_ROUTE", {"etaSeconds": 600})
    assert unknown.value.code == "SPOOL_HEAD_UNKNOWN" and unknown.value.status == 503
    assert w.robot.spool.head("job_unseen").known is False  # nothing was spooled
    w.robot.follow("job_unseen", head)  # the head the robot was dispatched with
    spooled = [w.robot.append("job_unseen", t, p).event["id"] for t, p in start_events("job_unseen")]
    w.transport.up()
    assert w.robot.flush().sent == {"job_unseen": 3}
    events = w.stream("job_unseen")
    assert [e["id"] for e in events][-3:] == spooled and events[-4]["chainHash"] == head
