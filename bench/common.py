"""Helpers shared by the benchmarks: throwaway PostgreSQL databases, threaded timing loops, starting and stopping
servers (the HTTP load generator is loadgen.py)."""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import httpx
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


# ---------------------------------------------------------------- servers under test (http_load.py)

def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def wait_ready(url: str, proc: subprocess.Popen[bytes], log: Path, timeout: float = 60) -> bool:
    """Poll `url` until it answers 200; False (after printing the log's tail) if `proc` exits or time runs out."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            if httpx.get(url, timeout=2).status_code == 200:
                return True
        except httpx.HTTPError:
            pass
        if time.monotonic() > deadline or proc.poll() is not None:
            print(log.read_text()[-3000:])
            return False
        time.sleep(0.2)


def stop_process(name: str, proc: subprocess.Popen[bytes], timeout: float = 60, *, quiet: bool = False,
                 graceful: tuple[int, ...] = (0,)) -> None:
    """SIGTERM, then report how the process ended (killed if it outlives `timeout`; `quiet`: only then, or when
    its exit status is not one of `graceful`)."""
    proc.send_signal(signal.SIGTERM)
    try:
        code = proc.wait(timeout=timeout)
        if not quiet or code not in graceful:
            print(f"{name} stopped on SIGTERM with exit status {code}")
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()
        print(f"{name} did not stop within {timeout:.0f} s of SIGTERM")


# ---------------------------------------------------------------- CPU of a process (Linux /proc)

_TICK = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100


def _proc_stat(path: str) -> list[str] | None:
    try:
        with open(path) as f:
            return f.read().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return None


def _cpu_seconds(fields: list[str]) -> float:
    """User + system CPU seconds from the fields of a /proc stat line (after the command name)."""
    return (int(fields[11]) + int(fields[12])) / _TICK


def process_cpu_seconds(pid: int) -> float | None:
    """CPU seconds (user + system) a local process has used so far; None when it has ended (or cannot be read)."""
    fields = _proc_stat(f"/proc/{pid}/stat")
    return None if fields is None else _cpu_seconds(fields)


def pids_running(prefix: str) -> list[int]:
    """The processes this user can read whose command line starts with `prefix` (e.g. "postgres: ")."""
    found = []
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/cmdline", "rb") as f:
                cmdline = f.read().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        if cmdline.startswith(prefix):
            found.append(int(name))
    return found
