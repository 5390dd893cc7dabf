"""The HTTP bench's load generator (bench/loadgen.py) against the API over loopback, on both backends: what it
counts, where a client stops, and that every acknowledged event is stored; its answer parsing and its /proc
CPU accounting. Seconds, not minutes: a few clients with a few prepared requests each."""

from __future__ import annotations

import asyncio
import contextlib
import os
import sys
import threading
import time
from pathlib import Path
from typing import Any

import httpx

from settlekit.events.envelope import verify_chain
from settlekit.simulate import Fleet
from settlekit.store.db import Database
from support.api import TENANT_A, key_for, make_app
from support.http_server import serve

sys.path.append(str(Path(__file__).resolve().parents[2] / "bench"))

import loadgen  # noqa: E402
from workload import JobWork, append_requests, new_job  # noqa: E402

PATH = "/v1/jobs/{job}/events"


def _jobs(base: str, headers: dict[str, str], count: int) -> tuple[list[JobWork], dict[str, str]]:
    """`count` jobs of the bench's workload set up through the API, their fleet's keys registered."""
    fleet = Fleet.create(robots=2, operators=1)
    with httpx.Client(base_url=base, headers=headers, timeout=30) as http:
        for key in fleet.registrations():
            body = {k: key[k] for k in ("publicKeyPem", "purpose")}
            if "entityId" in key:
                body["entityId"] = key["entityId"]
            http.post("/v1/keys", json=body).raise_for_status()
        jobs = [new_job(fleet, f"job_lg_{i}", i, TENANT_A) for i in range(count)]
        for job in jobs:
            http.post(f"/v1/jobs/{job.job_id}/events", json=job.setup).raise_for_status()
    return jobs, fleet.public_keys()


def test_the_generator_loads_the_api_and_every_acknowledged_event_is_stored(db: Database) -> None:
    headers = {"authorization": f"Bearer {key_for(db, TENANT_A)}"}
    with serve(make_app(db)) as base:
        jobs, keys = _jobs(base, headers, 4)
        host = base.removeprefix("http://")
        work = [append_requests(host, PATH, headers, job.add_heartbeats(10)) for job in jobs]
        # the last client skips its 6th heartbeat: its 6th request no longer chains on the head (409), and it stops
        work[3] = work[3][:5] + work[3][6:]
        run = loadgen.run_load("127.0.0.1", int(host.rsplit(":", 1)[1]), work, 60)
        assert run.acked == [10, 10, 10, 5]
        assert run.statuses == {201: 35, 409: 1} and run.requests == 36 and run.errors == 1
        assert run.exhausted == 3 and run.connection_errors == 0 and "HTTP 409" in run.first_error
        assert run.generator_cpu > 0 and run.elapsed > 0 and run.quantile_ms(99) >= run.quantile_ms(50) > 0
        with httpx.Client(base_url=base, headers=headers) as http:
            for job, acked in zip(jobs, run.acked, strict=True):
                stored = http.get(f"/v1/jobs/{job.job_id}/export").json()
                assert [e["chainHash"] for e in stored] == [e["chainHash"] for e in
                                                            job.setup + job.heartbeats[:acked]]
                verify_chain(stored, keys)


def test_the_deadline_stops_the_clients() -> None:
    async def answer(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        with contextlib.suppress(asyncio.IncompleteReadError, ConnectionError):
            while await reader.readuntil(b"\r\n\r\n"):
                await asyncio.sleep(0.05)
                writer.write(b"HTTP/1.1 201 Created\r\ncontent-length: 2\r\n\r\n{}")
        writer.close()

    port: list[int] = []
    stop = asyncio.Event()

    async def server() -> None:
        srv = await asyncio.start_server(answer, "127.0.0.1", 0)
        port.append(srv.sockets[0].getsockname()[1])
        async with srv:
            await stop.wait()

    loop = asyncio.new_event_loop()
    thread = threading.Thread(target=loop.run_until_complete, args=(server(),), daemon=True)
    thread.start()
    deadline = time.monotonic() + 10
    while not port:
        assert time.monotonic() < deadline
        time.sleep(0.01)
    request = loadgen.http_request("GET", "/", "x", {})
    started = time.monotonic()
    run = loadgen.run_load("127.0.0.1", port[0], [[request] * 1000] * 3, 0.3)
    loop.call_soon_threadsafe(stop.set)
    thread.join(10)
    assert time.monotonic() - started < 5
    assert run.exhausted == 0 and run.errors == 0 and 3 <= run.requests < 100
    assert all(n > 0 for n in run.acked) and sum(run.acked) == run.requests


def _answer(data: bytes) -> tuple[int, bytes, bool]:
    async def parse() -> tuple[int, bytes, bool]:
        reader = asyncio.StreamReader()
        reader.feed_data(data)
        reader.feed_eof()
        return await loadgen._read_answer(reader)

    return asyncio.run(parse())


def test_answers_are_read_whole() -> None:
    assert _answer(b"HTTP/1.1 201 Created\r\nContent-Length: 5\r\n\r\nhello") == (201, b"hello", True)
    chunked = b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n2;x=y\r\nde\r\n0\r\n\r\n"
    assert _answer(chunked) == (200, b"abcde", True)
    assert _answer(b"HTTP/1.1 409 Conflict\r\nConnection: close\r\nContent-Length: 0\r\n\r\n") == (409, b"", False)
    request = loadgen.http_request("POST", "/p", "h:1", {"a": "b"}, b"{}")
    assert request == b"POST /p HTTP/1.1\r\nhost: h:1\r\na: b\r\ncontent-length: 2\r\n\r\n{}"


def test_cpu_of_a_process_tree_and_of_one_database() -> None:
    before = loadgen.tree_cpu_seconds(os.getpid())
    meter = loadgen.CpuMeter(loadgen.trees({"me": [os.getpid()]}))
    meter.start()
    end = time.process_time() + 0.1
    while time.process_time() < end:
        pass
    assert meter.read()["me"] > 0.05 and loadgen.tree_cpu_seconds(os.getpid()) > before
    counted: dict[str, Any] = {
        "postgres: 15/main: postgres sk_bench_http_1 127.0.0.1(5000) idle": True,
        "postgres: 15/main: postgres other_db 127.0.0.1(5001) idle": False,
        "postgres: 15/main: walwriter": True,
        "postgres: checkpointer": True,
        "postgres: autovacuum worker sk_bench_http_1": True,
        "postgres: postgres sk_bench_http_12 [local] idle": False,
    }
    for cmdline, expected in counted.items():
        assert loadgen.counts_for_database(cmdline, "sk_bench_http_1") is expected, cmdline
