"""The client's spool against answers that are not the API's append answer, a 500, a refused new job, a discard of
a stream that is not blocked, a payload the API always refuses, and a stream blocked by a background pass while an
append waited. Found by a reviewer."""
from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from settlekit.client import Client, RetryPolicy
from settlekit.client.executor import Executor
from settlekit.events.envelope import Signer
from settlekit.store.db import Database
from support.api import TENANT_A, key_for, make_app
from support.http_server import FaultyTransport, is_append, serve
from support.sdk import dispatched_job, heartbeat, start_events

ROBOT = "rob_1"



class Answer500(FaultyTransport):
    """Answers the next planned append with a bare 500 (as a crashed worker or a proxy would)."""

    def __init__(self) -> None:
        super().__init__()
        self.fail_next = 0

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        if self.fail_next and is_append(request):
            self.fail_next -= 1
            return httpx.Response(500, headers={"content-type": "application/problem+json"},
                                  content=b'{"code":"INTERNAL","status":500,"detail":"internal error","title":"x"}',
                                  request=request)
        return super().handle_request(request)


@pytest.fixture
def world(sqlite_db: Database, tmp_path: Path) -> Iterator[dict[str, Any]]:
    app = make_app(sqlite_db)
    with serve(app) as url:
        key = key_for(sqlite_db, TENANT_A)
        transport = Answer500()
        signer = Signer.generate()
        admin = Client(url, key)
        client = Client(url, key, http=httpx.Client(base_url=url, transport=transport),
                        retry=RetryPolicy(attempts=3, base_delay=0.01), sleep=lambda s: None)
        robot = Executor(client, signer, actor_type="robot", actor_id=ROBOT, spool=str(tmp_path / "spool.db"))
        robot.register_key()
        try:
            yield {"url": url, "key": key, "admin": admin, "robot": robot, "transport": transport}
        finally:
            robot.close()
            admin.close()


def _started(w: dict[str, Any], job_id: str) -> None:
    dispatched_job(w["admin"], job_id, ROBOT)
    for event_type, payload in start_events(job_id):
        assert w["robot"].append(job_id, event_type, payload).state == "sent"


def test_a_500_answer_leaves_the_batch_pending_and_does_not_block_the_stream(world: dict[str, Any]) -> None:
    """flusher.py docstring: 'a transient failure (no answer, 429, 5xx) stops the pass and leaves everything
    pending'; errors.py: ApiUnavailableError is 'A 429 or 5xx answer ... retry after'."""
    w = world
    _started(w, "job_500")
    w["transport"].down()
    for n in range(3):
        t, p, at = heartbeat("job_500", ROBOT, n)
        w["robot"].append("job_500", t, p, at=at, wait=False)
    w["transport"].up()
    w["transport"].fail_next = 1
    report = w["robot"].flush()
    head = w["robot"].spool.head("job_500")
    assert head.blocked_code is None, f"a single 500 blocked the stream: {report.blocked}"
    assert report.total_sent == 3 or head.pending == 3


def test_a_refused_new_job_does_not_stop_every_other_stream(world: dict[str, Any]) -> None:
    """README: when the API refuses a stream's batch 'that stream stops ... and the other streams go on'.
    A JOB_CREATED naming another tenant is refused with 403 JOB_TENANT_MISMATCH: the events are at fault, not
    the key, yet the flusher treats every 403 as 'stop the pass, block nothing'."""
    w = world
    _started(w, "job_good")
    w["transport"].down()
    # offline: a new job (allowed offline for JOB_CREATED) whose payload names another tenant
    w["robot"].append("job_bad", "JOB_CREATED",
                      {"tenantId": "someone_else", "templateId": "reset_lite", "customerId": "c", "siteId": "s",
                       "constraints": {"zoneId": "zone_a"}}, wait=False)
    for n in range(3):
        t, p, at = heartbeat("job_good", ROBOT, n)
        w["robot"].append("job_good", t, p, at=at, wait=False)
    w["transport"].up()
    reports = [w["robot"].flush() for _ in range(3)]
    status = {s.stream_id: s.to_json() for s in w["robot"].spool.status()}
    print([(r.error.code if r.error else None, r.sent, list(r.blocked)) for r in reports])
    assert status["job_good"]["pending"] == 0, (
        f"job_good never sent: every pass stops at job_bad: {[r.error for r in reports]}; status {status}")


