"""A light HTTP load generator and the CPU accounting of the processes it loads (Linux /proc).

Every request is prepared before the timed window as the exact bytes of an HTTP/1.1 request (signed events,
headers, body): during the window each client only writes them, one at a time, on one keep-alive connection
(asyncio streams on uvloop) and reads each answer's status line, headers and body. A client stops at the deadline,
when it has sent all its requests, or at its first answer other than 2xx (its later events chain on the refused
one). The generator's own CPU (user + system, this process) is measured over the window and reported per request,
so a figure that is the generator's and not the server's shows.

CPU of the loaded processes: the user + system time of a process tree (a server and the processes it started)
and of the PostgreSQL cluster (the postmaster and all its backends), read from /proc/PID/stat. Time of processes
that ended during the window is counted through their parent's cutime/cstime (the postmaster waits for its
backends, uvicorn's supervisor for its workers).
"""

from __future__ import annotations

import asyncio
import os
import resource
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field

import uvloop

_TICK = os.sysconf("SC_CLK_TCK")


def http_request(method: str, path: str, host: str, headers: Mapping[str, str], body: bytes = b"") -> bytes:
    """The bytes of one HTTP/1.1 request (keep-alive), ready to write."""
    lines = [f"{method} {path} HTTP/1.1", f"host: {host}"]
    lines += [f"{name}: {value}" for name, value in headers.items()]
    if body or method in ("POST", "PUT", "PATCH"):
        lines.append(f"content-length: {len(body)}")
    return ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1") + body


@dataclass
class LoadRun:
    """What one timed window measured: every answer's latency (s) and status, how many answers each client got
    in a row with a 2xx status (`acked[i]`: its first requests that were accepted), and the generator's CPU."""

    seconds: float
    elapsed: float = 0.0
    latencies: list[float] = field(default_factory=list)
    statuses: dict[int, int] = field(default_factory=dict)
    acked: list[int] = field(default_factory=list)
    connection_errors: int = 0
    exhausted: int = 0  # clients that sent all their prepared requests before the deadline
    generator_cpu: float = 0.0
    first_error: str = ""

    @property
    def requests(self) -> int:
        return len(self.latencies)

    @property
    def rate(self) -> float:
        return self.requests / self.elapsed if self.elapsed else 0.0

    @property
    def errors(self) -> int:
        return self.connection_errors + sum(c for s, c in self.statuses.items() if not 200 <= s < 300)

    def quantile_ms(self, q: float) -> float:
        if not self.latencies:
            return float("nan")
        ordered = sorted(self.latencies)
        return 1000 * ordered[min(len(ordered) - 1, int(q / 100 * len(ordered)))]

    @property
    def generator_ms_per_request(self) -> float:
        return 1000 * self.generator_cpu / max(self.requests, 1)


class _Refused(Exception):
    pass


async def _read_answer(reader: asyncio.StreamReader) -> tuple[int, bytes, bool]:
    """(status, body, the server keeps the connection) of one HTTP/1.1 answer."""
    head = await reader.readuntil(b"\r\n\r\n")
    status = int(head[9:12])
    lower = head.lower()
    keep = b"\r\nconnection: close" not in lower
    at = lower.find(b"\r\ncontent-length:")
    if at >= 0:
        end = lower.index(b"\r\n", at + 2)
        return status, await reader.readexactly(int(lower[at + 17:end])), keep
    if b"\r\ntransfer-encoding: chunked" in lower:
        chunks: list[bytes] = []
        while True:
            size = int((await reader.readuntil(b"\r\n")).split(b";")[0], 16)
            chunk = await reader.readexactly(size + 2)
            if size == 0:
                return status, b"".join(chunks), keep
            chunks.append(chunk[:-2])
    return status, b"", keep


async def _client(host: str, port: int, requests: Sequence[bytes], deadline: float, run: LoadRun,
                  index: int) -> None:
    loop = asyncio.get_running_loop()
    acked = 0
    writer = None
    try:
        reader, writer = await asyncio.open_connection(host, port)
        for request in requests:
            if loop.time() >= deadline:
                break
            started = time.perf_counter()
            writer.write(request)
            status, _, keep = await _read_answer(reader)
            run.latencies.append(time.perf_counter() - started)
            run.statuses[status] = run.statuses.get(status, 0) + 1
            if not 200 <= status < 300:
                raise _Refused(f"client {index}: HTTP {status} at request {acked}")
            acked += 1
            if not keep:
                writer.close()
                reader, writer = await asyncio.open_connection(host, port)
        else:
            run.exhausted += 1
    except _Refused as exc:
        run.first_error = run.first_error or str(exc)
    except (OSError, asyncio.IncompleteReadError, ValueError) as exc:
        run.connection_errors += 1
        run.first_error = run.first_error or f"client {index}: {type(exc).__name__}: {exc}"
    except asyncio.CancelledError:
        run.connection_errors += 1
        run.first_error = run.first_error or f"client {index}: no answer within the run's timeout"
        raise
    finally:
        run.acked[index] = acked
        if writer is not None:
            writer.close()


