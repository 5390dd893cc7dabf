"""The HTTP API under load, measured as CPU per request of every process, against the framework ceiling.

Each system is loaded by 50 keep-alive clients (`loadgen.run_load`: prepared requests, asyncio on uvloop, raw
HTTP/1.1), each client appending robot-signed JOB_HEARTBEAT events, one per request, to its own job
(`workload.py`; the jobs are brought to execution first, outside the timed window). The systems:

- `1 API + worker`: `settlekit serve --no-workers` and a `settlekit worker`;
- `embedded`: `settlekit serve` (the workers in the API process);
- `2 API + worker`: `settlekit serve --workers 2 --no-workers` and a `settlekit worker`;
- `ceiling`: bench/ceiling.py, a minimal FastAPI app inserting each body as one row through psycopg;
- `settld` (opt-in, SETTLEKIT_REFERENCE_DIR naming a settld 0.1.0 checkout with `npm ci` done, and node):
  settld's own API server on its PostgreSQL store (settld_peer.py);
- `baseline` (opt-in, SETTLEKIT_BASELINE_PYTHON naming the Python of another checkout's virtual environment, an
  earlier commit say): `1 API + worker` run by that Python, so a change is measured against what it changes in
  the same run (its ratios: this checkout's `1 API + worker` to it).

Rounds are interleaved (every system once per round, each on fresh processes), and every ratio is taken within a
round, the median of the rounds reported. CPU per request is read from /proc for the API process(es), the
worker, the PostgreSQL cluster (all its processes: other databases' work on the machine counts too) and the
generator itself, from the start of the window until the workers have caught up with what it appended. After
each window every acknowledged event must be stored, in order, and the streams verify (hashes, chain,
signatures).

Then: batch appends over HTTP (8 clients, 100 client-finalized heartbeats per request, `serve --no-workers`)
against the store's own figure (the same batches through the job appender in this process, 8 threads, one
transaction each), and the stream-length probe (one client appending 300 events to one job: latency by
position). `--profile`: an extra window with py-spy recording the API process (`1 API + worker`), its top
functions printed.

Run: python bench/http_load.py [--quick] [--rounds 4] [--seconds 15] [--clients 50] [--profile]
                               [--systems "1 API + worker,baseline,ceiling"]
Only 127.0.0.1 is contacted.
"""

from __future__ import annotations

import argparse
import contextlib
import math
import os
import shutil
import signal
import statistics
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import httpx  # noqa: E402
import psycopg  # noqa: E402

from common import PG_ADMIN_URL, free_port, wait_ready  # noqa: E402
from loadgen import CpuMeter, LoadRun, postmaster_pid, run_load, trees  # noqa: E402
from settlekit.api.auth import create_api_key  # noqa: E402
from settlekit.append import job_appender  # noqa: E402
from settlekit.events.envelope import verify_chain  # noqa: E402
from settlekit.simulate import Fleet  # noqa: E402
from settlekit.store.db import Database, connect  # noqa: E402
from settlekit.store.progress import outstanding  # noqa: E402
from systems import CLUSTER, EVENTS_PATH, System, Window  # noqa: E402
from workload import JobWork, append_requests, new_job  # noqa: E402

TENANT = "tenant_load"
BATCH_CLIENTS = 8
BATCH_EVENTS = 100
PROBE_EVENTS = 300
CATCH_UP_TIMEOUT = 120.0


def pg_cluster_pid() -> int | None:
    with psycopg.connect(PG_ADMIN_URL, autocommit=True) as conn:
        row = conn.execute("SHOW data_directory").fetchone()
    return postmaster_pid(row[0]) if row else None