def test_discard_of_a_stream_that_is_not_blocked_is_refused(world: dict[str, Any]) -> None:
    """README/executor: discard 'gives up the waiting events of a blocked stream'. On a stream that is not
    blocked it silently drops events that would have been sent."""
    w = world
    _started(w, "job_nb")
    w["transport"].down()
    for n in range(2):
        t, p, at = heartbeat("job_nb", ROBOT, n)
        w["robot"].append("job_nb", t, p, at=at, wait=False)
    w["transport"].up()
    assert w["robot"].spool.head("job_nb").blocked_code is None
    try:
        dropped = w["robot"].discard("job_nb")
    except Exception:
        return
    assert dropped == 0, f"discard on an unblocked stream dropped {dropped} events that were never sent"


@pytest.mark.parametrize("payload", [{"note": "a\u0000b"}, {"n": 2**53 + 1}], ids=["nul", "bigint"])
def test_a_payload_the_api_always_refuses_is_refused_before_it_is_spooled(world: dict[str, Any], payload: Any) -> None:
    """The executor refuses a lone surrogate before spooling (require_well_formed), but not the other input the
    README says the API always refuses (U+0000 in a string; an integer beyond a double). Such an event is signed
    and spooled, and its stream is blocked for good at the next send."""
    w = world
    _started(w, "job_odd")
    w["transport"].down()
    with pytest.raises(Exception) as refused:
        w["robot"].append("job_odd", "INCIDENT_REPORTED", {"incidentId": "inc_1", "type": "DAMAGE_PROPERTY",
                          "severity": 2, "summary": "x", "reportedBy": "ops", **payload}, wait=False)
    assert w["robot"].spool.head("job_odd").pending == 0, refused.value


def test_an_append_whose_stream_was_blocked_meanwhile_is_not_reported_sent(world: dict[str, Any]) -> None:
    """Executor.append spools, then sends under the stream lock. If the background flusher's pass blocks the
    stream in between (it sent the earlier waiting events and the API refused them), `_send` finds no batch
    (next_batch answers None for a blocked stream), its own report has no block, and the new event is returned
    as state "sent" although the API does not hold it."""
    from settlekit.client.flusher import Flusher
    from support.sdk import BACK_OFFICE

    w = world
    robot = w["robot"]
    _started(w, "job_bg")
    w["transport"].down()
    t, p, at = heartbeat("job_bg", ROBOT, 1)
    robot.append("job_bg", t, p, at=at, wait=False)  # waits in the spool
    head = w["admin"].get_job("job_bg")["headChainHash"]  # someone else appends meanwhile
    w["admin"].append_events("job_bg", {"type": "INCIDENT_REPORTED", "actor": BACK_OFFICE,
                                        "payload": {"incidentId": "inc_1", "type": "DAMAGE_PROPERTY", "severity": 2,
                                                    "summary": "x", "reportedBy": "ops"}},
                             expected_prev_chain_hash=head)
    w["transport"].up()
    real_add_many = robot.spool.add_many
    background = Flusher(robot.spool, robot.client)  # the background pass, running between spool and send

    def add_many(*args: Any, **kwargs: Any) -> Any:
        out = real_add_many(*args, **kwargs)
        background.flush()
        return out

    robot.spool.add_many = add_many  # type: ignore[method-assign]
    t, p, at = heartbeat("job_bg", ROBOT, 2)
    try:
        receipt = robot.append("job_bg", t, p, at=at)
        outcome = receipt.state
        event_id = receipt.event["id"]
    except Exception as exc:  # noqa: BLE001
        outcome, event_id = f"raised {type(exc).__name__}", None
    stored = {e["id"] for e in w["admin"].get_events("job_bg")["events"]}
    assert outcome != "sent" or event_id in stored, (
        f"append answered {outcome!r}; the stream is blocked by {robot.spool.head('job_bg').blocked_code} "
        f"and the API does not hold the event")


class Intercepting(FaultyTransport):
    def __init__(self) -> None:
        super().__init__()
        self.answer: httpx.Response | None = None

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        if self.answer is not None and is_append(request):
            a = self.answer
            return httpx.Response(a.status_code, headers=a.headers, content=a.content, request=request)
        return super().handle_request(request)


