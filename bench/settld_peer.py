"""settld 0.1.0's own API server as the peer of the HTTP bench (opt-in: SETTLEKIT_REFERENCE_DIR).

`node src/api/server.js` of the checkout, on its PostgreSQL store (`STORE=pg`, a database of its own that the
bench creates and drops; settld migrates it at start-up), authenticated by an ops token (`PROXY_OPS_TOKENS`),
no autotick (its outbox is processed by each write itself). The workload is the one settlekit gets, through
settld's own routes: each job's robot is registered with its public key and made available, the job created,
quoted, booked and dispatched (settld reserves a robot for it), then the robot's client-finalized EN_ROUTE, the
access plan (a server draft), the robot's ACCESS_GRANTED and JOB_EXECUTION_STARTED; in the timed window, the
robot's signed JOB_HEARTBEAT events, one per request, as for settlekit.

settld 0.1.0 on PostgreSQL books a job's ledger entry through an outbox message (LEDGER_ENTRY_APPLY) whose
processing reads a `payload_json` column of `snapshots`, where the column is `snapshot_json`: the message fails
and stays pending, and every later write of the process, which processes the outbox after committing, answers
500 though it is stored. The bench does not change settld's code: after each booking it marks those outbox rows
processed in settld's database (its data), and says so in its output.
"""

from __future__ import annotations

import os
import subprocess
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import httpx
import psycopg

from common import free_port, wait_ready
from loadgen import LoadRun
from settlekit.events.envelope import Event, Signer, finalize, key_id_for_public_pem, make_draft, verify_chain
from systems import EVENTS_PATH, System
from workload import JobWork, append_requests, iso_ms

OPS_TOKEN = "bench"
TENANT = "tenant_load"
PROTOCOL = "1.0"
ZONE = "zone_a"