class SettlekitSystem(System):
    """`settlekit serve` with the given options, and a `settlekit worker` beside it unless embedded or none."""

    scratch_prefix = "http"

    def __init__(self, postmaster: int | None, name: str, serve_options: Sequence[str], worker: bool,
                 python: str = sys.executable):
        super().__init__(postmaster)
        self.name = name
        self.python = python  # whose settlekit runs (another checkout's virtual environment: a baseline)
        self.serve_options = list(serve_options)
        self.worker = worker
        self.groups = ("API", "worker", "PostgreSQL") if worker else ("API", "PostgreSQL")
        self.default_rate = 2500.0
        self.db: Database | None = None
        self.fleet = Fleet.create(robots=8, operators=4)
        self.api_key = ""
        self.jobs: list[JobWork] = []
        self.keys: dict[str, str] = {}

    def open(self) -> None:
        super().open()
        self.db = connect(self.url, max_size=BATCH_CLIENTS + 2)
        self.db.migrate()
        _, self.api_key = create_api_key(self.db, TENANT, ["admin"])
        appender = job_appender(self.db)
        for key in self.fleet.registrations():
            appender.signer_keys.register(TENANT, key["publicKeyPem"], key["purpose"], entity_id=key.get("entityId"))
        self.keys = self.fleet.public_keys()

    def close(self) -> None:
        if self.db is not None:
            self.db.close()
        super().close()

    def env(self) -> dict[str, str]:
        return {**os.environ, "SETTLEKIT_DB": self.url, "SETTLEKIT_PORT": str(self.port),
                "SETTLEKIT_SERVER_KEY_FILE": f"{self.tmp}/server.pem", "SETTLEKIT_RATE_LIMIT_PER_SECOND": "1000000",
                "SETTLEKIT_RATE_LIMIT_BURST": "1000000"}

    def start(self) -> bool:
        self.port = free_port()
        log = Path(self.tmp) / "serve.log"
        serve = subprocess.Popen([self.python, "-m", "settlekit.cli", "serve", *self.serve_options],
                                 env=self.env(), stdout=log.open("ab"), stderr=subprocess.STDOUT)
        self.procs = [("API", serve)]
        if self.worker:
            self.procs.append(("worker", subprocess.Popen(
                [self.python, "-m", "settlekit.cli", "worker"], env=self.env(),
                stdout=(Path(self.tmp) / "worker.log").open("ab"), stderr=subprocess.STDOUT)))
        return wait_ready(f"http://{self.host}/readyz", serve, log)

    @property
    def headers(self) -> dict[str, str]:
        return {"authorization": f"Bearer {self.api_key}"}

    def new_jobs(self, round_no: int, count: int, tag: str = "") -> list[JobWork]:
        jobs = [new_job(self.fleet, f"job_{tag}r{round_no}_{i:03d}", i, TENANT) for i in range(count)]
        with httpx.Client(base_url=f"http://{self.host}", headers=self.headers, timeout=60) as http:
            for job in jobs:
                http.post(f"/v1/jobs/{job.job_id}/events", json=job.setup).raise_for_status()
        return jobs

    def prepare(self, round_no: int, clients: int, per_client: int) -> list[list[bytes]]:
        self.jobs = self.new_jobs(round_no, clients)
        return [append_requests(self.host, EVENTS_PATH, self.headers, job.add_heartbeats(per_client))
                for job in self.jobs]

    def caught_up(self) -> None:
        assert self.db is not None
        deadline = time.monotonic() + CATCH_UP_TIMEOUT
        while time.monotonic() < deadline:
            work = outstanding(self.db)
            if work.consumers > 0 and work.consumers_behind == 0:
                return
            time.sleep(0.2)
        print(f"  {self.name}: the workers had not caught up after {CATCH_UP_TIMEOUT:.0f} s")

    def verify(self, run: LoadRun, events_per_request: int = 1) -> tuple[str, int]:
        """Every acknowledged event stored at its place, at most the one unanswered request's beyond, and every
        job's whole stream verifies."""
        missing = extra = broken = 0
        with httpx.Client(base_url=f"http://{self.host}", headers=self.headers, timeout=60) as http:
            for job, acked in zip(self.jobs, run.acked, strict=True):
                stored = http.get(f"/v1/jobs/{job.job_id}/export").json()
                expected = job.setup + job.heartbeats[:acked * events_per_request]
                got = [e["chainHash"] for e in stored[:len(expected)]]
                missing += sum(1 for a, b in zip(expected, got + [None] * len(expected), strict=False)
                               if a["chainHash"] != b)
                extra += max(0, len(stored) - len(expected))
                try:
                    verify_chain(stored, self.keys)
                except Exception:  # noqa: BLE001 - reported as a count
                    broken += 1
        acked_events = sum(run.acked) * events_per_request
        line = (f"acknowledged events {acked_events}: not stored {missing}; stored beyond the acknowledged "
                f"(an unanswered request) {extra}; jobs {len(self.jobs)}, streams that do not verify {broken}")
        return line, missing + broken

    def log_tail(self) -> str:
        lines = []
        for name in ("serve.log", "worker.log"):
            path = Path(self.tmp) / name
            if path.exists():
                lines += [f"  {name}: {line[:300]}" for line in path.read_text(errors="replace").splitlines()
                          if '"level":"info"' not in line.replace(" ", "")][-10:]
        return "\n".join(lines)


