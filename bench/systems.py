"""What the HTTP bench (http_load.py) loads: a system (a server, started and stopped for each timed window, with
its database kept across the rounds) and the figures of one window."""

from __future__ import annotations

import contextlib
import shutil
import subprocess
import tempfile
from collections.abc import Callable
from dataclasses import dataclass

from common import scratch_pg, stop_process
from loadgen import LoadRun, postgres_cpu_seconds, trees

EVENTS_PATH = "/v1/jobs/{job}/events"
CLUSTER = "PostgreSQL cluster"  # informational: every database of the machine's cluster


@dataclass
class Window:
    """One system's figures in one round."""

    run: LoadRun
    cpu: dict[str, float]  # seconds per process group, window + catch-up
    events: int  # events appended (requests × events per request)
    checks: str = ""
    problems: int = 0  # acknowledged events not stored, or streams that did not verify

    def ms_per(self, group: str, unit: int | None = None) -> float:
        return 1000 * self.cpu.get(group, 0.0) / max(unit or self.run.requests, 1)

    @property
    def server_cpu(self) -> float:
        return sum(v for k, v in self.cpu.items() if k not in ("generator", CLUSTER))


# ---------------------------------------------------------------- the systems


class System:
    """A server loaded by the bench: started and stopped for every window, its database kept across rounds."""

    name = ""
    default_rate = 2000.0  # requests/s guessed before its first window (sizes what is prepared)
    groups: tuple[str, ...] = ("API", "PostgreSQL")

    scratch_prefix = ""  # its scratch PostgreSQL database's name prefix

    def __init__(self, postmaster: int | None):
        self.postmaster = postmaster
        self.rate: float | None = None
        self.procs: list[tuple[str, subprocess.Popen[bytes]]] = []
        self.tmp = tempfile.mkdtemp(prefix="sk-bench-")
        self.port = 0
        self.url = ""
        self._owned = contextlib.ExitStack()

    @property
    def host(self) -> str:
        return f"127.0.0.1:{self.port}"

    def open(self) -> None:
        """Create its database (once): a scratch PostgreSQL database, dropped at `close()`."""
        self.url = self._owned.enter_context(scratch_pg(self.scratch_prefix))

    def close(self) -> None:
        self._owned.close()
        shutil.rmtree(self.tmp, ignore_errors=True)

    def start(self) -> bool:
        raise NotImplementedError

    # exit statuses of a graceful stop on SIGTERM (uvicorn's own command line re-raises the signal it handled)
    graceful_exits: tuple[int, ...] = (0,)

    def stop(self) -> None:
        for name, proc in reversed(self.procs):
            stop_process(name, proc, timeout=30, quiet=True, graceful=self.graceful_exits)
        self.procs = []

    def cpu_sources(self) -> dict[str, Callable[[], float]]:
        """The API process(es), the worker, PostgreSQL (this system's database and the cluster's background
        processes) and the whole PostgreSQL cluster (other databases' work on the machine included)."""
        sources = trees({name: [p.pid] for name, p in self.procs})
        if self.postmaster is not None:
            postmaster, database = self.postmaster, self.database
            sources["PostgreSQL"] = lambda: postgres_cpu_seconds(postmaster, database)
            sources[CLUSTER] = lambda: postgres_cpu_seconds(postmaster)
        return sources

    @property
    def database(self) -> str:
        return self.url.rsplit("/", 1)[-1]

    def prepare(self, round_no: int, clients: int, per_client: int) -> list[list[bytes]]:
        """Jobs set up through the server, their heartbeats prepared: one list of requests per client."""
        raise NotImplementedError

    def caught_up(self) -> None:
        """Wait for the background work the window left (workers)."""

    def verify(self, run: LoadRun) -> tuple[str, int]:
        """(a line on what was checked, how many problems)."""
        return "", 0

    def log_tail(self) -> str:
        return ""

    @property
    def note(self) -> str:
        """A remark on how the system was run, printed with the results."""
        return ""
