"""10,000 events spooled by a robot while the API is down (20 jobs, 500 heartbeats each), then flushed through
lost answers and 503s: every event is in its stream exactly once, in spool order, the chains and signatures
verify, and the spool counts them all as sent. On both backends."""

from __future__ import annotations

from pathlib import Path

import httpx

from settlekit.client import Client, RetryPolicy
from settlekit.client.executor import Executor
from settlekit.events.envelope import Signer, verify_chain
from settlekit.store.db import Database
from support.api import TENANT_A, key_for, make_app
from support.http_server import FaultyTransport, is_append, serve
from support.sdk import dispatched_job, heartbeat, start_events

JOBS = 20
PER_JOB = 500
CHUNK = 25
ROBOT = "rob_1"


def test_ten_thousand_spooled_events_flushed_once_each(db: Database, tmp_path: Path) -> None:
    app = make_app(db)
    server = app.state.settlekit.appender.server_signer
    signer = Signer.generate()
    with serve(app) as url:
        key = key_for(db, TENANT_A)
        transport = FaultyTransport()
        api = Client(url, key, http=httpx.Client(base_url=url, transport=transport),
                     retry=RetryPolicy(attempts=8, base_delay=0.001), sleep=lambda s: None)
        admin = Client(url, key)
        with Executor(api, signer, actor_type="robot", actor_id=ROBOT, spool=str(tmp_path / "spool.db")) as robot:
            robot.register_key()
            jobs = [f"job_v{n:02d}" for n in range(JOBS)]
            for job_id in jobs:
                dispatched_job(admin, job_id, ROBOT)
                for event_type, payload in start_events(job_id):
                    robot.append(job_id, event_type, payload)
            transport.down()
            spooled: dict[str, list[str]] = {job_id: [] for job_id in jobs}
            for start in range(0, PER_JOB, CHUNK):  # the robot spools its telemetry a few seconds at a time
                for job_id in jobs:
                    beats = [heartbeat(job_id, ROBOT, n) for n in range(start, start + CHUNK)]
                    receipts = robot.append_many(job_id, beats, wait=False)
                    spooled[job_id] += [r.event["id"] for r in receipts]
            transport.up()
            transport.plan("drop", "unavailable", "drop", "drop", "unavailable", when=is_append)
            report = robot.flush()
            assert report.error is None and not report.blocked and report.total_sent == JOBS * PER_JOB
            status = robot.spool.status()
        keys = {signer.key_id: signer.public_key_pem, server.key_id: server.public_key_pem}
        total = 0
        for job_id in jobs:
            events = admin.export_job(job_id)
            verify_chain(events, keys)
            beats = [e["id"] for e in events if e["type"] == "JOB_HEARTBEAT"]
            assert beats == spooled[job_id]
            total += len(beats)
        admin.close()
        api.close()
    assert total == JOBS * PER_JOB
    assert sum(s.pending for s in status) == 0 and sum(s.sent for s in status) == JOBS * (PER_JOB + 3)