class CeilingSystem(System):
    """bench/ceiling.py: a minimal FastAPI app, one insert per request (no checks)."""

    name = "ceiling"
    scratch_prefix = "ceiling"
    default_rate = 3000.0
    graceful_exits = (0, -signal.SIGTERM)  # `python -m uvicorn` ends by the SIGTERM it handled, after its shutdown

    def __init__(self, postmaster: int | None):
        super().__init__(postmaster)
        self.fleet = Fleet.create(robots=8, operators=4)

    def open(self) -> None:
        super().open()
        with psycopg.connect(self.url, autocommit=True) as conn:
            conn.execute("CREATE TABLE events (position BIGSERIAL PRIMARY KEY, job_id TEXT NOT NULL,"
                         " body JSONB NOT NULL)")

    def start(self) -> bool:
        self.port = free_port()
        log = Path(self.tmp) / "ceiling.log"
        here = Path(__file__).resolve().parent
        server = subprocess.Popen(
            [sys.executable, "-m", "uvicorn", "--factory", "ceiling:create_app", "--app-dir", str(here),
             "--host", "127.0.0.1", "--port", str(self.port), "--no-access-log", "--log-level", "warning"],
            env={**os.environ, "CEILING_DB": self.url}, stdout=log.open("ab"), stderr=subprocess.STDOUT)
        self.procs = [("API", server)]
        return wait_ready(f"http://{self.host}/readyz", server, log)

    def _rows(self) -> int:
        with psycopg.connect(self.url) as conn:
            row = conn.execute("SELECT count(*) FROM events").fetchone()
        return int(row[0]) if row else 0

    def prepare(self, round_no: int, clients: int, per_client: int) -> list[list[bytes]]:
        self.rows_before = self._rows()
        jobs = [new_job(self.fleet, f"job_cr{round_no}_{i:03d}", i, TENANT) for i in range(clients)]
        return [append_requests(self.host, EVENTS_PATH, {}, job.add_heartbeats(per_client)) for job in jobs]

    def verify(self, run: LoadRun) -> tuple[str, int]:
        stored = self._rows() - self.rows_before
        acked = sum(run.acked)
        return f"acknowledged {acked}, rows stored {stored}", max(0, acked - stored)


# ---------------------------------------------------------------- one window


def measure(system: System, round_no: int, clients: int, seconds: float, *, profile: Path | None = None
            ) -> Window | None:
    """Start `system`, prepare its requests, load it for `seconds`, wait for its workers, check what it stored."""
    expected = max(system.rate or 0.0, system.default_rate)
    # 3x the mean share: with two API processes the clients of the less loaded one run well ahead of the rest
    per_client = math.ceil(expected * seconds * 3 / clients) + 20
    if not system.start():
        print(f"  {system.name}: did not start\n{system.log_tail()}")
        system.stop()
        return None
    try:
        work = system.prepare(round_no, clients, per_client)
        meter = CpuMeter(system.cpu_sources())
        spy = _start_profiler(system, seconds, profile) if profile is not None else None
        meter.start()
        run = run_load("127.0.0.1", system.port, work, seconds)
        system.caught_up()
        cpu = meter.read()
        if spy is not None:
            spy.wait(timeout=seconds + 60)
        cpu["generator"] = run.generator_cpu
        line, problems = system.verify(run)
        window = Window(run, cpu, run.requests, line, problems)
    finally:
        system.stop()
    system.rate = run.rate
    if run.exhausted:
        print(f"  {system.name}: {run.exhausted} clients ran out of prepared requests before the deadline")
    if run.errors or problems:
        print(f"  {system.name}: errors {run.errors} ({run.first_error}); {line}\n{system.log_tail()}")
    return window


