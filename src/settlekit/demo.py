"""`settlekit demo`: simulate job streams end to end on embedded SQLite and verify them offline.

This is the demo of what exists so far: the event store (server-draft appends signed by the server key, robot
events signed client-side with the robot's own key), export, and offline verification of every stream.
"""

from __future__ import annotations

import random
import tempfile
import time
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.progress import Progress
from rich.table import Table

from settlekit.errors import VerificationError
from settlekit.events.envelope import Signer, finalize_chain, make_draft, verify_chain
from settlekit.store.db import connect
from settlekit.store.event_store import EventStore

TENANT = "tenant_default"
SERVER = {"type": "system", "id": "proxy"}


def _job_script(job_id: str, rng: random.Random) -> list[tuple[str, str, dict[str, Any]]]:
    """(actor kind, type, payload) for one job's lifecycle."""
    steps: list[tuple[str, str, dict[str, Any]]] = [
        ("server", "JOB_CREATED", {"templateId": "reset_lite", "constraints": {"zoneId": "zone_a"},
                                   "tenantId": TENANT}),
        ("server", "QUOTE_PROPOSED", {"amountCents": rng.choice([4500, 6500, 9900]), "currency": "USD"}),
        ("server", "BOOKED", {"paymentHoldId": f"hold_{job_id}"}),
        ("robot", "EXECUTION_STARTED", {"robotId": "rob_demo"}),
    ]
    steps += [("robot", "JOB_HEARTBEAT", {"t": i, "progress": i / 5}) for i in range(rng.randint(1, 5))]
    steps.append(("robot", rng.choice(["EXECUTION_COMPLETED", "EXECUTION_COMPLETED", "EXECUTION_ABORTED"]), {}))
    return steps


def run_demo(*, jobs: int = 20, db_url: str | None = None, seed: int = 7) -> int:
    console = Console()
    rng = random.Random(seed)
    tmp = None
    if db_url is None:
        tmp = tempfile.TemporaryDirectory(prefix="settlekit-demo-")
        db_url = f"sqlite:///{Path(tmp.name) / 'demo.db'}"
    console.print(f"[bold]settlekit demo[/bold] on {db_url}")
    console.print("Runs what exists today: hash-chained, signed job streams appended to the store, "
                  "exported and verified offline.")
    started = time.perf_counter()
    database = connect(db_url)
    try:
        database.migrate()
        server = Signer.generate()
        robot = Signer.generate()
        store = EventStore(database, server_signer=server)
        store.register_key(TENANT, server.public_key_pem, "server")
        store.register_key(TENANT, robot.public_key_pem, "robot", entity_id="rob_demo")
        keys = {server.key_id: server.public_key_pem, robot.key_id: robot.public_key_pem}
        outcomes: dict[str, int] = {}
        total_events = 0
        with Progress(console=console) as progress:
            task = progress.add_task("simulating jobs", total=jobs)
            for n in range(jobs):
                job_id = f"job_demo_{n:04d}"
                head: str | None = None
                for kind, etype, payload in _job_script(job_id, rng):
                    if kind == "server":
                        result = store.append(TENANT, job_id, [{"type": etype, "actor": SERVER, "payload": payload}],
                                              expected_prev_chain_hash=head)
                    else:
                        draft = make_draft(stream_id=job_id, type=etype, actor={"type": "robot", "id": "rob_demo"},
                                           payload=payload)
                        result = store.append(TENANT, job_id, finalize_chain([draft], head, robot))
                    head = result.head_chain_hash
                    total_events += 1
                last = store.read_stream(TENANT, job_id)[-1]["type"]
                outcome = "completed" if last == "EXECUTION_COMPLETED" else "aborted"
                outcomes[outcome] = outcomes.get(outcome, 0) + 1
                progress.advance(task)
        failures = 0
        for n in range(jobs):
            try:
                verify_chain(store.read_stream(TENANT, f"job_demo_{n:04d}"), keys)
            except VerificationError as exc:
                failures += 1
                console.print(f"[red]verification failed[/red] job_demo_{n:04d}: {exc}")
        elapsed = time.perf_counter() - started
        table = Table(title="settlekit demo summary")
        table.add_column("what")
        table.add_column("value", justify="right")
        table.add_row("jobs", str(jobs))
        for name in ("completed", "aborted"):
            table.add_row(f"jobs {name}", str(outcomes.get(name, 0)))
        table.add_row("events appended", str(total_events))
        table.add_row("streams verified offline", f"{jobs - failures}/{jobs}")
        table.add_row("wall time", f"{elapsed:.2f} s")
        table.add_row("events/s", f"{total_events / elapsed:.0f}")
        console.print(table)
        return 0 if failures == 0 else 1
    finally:
        database.close()
        if tmp is not None:
            tmp.cleanup()