class SettldSystem(System):
    name = "settld"
    scratch_prefix = "settld"
    default_rate = 100.0

    def __init__(self, postmaster: int | None, reference: Path):
        super().__init__(postmaster)
        self.reference = reference
        self.jobs: list[JobWork] = []
        self.keys: dict[str, str] = {}
        self.outbox_rows_marked = 0
        self.book_500s = 0

    @property
    def note(self) -> str:
        return (f"settld: {self.outbox_rows_marked} stuck LEDGER_ENTRY_APPLY outbox rows of its database were marked "
                f"processed after booking ({self.book_500s} bookings answered 500 though stored): settld 0.1.0's "
                "ledger outbox reads snapshots.payload_json, whose column is snapshot_json; its data was changed, "
                "not its code")

    @property
    def headers(self) -> dict[str, str]:
        return {"x-proxy-ops-token": OPS_TOKEN, "x-proxy-tenant-id": TENANT, "x-settld-protocol": PROTOCOL}

    def start(self) -> bool:
        self.port = free_port()
        log = Path(self.tmp) / "settld.log"
        env = {**os.environ, "STORE": "pg", "DATABASE_URL": self.url, "PORT": str(self.port),
               "PROXY_OPS_TOKENS": f"{OPS_TOKEN}:ops_read,ops_write,finance_read,finance_write,audit_read",
               "NODE_ENV": "development"}
        env.pop("PROXY_AUTOTICK", None)
        server = subprocess.Popen(["node", "src/api/server.js"], cwd=self.reference, env=env,
                                  stdout=log.open("ab"), stderr=subprocess.STDOUT)
        self.procs = [("API", server)]
        return wait_ready(f"http://{self.host}/healthz", server, log)

    def _mark_ledger_outbox_processed(self) -> None:
        with psycopg.connect(self.url, autocommit=True) as conn:
            cur = conn.execute("UPDATE outbox SET processed_at = now() WHERE topic = 'LEDGER_ENTRY_APPLY' "
                               "AND processed_at IS NULL")
            self.outbox_rows_marked += cur.rowcount

    def _server_key(self) -> None:
        """settld's own key (it signs its server drafts), for verifying the streams afterwards."""
        with psycopg.connect(self.url) as conn:
            row = conn.execute("SELECT public_key_pem FROM server_signer WHERE id = 1").fetchone()
        if row is not None:
            self.keys[key_id_for_public_pem(row[0])] = row[0]

    def _job(self, http: httpx.Client, round_no: int, index: int, now: datetime) -> JobWork:
        """One job through settld's routes, up to execution; its robot's heartbeats start a few seconds on."""
        robot = Signer.generate()
        robot_id = f"rob_r{round_no}_{index:03d}"

        def ok(resp: httpx.Response, what: str) -> dict[str, Any]:
            if resp.status_code != 201:
                raise RuntimeError(f"settld setup, {what}: HTTP {resp.status_code} {resp.text[:300]}")
            return dict(resp.json())

        reg = ok(http.post("/robots/register", json={"robotId": robot_id, "publicKeyPem": robot.public_key_pem,
                                                     "trustScore": 0.8, "homeZoneId": ZONE}), "robot")
        self.keys[robot.key_id] = robot.public_key_pem
        ok(http.post(f"/robots/{robot_id}/availability",
                     headers={"x-proxy-expected-prev-chain-hash": reg["robot"]["lastChainHash"]},
                     json={"availability": [{"startAt": iso_ms(now - timedelta(hours=1)),
                                             "endAt": iso_ms(now + timedelta(days=1))}]}), "availability")
        job = ok(http.post("/jobs", json={"templateId": "reset_lite", "constraints": {"zoneId": ZONE}}), "job")["job"]
        job_id = job["id"]
        start, end = now + timedelta(minutes=10), now + timedelta(minutes=70)
        window = {"startAt": iso_ms(start), "endAt": iso_ms(end), "environmentTier": "ENV_MANAGED_BUILDING"}
        quoted = ok(http.post(f"/jobs/{job_id}/quote", json=window,
                              headers={"x-proxy-expected-prev-chain-hash": job["lastChainHash"]}), "quote")
        booked = http.post(f"/jobs/{job_id}/book", json={"paymentHoldId": f"hold_{job_id}", **window},
                           headers={"x-proxy-expected-prev-chain-hash": quoted["job"]["lastChainHash"]})
        if booked.status_code == 500:
            self.book_500s += 1
        self._mark_ledger_outbox_processed()
        state = http.get(f"/jobs/{job_id}").json()["job"]
        if state["status"] != "BOOKED":
            raise RuntimeError(f"settld setup, booking: HTTP {booked.status_code}, job status {state['status']}")
        ok(http.post(f"/jobs/{job_id}/dispatch", json={},
                     headers={"x-proxy-expected-prev-chain-hash": state["lastChainHash"]}), "dispatch")
        state = http.get(f"/jobs/{job_id}").json()["job"]
        if state.get("reservation", {}).get("robotId") != robot_id:
            raise RuntimeError(f"settld setup: job {job_id} reserved {state.get('reservation')}, not {robot_id}")
        head = state["lastChainHash"]

        def robot_event(event_type: str, payload: Any, at: datetime) -> None:
            nonlocal head
            event = finalize(make_draft(stream_id=job_id, type=event_type, actor={"type": "robot", "id": robot_id},
                                        payload=payload, at=iso_ms(at)), head, robot)
            ok(http.post(f"/jobs/{job_id}/events", json=event), event_type)
            head = event["chainHash"]

        robot_event("EN_ROUTE", None, now)
        plan = {"jobId": job_id, "accessPlanId": f"ap_{index}", "method": "BUILDING_CONCIERGE",
                "credentialRef": f"vault://access/ap_{index}/v1", "scope": {"areas": ["LOBBY"], "noGo": []},
                "validFrom": iso_ms(now - timedelta(minutes=30)), "validTo": iso_ms(end), "revocable": True,
                "requestedBy": "ops"}
        issued = ok(http.post(f"/jobs/{job_id}/events", headers={"x-proxy-expected-prev-chain-hash": head},
                              json={"type": "ACCESS_PLAN_ISSUED", "actor": {"type": "ops", "id": "bench"},
                                    "payload": plan}), "access plan")
        head = issued["event"]["chainHash"]
        robot_event("ACCESS_GRANTED", {"jobId": job_id, "accessPlanId": f"ap_{index}",
                                       "method": "BUILDING_CONCIERGE"}, now + timedelta(seconds=1))
        started = now + timedelta(seconds=2)
        robot_event("JOB_EXECUTION_STARTED", {"jobId": job_id, "robotId": robot_id, "startedAt": iso_ms(started),
                                              "stage": "TASK"}, started)
        return JobWork(job_id, robot_id, robot, [], setup_head=head, first_at=now + timedelta(seconds=3))

    def prepare(self, round_no: int, clients: int, per_client: int) -> list[list[bytes]]:
        now = datetime.now(UTC).replace(microsecond=0)
        if not self.keys:
            self._server_key()
        with httpx.Client(base_url=f"http://{self.host}", headers=self.headers, timeout=60) as http:
            self.jobs = [self._job(http, round_no, i, now) for i in range(clients)]
        return [append_requests(self.host, EVENTS_PATH.removeprefix("/v1"), self.headers,
                                job.add_heartbeats(per_client)) for job in self.jobs]

    def verify(self, run: LoadRun) -> tuple[str, int]:
        missing = extra = broken = 0
        with httpx.Client(base_url=f"http://{self.host}", headers=self.headers, timeout=60) as http:
            for job, acked in zip(self.jobs, run.acked, strict=True):
                stored: list[Event] = http.get(f"/jobs/{job.job_id}/events").json()["events"]
                setup = len(stored) - sum(1 for e in stored if e["type"] == "JOB_HEARTBEAT")
                got = {e["chainHash"] for e in stored[setup:]}
                missing += sum(1 for e in job.heartbeats[:acked] if e["chainHash"] not in got)
                extra += max(0, len(stored) - setup - acked)
                try:
                    verify_chain(stored, self.keys)
                except Exception:  # noqa: BLE001 - reported as a count
                    broken += 1
        line = (f"acknowledged events {sum(run.acked)}: not stored {missing}; stored beyond the acknowledged "
                f"{extra}; jobs {len(self.jobs)}, streams that do not verify {broken}")
        return line, missing + broken

    def log_tail(self) -> str:
        path = Path(self.tmp) / "settld.log"
        if not path.exists():
            return ""
        lines = [line for line in path.read_text(errors="replace").splitlines() if '"level":"info"' not in line]
        return "\n".join(f"  settld.log: {line[:300]}" for line in lines[-10:])
