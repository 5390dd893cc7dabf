"""Helpers shared by the benchmarks: throwaway PostgreSQL databases and threaded timing loops."""

from __future__ import annotations

import contextlib
import os
import threading
import time
import uuid
from collections.abc import Callable, Iterator

import psycopg

PG_ADMIN_URL = os.environ.get("SETTLEKIT_TEST_PG", "postgresql://postgres@127.0.0.1:5432/postgres")


def pg_url(dbname: str) -> str:
    return f"{PG_ADMIN_URL.rsplit('/', 1)[0]}/{dbname}"


@contextlib.contextmanager
def scratch_pg(prefix: str) -> Iterator[str]:
    """A uniquely named database, dropped afterwards."""
    name = f"sk_bench_{prefix}_{uuid.uuid4().hex[:8]}"
    with psycopg.connect(PG_ADMIN_URL, autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{name}"')
    try:
        yield pg_url(name)
    finally:
        with psycopg.connect(PG_ADMIN_URL, autocommit=True) as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


def run_threads(workers: int, seconds: float, make_worker: Callable[[int], Callable[[], int]]) -> float:
    """Run `workers` threads for `seconds`; each step returns how many events it wrote. Returns events/s."""
    counts = [0] * workers
    stop = threading.Event()
    barrier = threading.Barrier(workers + 1)
    errors: list[BaseException] = []

    def loop(i: int) -> None:
        try:
            step = make_worker(i)
            barrier.wait()
            while not stop.is_set():
                counts[i] += step()
        except BaseException as exc:
            errors.append(exc)
            stop.set()
            with contextlib.suppress(threading.BrokenBarrierError):
                barrier.abort()

    threads = [threading.Thread(target=loop, args=(i,)) for i in range(workers)]
    for t in threads:
        t.start()
    barrier.wait()
    start = time.perf_counter()
    time.sleep(seconds)
    stop.set()
    for t in threads:
        t.join()
    elapsed = time.perf_counter() - start
    if errors:
        raise errors[0]
    return sum(counts) / elapsed


def report(name: str, value: float, unit: str, *, anchor: float | None = None, anchor_name: str = "",
           target: str = "") -> None:
    line = f"{name}: {value:,.1f} {unit}"
    if anchor:
        line += f"  ratio vs {anchor_name}: {value / anchor:.2f}x"
    if target:
        line += f"  (target {target})"
    print(line, flush=True)
