"""`settlekit spool status|flush|export|discard` on a robot's spool file, against the API over loopback: status
shows each stream pending, sent or blocked with the API's reason; flush sends the pending ones and exits 1 while
a stream is blocked; export gives every event as a JSON line; discard unblocks the stream."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest
from typer.testing import CliRunner

from settlekit.cli import app
from settlekit.client import Client
from settlekit.client.executor import Executor
from settlekit.events.envelope import Signer
from settlekit.store.db import Database
from support.api import TENANT_A, key_for, make_app
from support.http_server import serve
from support.sdk import BACK_OFFICE, dispatched_job, heartbeat, start_events

ROBOT = "rob_1"


def _json_lines(text: str) -> list[dict]:
    return [json.loads(line) for line in text.splitlines() if line.strip()]


@pytest.fixture
def robot_spool(db: Database, tmp_path: Path) -> Iterator[tuple[Path, str, str]]:
    """A robot's spool with three heartbeats waiting on each of two jobs, one of which the back office appended
    to meanwhile; yields (spool file, API URL, API key) while the API runs."""
    path = tmp_path / "robot.spool"
    with serve(make_app(db)) as url:
        key = key_for(db, TENANT_A)
        with Client(url, key) as admin, Executor(Client(url, key), Signer.generate(), actor_type="robot",
                                                 actor_id=ROBOT, spool=str(path)) as robot:
            robot.register_key()
            for job_id in ("job_ok", "job_moved"):
                dispatched_job(admin, job_id, ROBOT)
                for event_type, payload in start_events(job_id):
                    robot.append(job_id, event_type, payload)
                robot.append_many(job_id, [heartbeat(job_id, ROBOT, n) for n in range(3)], wait=False)
            head = admin.get_job("job_moved")["headChainHash"]
            admin.append_events("job_moved", {"type": "INCIDENT_REPORTED", "actor": BACK_OFFICE, "payload": {
                "incidentId": "inc_1", "type": "DAMAGE_PROPERTY", "severity": 2, "summary": "x",
                "reportedBy": "ops"}}, expected_prev_chain_hash=head)
        yield path, url, key


def test_spool_commands(robot_spool: tuple[Path, str, str], tmp_path: Path) -> None:
    path, url, key = robot_spool
    runner = CliRunner()
    common = ["--spool", str(path)]
    remote = [*common, "--url", url, "--api-key", key]

    status = runner.invoke(app, ["spool", "status", *common, "--json"])
    assert status.exit_code == 0, status.output
    assert {s["streamId"]: (s["state"], s["pending"], s["sent"]) for s in json.loads(status.stdout)["streams"]} \
        == {"job_ok": ("pending", 3, 3), "job_moved": ("pending", 3, 3)}

    flushed = runner.invoke(app, ["spool", "flush", *remote, "--json"])
    assert flushed.exit_code == 1, flushed.output
    report = json.loads(flushed.stdout)
    assert report["sent"] == {"job_ok": 3} and "PREV_CHAIN_HASH_MISMATCH" in report["blocked"]["job_moved"]

    text = runner.invoke(app, ["spool", "status", *common])
    moved = next(line for line in text.stdout.splitlines() if line.startswith("job_moved"))
    assert "blocked" in moved and "PREV_CHAIN_HASH_MISMATCH" in moved

    rows = _json_lines(runner.invoke(app, ["spool", "export", *common]).stdout)
    assert len(rows) == 12 and [r["seq"] for r in rows] == sorted(r["seq"] for r in rows)
    assert {(r["streamId"], r["state"]) for r in rows if r["event"]["type"] == "JOB_HEARTBEAT"} == \
        {("job_ok", "sent"), ("job_moved", "pending")}
    out = tmp_path / "moved.jsonl"
    only = runner.invoke(app, ["spool", "export", *common, "--stream", "job_moved", "--out", str(out)])
    assert only.exit_code == 0 and len(_json_lines(out.read_text())) == 6

    discarded = runner.invoke(app, ["spool", "discard", *remote, "job_moved"])
    assert discarded.exit_code == 0 and "discarded 3" in discarded.stdout, discarded.output
    again = runner.invoke(app, ["spool", "flush", *remote, "--json"])
    assert again.exit_code == 0 and json.loads(again.stdout)["blocked"] == {}

    kept = runner.invoke(app, ["spool", "prune", *common, "--json"])
    assert kept.exit_code == 0 and json.loads(kept.stdout) == {"pruned": 0}  # all sent within the week
    pruned = runner.invoke(app, ["spool", "prune", *common, "--keep-days", "0", "--json"])
    assert json.loads(pruned.stdout) == {"pruned": 9}  # 6 on job_ok, 3 on job_moved; the 3 discarded stay
    assert [r["state"] for r in _json_lines(runner.invoke(app, ["spool", "export", *common]).stdout)] == \
        ["discarded"] * 3


def test_a_missing_spool_file_is_one_error_line(tmp_path: Path) -> None:
    missing = CliRunner().invoke(app, ["spool", "status", "--spool", str(tmp_path / "nope")])
    assert missing.exit_code == 1 and missing.stderr.startswith("error SPOOL_INVALID: no spool file at")
    assert not (tmp_path / "nope").exists()
