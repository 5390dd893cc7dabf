"""The HTTP bench's workload: simulated jobs brought to execution, then robot-signed JOB_HEARTBEAT events, all
finalized (hashed, chained and signed) before the timed window.

A job's setup events are the `settle_completed` scenario up to its first heartbeat (created, quoted, booked,
matched, reserved, access plan, en route, access granted, execution started); its heartbeats chain on them, each
signed by the job's robot, `payload.t` equal to `at` (10 ms apart) and `progress` the heartbeat's index.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

from loadgen import http_request
from settlekit.events.envelope import Event, Signer, finalize, make_draft
from settlekit.simulate import Fleet, job_stream

SCENARIO = "settle_completed"
FIRST_HEARTBEAT_AT = datetime(2026, 1, 5, 10, 1, 30, tzinfo=UTC)
HEARTBEAT_STEP = timedelta(milliseconds=10)


def iso_ms(at: datetime) -> str:
    return at.strftime("%Y-%m-%dT%H:%M:%S.") + f"{at.microsecond // 1000:03d}Z"


@dataclass
class JobWork:
    """One job of the workload: its setup events and the heartbeats prepared for it so far."""

    job_id: str
    robot_id: str
    signer: Signer
    setup: list[Event]
    heartbeats: list[Event] = field(default_factory=list)
    setup_head: str | None = None  # the stream's head after a setup made by the server itself (`setup` empty)
    first_at: datetime = FIRST_HEARTBEAT_AT

    @property
    def head(self) -> str:
        if self.heartbeats:
            return str(self.heartbeats[-1]["chainHash"])
        return self.setup_head or str(self.setup[-1]["chainHash"])

    def add_heartbeats(self, count: int) -> list[Event]:
        """`count` more heartbeats chained on the last one prepared."""
        prev = self.head
        made = []
        for n in range(len(self.heartbeats), len(self.heartbeats) + count):
            at = iso_ms(self.first_at + n * HEARTBEAT_STEP)
            draft = make_draft(stream_id=self.job_id, type="JOB_HEARTBEAT",
                               actor={"type": "robot", "id": self.robot_id},
                               payload={"jobId": self.job_id, "robotId": self.robot_id, "t": at, "stage": "TASK",
                                        "progress": n},
                               at=at, id=f"evt_{self.job_id[4:]}_hb_{n:06d}")
            event = finalize(draft, prev, self.signer)
            prev = event["chainHash"]
            made.append(event)
        self.heartbeats.extend(made)
        return made


def new_job(fleet: Fleet, job_id: str, index: int, tenant_id: str | None, server: Signer | None = None) -> JobWork:
    """A job of the scenario up to its first heartbeat; `server`: the key that signs the server's events (the
    fleet's own by default)."""
    if server is not None:
        fleet = Fleet(server=server, robots=fleet.robots, operators=fleet.operators)
    events = job_stream(SCENARIO, job_id, fleet, index, tenant_id=tenant_id)
    cut = next(i for i, e in enumerate(events) if e["type"] == "JOB_HEARTBEAT")
    robot_id = sorted(fleet.robots)[index % len(fleet.robots)]
    return JobWork(job_id, robot_id, fleet.robots[robot_id], events[:cut])


def body(events: Event | Sequence[Event]) -> bytes:
    return json.dumps(events, separators=(",", ":"), ensure_ascii=False).encode("utf-8")


def append_requests(host: str, path_of: str, headers: Mapping[str, str], batches: Sequence[Any]) -> list[bytes]:
    """The raw requests appending each of `batches` (an event or a list of events) to `path_of` (a path, with
    `{job}` for the job id of the batch)."""
    out = []
    for batch in batches:
        first = batch[0] if isinstance(batch, list) else batch
        out.append(http_request("POST", path_of.format(job=first["streamId"]), host,
                                {"content-type": "application/json", **headers}, body(batch)))
    return out
