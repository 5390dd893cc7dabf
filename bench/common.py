"""Helpers shared by the benchmarks: throwaway PostgreSQL databases, threaded timing loops and the HTTP load
generator of load.py and ceiling.py."""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import statistics
import subprocess
import threading
import time
import uuid
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import psycopg

from settlekit.simulate import Fleet, job_stream, scenario_for

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


# ---------------------------------------------------------------- the HTTP load generator (load.py, ceiling.py)

LOAD_CLIENTS = int(os.environ.get("LOAD_CLIENTS", "50"))
LOAD_SECONDS = float(os.environ.get("LOAD_SECONDS", "20"))
LOAD_TENANT = "tenant_load"  # the tenant of the API key and of every simulated job


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


def stop_process(name: str, proc: subprocess.Popen[bytes], timeout: float = 60, *, quiet: bool = False) -> None:
    """SIGTERM, then report how the process ended (killed if it outlives `timeout`; `quiet`: only then)."""
    proc.send_signal(signal.SIGTERM)
    try:
        code = proc.wait(timeout=timeout)
        if not quiet or code != 0:
            print(f"{name} stopped on SIGTERM with exit status {code}")
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()
        print(f"{name} did not stop within {timeout:.0f} s of SIGTERM")


@dataclass
class LoadResult:
    """What one load run measured: every request's latency and status, and the events each job accepted."""

    clients: int
    seconds: float
    elapsed: float
    latencies: list[float]
    statuses: dict[int, int]
    accepted: dict[str, list[dict[str, Any]]]

    @property
    def rate(self) -> float:
        return len(self.latencies) / self.elapsed

    def quantile_ms(self, q: int) -> float:
        return statistics.quantiles(self.latencies, n=100)[q - 1] * 1000

    @property
    def errors_4xx(self) -> int:
        return sum(c for s, c in self.statuses.items() if 400 <= s < 500)

    @property
    def errors_5xx(self) -> int:
        return sum(c for s, c in self.statuses.items() if s >= 500)

    def print(self, name: str, *, anchor: LoadResult | None = None, anchor_name: str = "") -> None:
        report(f"{name}, {self.clients} concurrent clients, {self.seconds:.0f} s", self.rate, "requests/s",
               anchor=anchor.rate if anchor else None, anchor_name=anchor_name)
        p50, p99 = self.quantile_ms(50), self.quantile_ms(99)
        if anchor:
            print(f"latency p50: {p50:,.1f} ms (vs {anchor.quantile_ms(50):,.1f})  "
                  f"p99: {p99:,.1f} ms (vs {anchor.quantile_ms(99):,.1f})", flush=True)
        else:
            print(f"latency p50: {p50:,.1f} ms  p99: {p99:,.1f} ms", flush=True)
        print(f"status counts: {dict(sorted(self.statuses.items()))}  5xx={self.errors_5xx}  "
              f"4xx={self.errors_4xx}", flush=True)


