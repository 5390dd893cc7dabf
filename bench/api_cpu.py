"""Where the API process's CPU per append goes: the ASGI application driven in this process, without sockets or
HTTP parsing, by concurrent clients appending robot-signed JOB_HEARTBEAT events (the HTTP load test's workload),
on a scratch PostgreSQL database. Prints the CPU per append of each thread of the process (the event loop, the
authentication threads, the group commit writer), PostgreSQL's CPU per append for the same window and, with
`--profile`, the event loop thread's functions by their own CPU time (cProfile on the thread's CPU clock).

What http_load.py measures from outside (every process, sockets included) this splits by thread and function; it
is not one of `make bench`'s anchored figures, but the place to look before and after a CPU cut.

Run: python bench/api_cpu.py [--clients 50] [--appends 40] [--profile]
"""

from __future__ import annotations

import argparse
import asyncio
import cProfile
import os
import pstats
import re
import sys
import threading
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from common import scratch_pg  # noqa: E402
from loadgen import postgres_cpu_seconds, postmaster_pid  # noqa: E402
from settlekit.api.app import create_app  # noqa: E402
from settlekit.api.auth import create_api_key  # noqa: E402
from settlekit.append import job_appender  # noqa: E402
from settlekit.events.envelope import Signer  # noqa: E402
from settlekit.runtime.settings import Settings  # noqa: E402
from settlekit.simulate import Fleet  # noqa: E402
from settlekit.store.db import connect  # noqa: E402
from workload import body, new_job  # noqa: E402

TENANT = "tenant_bench"
ASGIApp = Callable[[dict[str, Any], Callable[[], Awaitable[Any]], Callable[[Any], Awaitable[None]]], Awaitable[None]]


def thread_cpu() -> dict[int, tuple[float, float]]:
    """CPU seconds (user, system) of each thread of this process, by native thread id."""
    ticks = os.sysconf("SC_CLK_TCK")
    out = {}
    for tid in os.listdir("/proc/self/task"):
        try:
            stat = Path(f"/proc/self/task/{tid}/stat").read_text()
        except OSError:
            continue  # the thread ended
        fields = stat.rsplit(")", 1)[1].split()
        out[int(tid)] = (int(fields[11]) / ticks, int(fields[12]) / ticks)
    return out


def thread_kind(native_id: int) -> str:
    """A thread's Python name without its number ("MainThread" runs the event loop)."""
    for thread in threading.enumerate():
        if thread.native_id == native_id:
            return re.sub(r"[_-]?\d+$", "", thread.name.split(" ")[0]) or thread.name
    return "(ended or not Python's)"


async def lifespan(app: Any, queue: asyncio.Queue[dict[str, Any]]) -> asyncio.Task[None]:
    """Start the application's lifespan; `queue` takes its shutdown message later."""
    started: asyncio.Queue[dict[str, Any]] = asyncio.Queue()

    async def send(message: Any) -> None:
        await started.put(message)

    await queue.put({"type": "lifespan.startup"})
    task = asyncio.create_task(app({"type": "lifespan", "asgi": {"version": "3.0"}, "state": {}}, queue.get, send))
    message = await started.get()
    if message["type"] != "lifespan.startup.complete":
        raise RuntimeError(f"the application did not start: {message}")
    return task