def _start_profiler(system: System, seconds: float, out: Path) -> subprocess.Popen[bytes]:
    api = dict(system.procs)["API"]
    return subprocess.Popen([_py_spy() or "py-spy", "record", "--pid", str(api.pid), "--duration",
                             str(max(1, int(seconds))), "--rate", "200", "--format", "raw", "--nonblocking",
                             "--gil", "--full-filenames", "--output", str(out)],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


# ---------------------------------------------------------------- batches over HTTP against the store's own figure


def batch_http(system: SettlekitSystem, round_no: int, seconds: float, batches: int) -> Window | None:
    """BATCH_CLIENTS clients, each appending BATCH_EVENTS client-finalized heartbeats per request to its job."""
    if not system.start():
        print(f"  {system.name}: did not start\n{system.log_tail()}")
        system.stop()
        return None
    try:
        system.jobs = system.new_jobs(round_no, BATCH_CLIENTS, "bh")
        work = []
        for job in system.jobs:
            events = job.add_heartbeats(batches * BATCH_EVENTS)
            chunks = [events[i:i + BATCH_EVENTS] for i in range(0, len(events), BATCH_EVENTS)]
            work.append(append_requests(system.host, EVENTS_PATH, system.headers, chunks))
        meter = CpuMeter(system.cpu_sources())
        meter.start()
        run = run_load("127.0.0.1", system.port, work, seconds)
        cpu = meter.read()
        cpu["generator"] = run.generator_cpu
        line, problems = system.verify(run, BATCH_EVENTS)
    finally:
        system.stop()
    if run.errors or problems:
        print(f"  batches over HTTP: errors {run.errors} ({run.first_error}); {line}\n{system.log_tail()}")
    return Window(run, cpu, sum(run.acked) * BATCH_EVENTS, line, problems)


def batch_store(system: SettlekitSystem, round_no: int, seconds: float, batches: int) -> Window:
    """The same batches through the job appender in this process: BATCH_CLIENTS threads, one transaction each."""
    assert system.db is not None
    appender = job_appender(system.db)
    jobs = [new_job(system.fleet, f"job_bsr{round_no}_{i:03d}", i, TENANT) for i in range(BATCH_CLIENTS)]
    for job in jobs:
        appender.append(TENANT, job.job_id, job.setup)
    prepared = []
    for job in jobs:
        events = job.add_heartbeats(batches * BATCH_EVENTS)
        prepared.append([events[i:i + BATCH_EVENTS] for i in range(0, len(events), BATCH_EVENTS)])
    done = [0] * len(jobs)
    errors: list[str] = []
    start = threading.Barrier(len(jobs) + 1)
    deadline = [0.0]

    def writer(i: int) -> None:
        start.wait()
        try:
            for batch in prepared[i]:
                if time.monotonic() >= deadline[0]:
                    return
                appender.append(TENANT, jobs[i].job_id, batch)
                done[i] += 1
        except Exception as exc:  # noqa: BLE001 - reported
            errors.append(f"{type(exc).__name__}: {exc}")

    threads = [threading.Thread(target=writer, args=(i,)) for i in range(len(jobs))]
    for t in threads:
        t.start()
    sources = {name: source for name, source in system.cpu_sources().items() if name in ("PostgreSQL", CLUSTER)}
    meter = CpuMeter({**sources, **trees({"store (this process)": [os.getpid()]})})
    meter.start()
    deadline[0] = time.monotonic() + seconds
    started = time.perf_counter()
    start.wait()
    for t in threads:
        t.join()
    elapsed = time.perf_counter() - started
    cpu = meter.read()
    appender.close()
    run = LoadRun(seconds=seconds, elapsed=elapsed, latencies=[0.0] * sum(done), acked=done)
    if errors:
        print(f"  store batches: {len(errors)} errors, first: {errors[0]}")
    exhausted = sum(1 for i, n in enumerate(done) if n == len(prepared[i]))
    if exhausted:
        print(f"  store batches: {exhausted} writers ran out of prepared batches before the deadline")
    return Window(run, cpu, sum(done) * BATCH_EVENTS, problems=len(errors))


# ---------------------------------------------------------------- the stream-length probe


def stream_probe(system: System) -> list[float] | None:
    """One client appending PROBE_EVENTS heartbeats to one job: each append's latency (s), in order."""
    if not system.start():
        system.stop()
        return None
    try:
        work = system.prepare(9000, 1, PROBE_EVENTS)
        run = run_load("127.0.0.1", system.port, work, 600)
        if run.errors:
            print(f"  probe on {system.name}: {run.errors} errors ({run.first_error})")
    finally:
        system.stop()
    return run.latencies


def probe_points(latencies: Sequence[float]) -> str:
    points = [1, 10, 50, 100, 150, 200, 250, 300]
    parts = []
    for p in points:
        if p <= len(latencies):
            around = latencies[max(0, p - 3):p + 2]
            parts.append(f"{p}: {1000 * statistics.median(around):.1f}")
    return ", ".join(parts)


# ---------------------------------------------------------------- the report


@dataclass
class Series:
    windows: list[Window | None] = field(default_factory=list)

    def good(self) -> list[Window]:
        return [w for w in self.windows if w is not None]

    def median(self, value: Callable[[Window], float]) -> float:
        values = [value(w) for w in self.good()]
        return statistics.median(values) if values else float("nan")


def per_round_ratio(a: Series, b: Series, value: Callable[[Window], float]) -> tuple[float, list[float]]:
    ratios = [value(x) / value(y) for x, y in zip(a.windows, b.windows, strict=False)
              if x is not None and y is not None and value(y)]
    return (statistics.median(ratios) if ratios else float("nan")), ratios


def cpu_per_request(w: Window) -> float:
    return 1000 * w.server_cpu / max(w.run.requests, 1)


def print_table(series: dict[str, Series], groups: dict[str, tuple[str, ...]]) -> None:
    print("\nCPU ms per request: PostgreSQL = the system's own database's backends and the cluster's background "
          "processes; the whole cluster's (other databases on the machine included) is beside it")
    print("| system | requests/s (median) | p50 / p99 ms | errors | CPU ms per request: API / worker / "
          "PostgreSQL / server total | whole PostgreSQL cluster | generator ms/request |")
    print("|---|---|---|---|---|---|---|")
    for name, s in series.items():
        if not s.good():
            print(f"| {name} | did not run | | | | | |")
            continue

        def part(group: str, s: Series = s, name: str = name) -> str:
            return f"{_median_ms(s, group):.2f}" if group in groups[name] else "–"

        print(f"| {name} | {s.median(lambda w: w.run.rate):,.0f} | {s.median(lambda w: w.run.quantile_ms(50)):,.0f}"
              f" / {s.median(lambda w: w.run.quantile_ms(99)):,.0f} | {sum(w.run.errors for w in s.good())} | "
              f"{part('API')} / {part('worker')} / {part('PostgreSQL')} / **{s.median(cpu_per_request):.2f}** | "
              f"{_median_ms(s, CLUSTER):.2f} | "
              f"{s.median(lambda w: w.run.generator_ms_per_request):.3f} |")


def _median_ms(s: Series, group: str) -> float:
    return s.median(lambda w: w.ms_per(group))


def print_ratios(series: dict[str, Series]) -> None:
    ceiling = series.get("ceiling")
    one = series.get("1 API + worker")
    two = series.get("2 API + worker")
    settld = series.get("settld")

    def show(label: str, a: Series | None, b: Series | None, value: Callable[[Window], float], target: str) -> None:
        if a is None or b is None or not a.good() or not b.good():
            return
        median, ratios = per_round_ratio(a, b, value)
        print(f"{label}: {median:.2f}x (rounds: {', '.join(f'{r:.2f}' for r in ratios)}){target}")

    print("\nratios, each taken within a round, median of the rounds:")
    rate: Callable[[Window], float] = lambda w: w.run.rate  # noqa: E731
    for name in ("1 API + worker", "embedded", "2 API + worker"):
        show(f"{name} / ceiling, requests/s", series.get(name), ceiling, rate,
             "  (target >= 0.6x)" if name == "1 API + worker" else "")
        show(f"{name} / ceiling, server CPU per request", series.get(name), ceiling, cpu_per_request,
             "  (target <= 1.8x)" if name == "1 API + worker" else "")
    show("2 API + worker / 1 API + worker, requests/s", two, one, rate, "  (target >= 1.3x)")
    print_capacity(one, two)
    baseline = series.get("baseline")
    if baseline is not None:
        show("1 API + worker / baseline, requests/s", one, baseline, rate, "")
        show("1 API + worker / baseline, server CPU per request", one, baseline, cpu_per_request, "")
        show("1 API + worker / baseline, API CPU per request", one, baseline, lambda w: w.ms_per("API"), "")
    if settld is not None:
        show("1 API + worker / settld, requests/s", one, settld, rate, "")
        show("settld / 1 API + worker, server CPU per request", settld, one, cpu_per_request, "")


def machine_share(w: Window) -> float:
    """Of the machine's cores, how many the window kept busy: the system's processes and the load generator."""
    return (w.server_cpu + w.run.generator_cpu) / max(w.run.elapsed, 1e-9) / (os.cpu_count() or 1)


def print_capacity(one: Series | None, two: Series | None) -> None:
    """What two API processes give where the cores are not all taken: the machine's share each system kept busy
    (two API processes beside PostgreSQL, the worker and the generator can use no more than all of it), and the
    requests/s the API processes alone could serve, each at its own CPU per request measured under this load
    (processes x 1000 / API CPU ms per request)."""
    if one is None or two is None or not one.good() or not two.good():
        return
    for name, s in (("1 API + worker", one), ("2 API + worker", two)):
        print(f"{name}: the machine's {os.cpu_count()} cores {100 * s.median(machine_share):.0f} % busy "
              f"(system and generator)")
    median, ratios = per_round_ratio(one, two, lambda w: w.ms_per("API"))
    print(f"2 API + worker / 1 API + worker, API capacity (processes x 1000 / API CPU ms per request): "
          f"{2 * median:.2f}x (rounds: {', '.join(f'{2 * r:.2f}' for r in ratios)})")


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="2 rounds of 4 s (proves the bench works)")
    parser.add_argument("--rounds", type=int, default=None)
    parser.add_argument("--seconds", type=float, default=None)
    parser.add_argument("--clients", type=int, default=50)
    parser.add_argument("--profile", action="store_true", help="py-spy the API process in an extra window")
    parser.add_argument("--no-batch", action="store_true")
    parser.add_argument("--no-probe", action="store_true")
    parser.add_argument("--systems", default=None,
                        help="comma-separated names of the systems to measure (default: all of them)")
    args = parser.parse_args(argv)
    rounds = args.rounds or (2 if args.quick else 4)
    seconds = args.seconds or (4.0 if args.quick else 15.0)
    postmaster = pg_cluster_pid()
    if postmaster is None:
        print("note: the PostgreSQL cluster's postmaster.pid is not readable here: PostgreSQL CPU is not counted")

    systems: list[System] = [
        SettlekitSystem(postmaster, "1 API + worker", ["--no-workers"], worker=True),
        SettlekitSystem(postmaster, "embedded", [], worker=False),
        SettlekitSystem(postmaster, "2 API + worker", ["--workers", "2", "--no-workers"], worker=True),
        CeilingSystem(postmaster),
    ]
    baseline_python = os.environ.get("SETTLEKIT_BASELINE_PYTHON")
    if baseline_python:
        systems.append(SettlekitSystem(postmaster, "baseline", ["--no-workers"], worker=True, python=baseline_python))
    peer = _settld_peer(postmaster)
    if peer is not None:
        systems.append(peer)
    if args.systems is not None:
        chosen = {name.strip() for name in args.systems.split(",")}
        unknown = chosen - {s.name for s in systems}
        if unknown:
            parser.error(f"no such system: {', '.join(sorted(unknown))} (have: {', '.join(s.name for s in systems)})")
        systems = [s for s in systems if s.name in chosen]
        peer = peer if peer in systems else None
    batch_system = SettlekitSystem(postmaster, "batches", ["--no-workers"], worker=False)
    series = {s.name: Series() for s in systems}
    batch_http_series, batch_store_series = Series(), Series()
    try:
        for s in [*systems, batch_system]:
            s.open()
        print(f"{len(systems)} systems, {rounds} interleaved rounds of {seconds:.0f} s, {args.clients} clients; "
              f"{os.cpu_count()} cores", flush=True)
        for round_no in range(1, rounds + 1):
            for s in systems:
                window = measure(s, round_no, args.clients, seconds)
                series[s.name].windows.append(window)
                if window is not None:
                    print(f"round {round_no}, {s.name}: {window.run.rate:,.0f} requests/s, p50 "
                          f"{window.run.quantile_ms(50):.0f} ms, p99 {window.run.quantile_ms(99):.0f} ms, "
                          f"errors {window.run.errors}, CPU ms/request "
                          + ", ".join(f"{g} {window.ms_per(g):.2f}" for g in window.cpu)
                          + f"; {window.checks}", flush=True)
            if not args.no_batch:
                store = batch_store(batch_system, round_no, seconds, _batches(batch_store_series, seconds))
                batch_store_series.windows.append(store)
                http = batch_http(batch_system, round_no, seconds, _batches(batch_http_series, seconds))
                batch_http_series.windows.append(http)
                print(f"round {round_no}, batches of {BATCH_EVENTS}: store {store.events / store.run.elapsed:,.0f} "
                      f"events/s; HTTP "
                      + (f"{http.events / http.run.elapsed:,.0f} events/s; {http.checks}" if http else "failed"),
                      flush=True)
        print_table(series, {s.name: s.groups for s in systems})
        print_ratios(series)
        if not args.no_batch:
            print_batches(batch_http_series, batch_store_series)
        if peer is not None and peer.note:
            print(peer.note)
        if not args.no_probe:
            print(f"\nstream-length probe: one client appending {PROBE_EVENTS} heartbeats to one job, latency ms at "
                  "event n (median of the 5 around it):")
            for s in [systems[0], *([peer] if peer is not None else [])]:
                latencies = stream_probe(s)
                if latencies:
                    print(f"  {s.name}: {probe_points(latencies)}")
        if args.profile:
            profile(systems[0], args.clients, seconds)
        problems = sum(w.problems for s in series.values() for w in s.good())
        problems += sum(w.problems for w in batch_http_series.good())
        print(f"\nnothing lost: {'yes' if problems == 0 else f'NO ({problems} problems above)'}")
        return 0 if problems == 0 else 1
    finally:
        for s in [*systems, batch_system]:
            with contextlib.suppress(Exception):
                s.close()


