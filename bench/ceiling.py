"""The framework ceiling: the anchor of the HTTP API's load figures.

A minimal FastAPI app in one uvicorn process (the same server settings as `settlekit serve`: no access log)
whose one route, `POST /v1/jobs/{job_id}/events`, inserts the request body as one row through a psycopg
connection pool into a table of a scratch PostgreSQL database. No authentication, validation, hashing or
signatures: what is left is the framework, the driver and one database round trip per request. The route reads
the body on the event loop and runs the insert on a worker thread with the blocking pool: measured here, that
serves about 1.5x the requests/s of the same insert through psycopg's AsyncConnectionPool, so it is the ceiling.
http_load.py serves it in its rounds beside settlekit, loaded by the same generator with the same requests, and
reports settlekit's figures as ratios of its. Only 127.0.0.1 is contacted.
"""

from __future__ import annotations

import os
import sys
from contextlib import asynccontextmanager
from typing import Any

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse
from psycopg_pool import ConnectionPool
from starlette.concurrency import run_in_threadpool

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


def main() -> int:
    """Serve the ceiling app alone (CEILING_DB, --port): http_load.py starts it this way for its rounds."""
    import uvicorn

    port = int(sys.argv[sys.argv.index("--port") + 1]) if "--port" in sys.argv else 8090
    uvicorn.run(create_app, factory=True, host="127.0.0.1", port=port, access_log=False, log_level="warning")
    return 0


if __name__ == "__main__":
    sys.exit(main())