@pytest.mark.parametrize("answer", [
    httpx.Response(308, headers={"location": "https://api.example/v1/jobs/job_x/events"}),
    httpx.Response(200, headers={"content-type": "text/html"}, content=b"<html>Wi-Fi login</html>"),
], ids=["redirect", "portal-page"])
def test_an_answer_that_is_not_the_apis_append_answer_does_not_mark_the_batch_sent(
        sqlite_db: Database, tmp_path: Path, answer: httpx.Response) -> None:
    app = make_app(sqlite_db)
    with serve(app) as url:
        key = key_for(sqlite_db, TENANT_A)
        admin = Client(url, key)
        transport = Intercepting()
        client = Client(url, key, http=httpx.Client(base_url=url, transport=transport),
                        retry=RetryPolicy(attempts=2, base_delay=0.01), sleep=lambda s: None)
        robot = Executor(client, Signer.generate(), actor_type="robot", actor_id=ROBOT,
                         spool=str(tmp_path / "spool.db"))
        robot.register_key()
        dispatched_job(admin, "job_x", ROBOT)
        for event_type, payload in start_events("job_x"):
            assert robot.append("job_x", event_type, payload).state == "sent"
        transport.answer = answer
        t, p, at = heartbeat("job_x", ROBOT, 1)
        receipt = robot.append("job_x", t, p, at=at)
        transport.answer = None
        stored = {e["id"] for e in admin.get_events("job_x")["events"]}
        state = [r["state"] for r in robot.spool.export("job_x") if r["event"]["id"] == receipt.event["id"]]
        robot.close()
        admin.close()
        assert receipt.event["id"] in stored or (receipt.state != "sent" and state == ["pending"]), (
            f"receipt {receipt.state}, spool says {state}, yet the API does not hold the event")


def test_a_stale_server_head_read_is_not_used_over_the_spools_newer_head(sqlite_db: Database, tmp_path: Path) -> None:
    """Spool: 'safe to share between the threads of a process (and between processes)'. Executor B reads the
    job's head from the API (pending == 0); before B spools, executor A on the same file appends and sends E1.
    B's add_many still sees pending == 0 and links its event to the head B read (now stale) instead of E1:
    the API refused it with 409 and the stream was blocked, though nobody else appended. Now the spool's head,
    moved since B read it, wins over B's server head. Found by a reviewer."""
    app = make_app(sqlite_db)
    with serve(app) as url:
        key = key_for(sqlite_db, TENANT_A)
        admin = Client(url, key)
        signer = Signer.generate()
        path = str(tmp_path / "spool.db")
        a = Executor(Client(url, key, retry=RetryPolicy(attempts=2, base_delay=0.01)), signer,
                     actor_type="robot", actor_id=ROBOT, spool=path)
        a.register_key()
        b_client = Client(url, key, retry=RetryPolicy(attempts=2, base_delay=0.01))
        b = Executor(b_client, signer, actor_type="robot", actor_id=ROBOT, spool=path)
        dispatched_job(admin, "job_r", ROBOT)
        for event_type, payload in start_events("job_r"):
            assert a.append("job_r", event_type, payload).state == "sent"

        real_send = b_client.send
        fired = []

        def send(request: Any, retry: Any = None) -> Any:
            answer = real_send(request, retry)
            if request.method == "GET" and request.path == "/v1/jobs/job_r" and not fired:
                fired.append(1)
                t, p, at = heartbeat("job_r", ROBOT, 10)
                assert a.append("job_r", t, p, at=at).state == "sent"  # the other process, meanwhile
            return answer

        b_client.send = send  # type: ignore[method-assign]
        t, p, at = heartbeat("job_r", ROBOT, 20)
        try:
            receipt = b.append("job_r", t, p, at=at)
            state = receipt.state
        except Exception as exc:  # noqa: BLE001
            state = f"{type(exc).__name__}: {exc}"
        blocked = b.spool.head("job_r").blocked_code
        a.close()
        b.close()
        admin.close()
        assert fired and state == "sent" and blocked is None, f"append: {state}; stream blocked by {blocked}"