def _batches(series: Series, seconds: float) -> int:
    """Batches to prepare per client: enough for 1.6x the last rate seen (8,000 events/s before the first)."""
    last = series.good()[-1] if series.good() else None
    rate = last.events / last.run.elapsed if last is not None and last.run.elapsed else 8000.0
    return math.ceil(rate * seconds * 1.6 / (BATCH_CLIENTS * BATCH_EVENTS)) + 3


def print_batches(http: Series, store: Series) -> None:
    if not http.good() or not store.good():
        return
    rate: Callable[[Window], float] = lambda w: w.events / w.run.elapsed  # noqa: E731
    median, ratios = per_round_ratio(http, store, rate)
    print(f"\nbatches of {BATCH_EVENTS} client-finalized heartbeats, {BATCH_CLIENTS} clients/threads:")
    print(f"  over HTTP (serve --no-workers): {http.median(rate):,.0f} events/s, server CPU "
          f"{http.median(lambda w: 1000 * w.server_cpu / max(w.events, 1)):.3f} ms per event (API "
          f"{http.median(lambda w: 1000 * w.cpu.get('API', 0) / max(w.events, 1)):.3f}, PostgreSQL "
          f"{http.median(lambda w: 1000 * w.cpu.get('PostgreSQL', 0) / max(w.events, 1)):.3f}), p50 "
          f"{http.median(lambda w: w.run.quantile_ms(50)):.0f} ms per request")
    print(f"  the store in process (job appender, one transaction per batch): {store.median(rate):,.0f} events/s, "
          f"CPU {store.median(lambda w: 1000 * w.server_cpu / max(w.events, 1)):.3f} ms per event")
    print(f"  HTTP / store, events/s: {median:.2f}x (rounds: {', '.join(f'{r:.2f}' for r in ratios)})  "
          "(target >= 0.7x)")