def run_job_load(base_url: str, headers: Mapping[str, str], fleet: Fleet, *, clients: int = LOAD_CLIENTS,
                 seconds: float = LOAD_SECONDS) -> LoadResult:
    """`clients` keep-alive clients, each appending signed, client-finalized job events for `seconds`, one event
    per `POST /v1/jobs/{job_id}/events`; a client moves to its next job after a non-2xx answer."""
    latencies: list[float] = []
    statuses: dict[int, int] = {}
    accepted: dict[str, list[dict[str, Any]]] = {}
    lock = threading.Lock()
    stop_at = time.monotonic() + seconds

    def client(index: int) -> None:
        n = 0
        with httpx.Client(base_url=base_url, headers=dict(headers), timeout=30) as http:
            while time.monotonic() < stop_at:
                job_id = f"job_load_{index:03d}_{n:04d}"
                events = job_stream(scenario_for(index + n), job_id, fleet, index + n, tenant_id=LOAD_TENANT)
                n += 1
                ok: list[dict[str, Any]] = []
                for event in events:
                    if time.monotonic() >= stop_at:
                        break
                    t0 = time.perf_counter()
                    resp = http.post(f"/v1/jobs/{job_id}/events", json=event)
                    dt = time.perf_counter() - t0
                    with lock:
                        latencies.append(dt)
                        statuses[resp.status_code] = statuses.get(resp.status_code, 0) + 1
                    if resp.status_code not in (200, 201):
                        break
                    ok.append(event)
                if ok:
                    with lock:
                        accepted[job_id] = ok

    started = time.perf_counter()
    threads = [threading.Thread(target=client, args=(i,)) for i in range(clients)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return LoadResult(clients, seconds, time.perf_counter() - started, latencies, statuses, accepted)


# ---------------------------------------------------------------- where the CPU goes during a load (Linux /proc)

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


def _processes() -> dict[int, tuple[int, str, float]]:
    """pid -> (parent pid, command line, CPU seconds) of every process this user can read."""
    out = {}
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        fields = _proc_stat(f"/proc/{name}/stat")
        try:
            with open(f"/proc/{name}/cmdline", "rb") as f:
                cmdline = f.read().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        if fields is not None:
            out[int(name)] = (int(fields[1]), cmdline, _cpu_seconds(fields))
    return out


def child_processes(pid: int) -> list[int]:
    """The processes whose parent is `pid` (but multiprocessing's resource tracker)."""
    return [child for child, (ppid, cmdline, _) in _processes().items()
            if ppid == pid and "resource_tracker" not in cmdline]


def _main_thread(pid: int) -> tuple[float, float]:
    """(seconds on a CPU, seconds runnable but waiting for one) of a process's main thread (/proc schedstat)."""
    try:
        with open(f"/proc/{pid}/task/{pid}/schedstat") as f:
            ran, waited = f.read().split()[:2]
    except (OSError, ValueError):
        return 0.0, 0.0
    return int(ran) / 1e9, int(waited) / 1e9


class CpuSampler:
    """CPU per request of each process group over a load window: `servers` (pid -> group name, their child
    processes counted with them), this process (the load generator, with the webhook receiver if it runs here)
    and PostgreSQL's processes (those started during the window counted whole); and, for each process that
    serves requests on an event loop, the share of the window its main thread ran and waited for a CPU.
    Informational: a process that exits during the window is not counted, and "PostgreSQL" is every postgres
    process of the machine (other databases' work included)."""

    def __init__(self, servers: Mapping[int, str], loops: Callable[[], list[int]]):
        self.servers = dict(servers)
        self.loops = loops
        self._start = _processes()
        self._loops_start = {pid: _main_thread(pid) for pid in loops()}
        self._t0 = time.monotonic()

    def _groups(self, procs: dict[int, tuple[int, str, float]]) -> dict[int, str]:
        groups = {os.getpid(): "load generator"}
        for pid, (ppid, cmdline, _) in procs.items():
            if pid in self.servers:
                groups[pid] = self.servers[pid]
            elif ppid in self.servers:
                groups[pid] = self.servers[ppid]
            elif cmdline.startswith("postgres"):
                groups[pid] = "PostgreSQL"
        return groups

    def report(self, requests: int) -> str:
        wall = time.monotonic() - self._t0
        end = _processes()
        used: dict[str, float] = {}
        for pid, group in self._groups(end).items():
            before = self._start.get(pid)
            since = end[pid][2] - (before[2] if before is not None and before[0] == end[pid][0] else 0.0)
            used[group] = used.get(group, 0.0) + since
        parts = [f"{group} {1000 * seconds / max(requests, 1):.2f}" for group, seconds in used.items()]
        cores = os.cpu_count() or 1
        line = (f"CPU per request (ms): {', '.join(parts)}; all {1000 * sum(used.values()) / max(requests, 1):.2f} "
                f"({cores} cores give {1000 * cores * wall / max(requests, 1):.2f} ms per request at this rate)")
        for pid, (ran0, waited0) in self._loops_start.items():
            ran, waited = _main_thread(pid)
            line += (f"\n  event loop thread of pid {pid}: on a CPU {100 * (ran - ran0) / wall:.0f} % of the window, "
                     f"runnable but waiting for a CPU {100 * (waited - waited0) / wall:.0f} %")
        return line
