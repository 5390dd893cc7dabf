"""The framework ceiling: the anchor of the HTTP API's load figures (issue 13).

A minimal FastAPI app in one uvicorn process (the same server settings as `settlekit serve`: asyncio loop, no
access log) whose one route, `POST /v1/jobs/{job_id}/events`, inserts the request body as one row through a
psycopg connection pool into a table of a scratch PostgreSQL database. No authentication, validation, hashing or
signatures: what is left is the framework, the driver and one database round trip per request. The route reads
the body on the event loop and runs the insert on a worker thread with the blocking pool: measured here, that
serves about 1.5x the requests/s of the same insert through psycopg's AsyncConnectionPool, so it is the ceiling. It is
loaded by the same generator with the same parameters as load.py (`common.run_job_load`: LOAD_CLIENTS clients,
LOAD_SECONDS s, signed job events), so the two figures compare. load.py runs this measurement first and reports
its own figures as a ratio of it; run standalone, this prints the ceiling alone. Only 127.0.0.1 is contacted.
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import psycopg
from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse
from psycopg_pool import ConnectionPool
from starlette.concurrency import run_in_threadpool

sys.path.insert(0, str(Path(__file__).resolve().parent))

from common import CpuSampler, LoadResult, free_port, run_job_load, scratch_pg, stop_process, wait_ready  # noqa: E402
from settlekit.simulate import Fleet  # noqa: E402

DB_ENV = "CEILING_DB"
POOL_SIZE = 16  # as settlekit's PostgreSQL pool


def create_app() -> Any:
    """The ceiling app (uvicorn --factory); the database URL comes from CEILING_DB."""
    pool = ConnectionPool(os.environ[DB_ENV], min_size=POOL_SIZE, max_size=POOL_SIZE, open=False,
                          kwargs={"autocommit": True})

    def insert(job_id: str, body: bytes) -> int:
        with pool.connection() as conn:
            row = conn.execute("INSERT INTO events (job_id, body) VALUES (%s, %s::jsonb) RETURNING position",
                               (job_id, body.decode("utf-8"))).fetchone()
        assert row is not None
        return int(row[0])

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> Any:
        pool.open(wait=True)
        yield
        pool.close()

    app = FastAPI(lifespan=lifespan)

    @app.get("/readyz")
    async def readyz() -> dict[str, str]:
        return {"status": "ready"}

    @app.post("/v1/jobs/{job_id}/events", status_code=201)
    async def append(job_id: str, request: Request) -> JSONResponse:
        position = await run_in_threadpool(insert, job_id, await request.body())
        return JSONResponse({"jobId": job_id, "position": position}, status_code=201)

    return app


def measure() -> LoadResult | None:
    """Serve the ceiling app on a scratch database, load it, print its figures; None if it did not start."""
    here = Path(__file__).resolve().parent
    with scratch_pg("ceiling") as url, tempfile.TemporaryDirectory() as tmp:
        with psycopg.connect(url, autocommit=True) as conn:
            conn.execute("CREATE TABLE events (position BIGSERIAL PRIMARY KEY, job_id TEXT NOT NULL,"
                         " body JSONB NOT NULL)")
        port = free_port()
        log = Path(tmp) / "ceiling.log"
        server = subprocess.Popen(
            [sys.executable, "-m", "uvicorn", "--factory", "ceiling:create_app", "--app-dir", str(here),
             "--host", "127.0.0.1", "--port", str(port), "--no-access-log", "--log-level", "warning"],
            env={**os.environ, DB_ENV: url}, stdout=log.open("wb"), stderr=subprocess.STDOUT)
        base = f"http://127.0.0.1:{port}"
        try:
            if not wait_ready(f"{base}/readyz", server, log):
                return None
            sampler = CpuSampler({server.pid: "ceiling app"}, lambda: [server.pid])
            result = run_job_load(base, {}, Fleet.create(robots=8, operators=4))
            cpu = sampler.report(len(result.latencies))
        finally:
            stop_process("ceiling server", server)
        with psycopg.connect(url) as conn:
            stored = conn.execute("SELECT count(*) FROM events").fetchone()
        result.print("framework ceiling (FastAPI + uvicorn + psycopg pool, one insert per request)")
        print(cpu, flush=True)
        ok = result.statuses.get(201, 0)
        if stored is None or stored[0] != ok:
            print(f"ceiling rows stored: {stored[0] if stored else None}, 201 answers: {ok}")
        return result


def main() -> int:
    return 0 if measure() is not None else 1


if __name__ == "__main__":
    sys.exit(main())