def profile(system: System, clients: int, seconds: float) -> None:
    """An extra window with py-spy sampling the API process; its top functions by own and by total time."""
    if _py_spy() is None:
        print("\nprofile: py-spy is not installed (pip install py-spy)")
        return
    out = Path(system.tmp) / "profile.txt"
    window = measure(system, 9001, clients, seconds, profile=out)
    if window is None or not out.exists():
        print("\nprofile: no samples")
        return
    print(f"\nprofile of the API process ({system.name}, {window.run.rate:,.0f} requests/s under py-spy):")
    print(summarize_profile(out.read_text()))


def summarize_profile(text: str, top: int = 15) -> str:
    """py-spy's raw (collapsed) samples of the thread holding the GIL: the top functions by own samples, the
    files by own samples, and settlekit's functions by samples including what they call."""
    own: dict[str, int] = {}
    files: dict[str, int] = {}
    total: dict[str, int] = {}
    samples = 0
    for line in text.splitlines():
        stack, _, count = line.rpartition(" ")
        if not stack or not count.isdigit():
            continue
        n = int(count)
        samples += n
        frames = [_frame(f) for f in stack.split(";")[1:]]  # the first names the thread
        if not frames:
            continue
        label, file, _ = frames[-1]
        own[label] = own.get(label, 0) + n
        files[file] = files.get(file, 0) + n
        for name in {f[0] for f in frames if f[2] and not f[1].startswith("cli/")}:
            total[name] = total.get(name, 0) + n
    if not samples:
        return "  no samples"

    def best(counts: dict[str, int], top: int = top) -> list[str]:
        return [f"    {100 * n / samples:5.1f} %  {k}" for k, n in sorted(counts.items(), key=lambda x: -x[1])[:top]]

    return "\n".join([f"  {samples} samples of the thread holding the GIL; own time by function:", *best(own),
                      "  own time by file:", *best(files),
                      "  settlekit's functions (but the command line's), including what they call:",
                      *best(total, 2 * top)])


def _frame(text: str) -> tuple[str, str, bool]:
    """(function (file), file, whether it is settlekit's) of a py-spy frame `function (path:line)`."""
    name, _, where = text.rpartition(" (")
    path = where.rsplit(":", 1)[0]
    ours = "/settlekit/" in path
    short = path.split("/settlekit/", 1)[1] if ours else path.rsplit("/", 1)[-1]
    return f"{name or text} ({short})", short, ours


def _py_spy() -> str | None:
    beside = Path(sys.executable).parent / "py-spy"
    return str(beside) if beside.exists() else shutil.which("py-spy")


def _settld_peer(postmaster: int | None) -> System | None:
    reference = os.environ.get("SETTLEKIT_REFERENCE_DIR")
    if not reference:
        return None
    if shutil.which("node") is None:
        print("SETTLEKIT_REFERENCE_DIR is set but node is not on the PATH: settld is not measured")
        return None
    from settld_peer import SettldSystem

    return SettldSystem(postmaster, Path(reference))


if __name__ == "__main__":
    sys.exit(main())
