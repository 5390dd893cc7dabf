"""The spool's flusher as a separate process killed with SIGKILL at random moments (inside a SQLite transaction,
mid-request, between the answer and its record…), then started again, until the spool drains: every spooled
event is in its stream exactly once, in spool order, and the chains verify. The API runs in this process."""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
from pathlib import Path

from settlekit.client import Client
from settlekit.client.executor import Executor
from settlekit.events.envelope import Signer, verify_chain
from settlekit.store.db import connect
from support.api import TENANT_A, key_for, make_app
from support.http_server import serve
from support.sdk import dispatched_job, heartbeat, start_events

ROBOT = "rob_1"
JOBS = 4
PER_JOB = 60
KILLS = 8
HANG_GUARD = 120

CHILD = """
import sys
from settlekit.client import Client, RetryPolicy
from settlekit.client.flusher import Flusher
from settlekit.client.spool import Spool
spool = Spool(sys.argv[1])
flusher = Flusher(spool, Client(sys.argv[2], sys.argv[3], retry=RetryPolicy(attempts=20, base_delay=0.01)),
                  batch_events=2)
print("ready", flush=True)
while spool.streams_to_send():
    report = flusher.flush()
    if report.blocked:
        print("blocked", report.blocked, flush=True)
        sys.exit(3)
print("drained", flush=True)
"""


def _run_child(args: list[str], kill_after: float | None) -> int:
    child = subprocess.Popen([sys.executable, "-c", CHILD, *args], stdout=subprocess.PIPE, text=True,
                             env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)})
    assert child.stdout is not None
    assert child.stdout.readline().strip() == "ready"
    if kill_after is not None:
        try:
            return child.wait(kill_after)
        except subprocess.TimeoutExpired:
            child.send_signal(signal.SIGKILL)
    return child.wait(HANG_GUARD)


def test_a_flusher_process_killed_at_random_moments(sqlite_url: str, tmp_path: Path) -> None:
    db = connect(sqlite_url)
    db.migrate()
    app = make_app(db)
    server = app.state.settlekit.appender.server_signer
    signer = Signer.generate()
    path = tmp_path / "robot.spool"
    rng = random.Random(20261203)
    try:
        with serve(app) as url:
            key = key_for(db, TENANT_A)
            admin = Client(url, key)
            spooled: dict[str, list[str]] = {}
            with Executor(Client(url, key), signer, actor_type="robot", actor_id=ROBOT, spool=str(path)) as robot:
                robot.register_key()
                for j in range(JOBS):
                    job_id = f"job_kill_{j}"
                    dispatched_job(admin, job_id, ROBOT)
                    for event_type, payload in start_events(job_id):
                        robot.append(job_id, event_type, payload)
                    beats = [heartbeat(job_id, ROBOT, n) for n in range(PER_JOB)]
                    spooled[job_id] = [r.event["id"] for r in robot.append_many(job_id, beats, wait=False)]
            args = [str(path), url, key]
            outcomes = [_run_child(args, rng.uniform(0.0, 0.1)) for _ in range(KILLS)]
            assert -signal.SIGKILL in outcomes  # at least one kill landed before the spool drained
            assert _run_child(args, None) == 0
            keys = {signer.key_id: signer.public_key_pem, server.key_id: server.public_key_pem}
            for job_id, ids in spooled.items():
                events = admin.export_job(job_id)
                verify_chain(events, keys)
                assert [e["id"] for e in events if e["type"] == "JOB_HEARTBEAT"] == ids
            admin.close()
    finally:
        db.close()