async def _run(host: str, port: int, work: Sequence[Sequence[bytes]], seconds: float, timeout: float) -> LoadRun:
    run = LoadRun(seconds=seconds, acked=[0] * len(work))
    loop = asyncio.get_running_loop()
    deadline = loop.time() + seconds
    started = time.perf_counter()
    tasks = [asyncio.create_task(_client(host, port, requests, deadline, run, i)) for i, requests in enumerate(work)]
    _, late = await asyncio.wait(tasks, timeout=seconds + timeout)
    for task in late:  # an answer that never came: the client is counted as an error
        task.cancel()
    if late:
        await asyncio.wait(late)
    run.elapsed = time.perf_counter() - started
    return run


def run_load(host: str, port: int, work: Sequence[Sequence[bytes]], seconds: float, *,
             timeout: float = 30.0) -> LoadRun:
    """One client per item of `work` (its prepared requests, sent in order), all for at most `seconds`, on a
    fresh uvloop event loop; the generator's CPU over the window is in the result. A client still waiting for an
    answer `timeout` s after the deadline is stopped and counted as an error."""
    before = resource.getrusage(resource.RUSAGE_SELF)
    run = uvloop.run(_run(host, port, work, seconds, timeout))
    after = resource.getrusage(resource.RUSAGE_SELF)
    run.generator_cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return run


# ---------------------------------------------------------------- CPU of processes, from /proc


def _stat(pid: int) -> list[str] | None:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return None


def _parents() -> dict[int, int]:
    out = {}
    for name in os.listdir("/proc"):
        if name.isdigit() and (fields := _stat(int(name))) is not None:
            out[int(name)] = int(fields[1])
    return out


def tree_pids(root: int) -> list[int]:
    """`root` and every live process below it."""
    children: dict[int, list[int]] = {}
    for pid, ppid in _parents().items():
        children.setdefault(ppid, []).append(pid)
    found, todo = [], [root]
    while todo:
        pid = todo.pop()
        found.append(pid)
        todo.extend(children.get(pid, ()))
    return found


def tree_cpu_seconds(root: int) -> float:
    """User + system seconds of `root`'s process tree: each live process's own time and that of the children it
    has waited for (ended ones)."""
    total = 0
    for pid in tree_pids(root):
        fields = _stat(pid)
        if fields is not None:
            total += sum(int(v) for v in fields[11:15])  # utime stime cutime cstime
    return total / _TICK


def postmaster_pid(data_directory: str) -> int | None:
    """The pid of the PostgreSQL cluster serving `data_directory` (its postmaster.pid), None if unreadable."""
    try:
        with open(os.path.join(data_directory, "postmaster.pid")) as f:
            return int(f.readline())
    except (OSError, ValueError):
        return None


_BACKGROUND = ("checkpointer", "background writer", "walwriter", "autovacuum launcher", "logical replication",
               "archiver", "walsummarizer", "io worker", "startup", "stats collector")


def _cmdline(pid: int) -> str:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            return f.read().replace(b"\0", b" ").decode(errors="replace").strip()
    except OSError:
        return ""


def postgres_cpu_seconds(postmaster: int, database: str | None = None) -> float:
    """User + system seconds of a PostgreSQL cluster: with `database`, its background processes (checkpointer,
    WAL writer, ...) and the backends of that database only (other databases' work on a shared machine is left
    out; a backend of it that ended is not counted); without, the whole cluster (the postmaster's waited-for
    children included)."""
    if database is None:
        return tree_cpu_seconds(postmaster)
    total = 0
    for pid in tree_pids(postmaster):
        if pid != postmaster and counts_for_database(_cmdline(pid), database):
            fields = _stat(pid)
            if fields is not None:
                total += sum(int(v) for v in fields[11:15])
    return total / _TICK


def counts_for_database(cmdline: str, database: str) -> bool:
    """Whether a postgres process (by the title in its command line) works for `database`: one of its backends
    (or autovacuum workers), or a background process of the cluster."""
    title = cmdline.removeprefix("postgres:").strip()
    head, sep, rest = title.partition(": ")  # "15/main: walwriter" names its cluster first
    if sep and " " not in head:
        title = rest
    return title.startswith(_BACKGROUND) or database in title.split()


class CpuMeter:
    """CPU seconds of named sources (a function giving CPU seconds so far each) between `start()` and `read()`."""

    def __init__(self, sources: Mapping[str, Callable[[], float]]):
        self.sources = dict(sources)
        self._start: dict[str, float] = {}

    def _now(self) -> dict[str, float]:
        return {name: source() for name, source in self.sources.items()}

    def start(self) -> None:
        self._start = self._now()

    def read(self) -> dict[str, float]:
        now = self._now()
        return {name: now[name] - self._start.get(name, 0.0) for name in now}


def trees(pids: Mapping[str, Iterable[int]]) -> dict[str, Callable[[], float]]:
    """CPU sources of process trees: name -> their roots."""

    def source(roots: list[int]) -> Callable[[], float]:
        return lambda: sum(tree_cpu_seconds(pid) for pid in roots)

    return {name: source(list(roots)) for name, roots in pids.items()}