async def post(app: ASGIApp, path: str, headers: list[tuple[bytes, bytes]], data: bytes) -> int:
    """One POST through the application; its status."""
    sent = False
    status = 0

    async def receive() -> dict[str, Any]:
        nonlocal sent
        if not sent:
            sent = True
            return {"type": "http.request", "body": data, "more_body": False}
        await asyncio.Event().wait()  # the client stays connected
        raise AssertionError("unreachable")

    async def send(message: Any) -> None:
        nonlocal status
        if message["type"] == "http.response.start":
            status = message["status"]

    scope = {"type": "http", "asgi": {"version": "3.0"}, "http_version": "1.1", "method": "POST", "scheme": "http",
             "path": path, "raw_path": path.encode(), "query_string": b"", "root_path": "",
             "headers": [(b"host", b"127.0.0.1"), (b"content-type", b"application/json"),
                         (b"content-length", str(len(data)).encode()), *headers],
             "client": ("127.0.0.1", 50000), "server": ("127.0.0.1", 8000), "state": {}}
    await app(scope, receive, send)
    return status


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--clients", type=int, default=50)
    parser.add_argument("--appends", type=int, default=40, help="timed appends per client (after a warm-up)")
    parser.add_argument("--profile", action="store_true")
    args = parser.parse_args()
    with scratch_pg("apicpu") as url:
        db = connect(url, max_size=10)
        db.migrate()
        _, api_key = create_api_key(db, TENANT, ["admin"])
        fleet = Fleet.create(robots=8, operators=4)
        appender = job_appender(db)
        for key in fleet.registrations():
            appender.signer_keys.register(TENANT, key["publicKeyPem"], key["purpose"], entity_id=key.get("entityId"))
        jobs = [new_job(fleet, f"job_{i:03d}", i, TENANT) for i in range(args.clients)]
        for job in jobs:
            appender.append(TENANT, job.job_id, job.setup)
        warm_up = max(5, args.appends // 4)
        requests = [[body(e) for e in job.add_heartbeats(warm_up + args.appends)] for job in jobs]
        app = create_app(db, Settings(rate_limit_per_second=1e9, rate_limit_burst=1e9), server_signer=Signer.generate())
        headers = [(b"authorization", f"Bearer {api_key}".encode())]
        with db.read() as tx:
            data_directory = tx.scalar("SHOW data_directory")
        postmaster = postmaster_pid(str(data_directory))
        database = url.rsplit("/", 1)[-1]

        def database_cpu() -> float | None:
            return None if postmaster is None else postgres_cpu_seconds(postmaster, database)

        asyncio.run(_run(app, jobs, requests, headers, warm_up, args, database_cpu))
        db.close()


async def _run(app: ASGIApp, jobs: list[Any], requests: list[list[bytes]], headers: list[tuple[bytes, bytes]],
               warm_up: int, args: argparse.Namespace, database_cpu: Callable[[], float | None]) -> None:
    queue: asyncio.Queue[dict[str, Any]] = asyncio.Queue()
    task = await lifespan(app, queue)

    async def client(i: int, part: list[bytes]) -> None:
        for data in part:
            status = await post(app, f"/v1/jobs/{jobs[i].job_id}/events", headers, data)
            if status not in (200, 201):
                raise RuntimeError(f"append answered {status}")

    await asyncio.gather(*(client(i, r[:warm_up]) for i, r in enumerate(requests)))
    profile = cProfile.Profile(time.thread_time) if args.profile else None
    before, cpu0, wall0, pg0 = thread_cpu(), time.process_time(), time.perf_counter(), database_cpu()
    if profile is not None:
        profile.enable()
    await asyncio.gather(*(client(i, r[warm_up:]) for i, r in enumerate(requests)))
    if profile is not None:
        profile.disable()
    cpu1, wall1, after, pg1 = time.process_time(), time.perf_counter(), thread_cpu(), database_cpu()
    n = len(jobs) * args.appends
    print(f"{n:,} appends by {len(jobs)} clients: {(cpu1 - cpu0) / n * 1e3:.3f} ms of CPU per append in the process"
          f"{' (under cProfile)' if profile else ''}, {n / (wall1 - wall0):,.0f} appends/s")
    by_name: dict[str, list[tuple[float, float]]] = {}
    for native_id, (user, system) in after.items():
        user0, system0 = before.get(native_id, (0.0, 0.0))
        by_name.setdefault(thread_kind(native_id), []).append((user - user0, system - system0))
    for name, spent in sorted(by_name.items(), key=lambda item: -sum(u + s for u, s in item[1])):
        user, system = sum(u for u, _ in spent) / n * 1e3, sum(s for _, s in spent) / n * 1e3
        if user + system >= 0.005:
            print(f"  {name} ({len(spent)} thread{'s' if len(spent) > 1 else ''}): {user + system:.3f} ms"
                  f" (user {user:.3f}, system {system:.3f})")
    if pg0 is not None and pg1 is not None:
        print(f"  PostgreSQL (this database's backends, the cluster's background processes): "
              f"{(pg1 - pg0) / n * 1e3:.3f} ms")
    if profile is not None:
        print("\nthe event loop thread's functions by own CPU time:")
        pstats.Stats(profile).sort_stats("tottime").print_stats(25)
    await queue.put({"type": "lifespan.shutdown"})
    await task


if __name__ == "__main__":
    main()
