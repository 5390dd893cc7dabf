"""`serve --workers N`: N API processes answer on one port, the background workers run once (in the parent), SIGTERM
stops them all cleanly; on SQLite more than one API process is refused with a clear error."""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from support.multiprocess import free_port


def _children(pid: int) -> list[int]:
    """The live child processes of `pid` (from /proc)."""
    out = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[1]) == pid and fields[0] != "Z":
            out.append(int(entry.name))
    return out


def _answering_pids(base: str, proc: subprocess.Popen[bytes], log: Path, want: int) -> set[int]:
    """The pids that answer /healthz on fresh connections, until `want` of them did (or a minute passed)."""
    pids: set[int] = set()
    deadline = time.monotonic() + 60
    while len(pids) < want and time.monotonic() < deadline:
        if proc.poll() is not None:
            pytest.fail(f"serve exited early: {log.read_text()[-3000:]}")
        try:
            r = httpx.get(f"{base}/healthz", timeout=2, headers={"connection": "close"})
            pids.add(r.json()["pid"])
        except httpx.HTTPError:
            time.sleep(0.1)
    return pids


def test_serve_two_processes_on_one_port(pg_url: str, tmp_path: Path) -> None:
    with _serve_two_processes(pg_url, tmp_path, "tenant_a", ["jobs:read"]) as serving:
        assert serving.parent not in serving.pids
        assert serving.pids <= set(_children(serving.parent))
        assert httpx.get(f"{serving.base}/readyz", timeout=5).status_code == 200
    assert not any(Path(f"/proc/{pid}").exists() for pid in serving.pids)  # joined by the parent before it exited


def test_serve_refuses_several_processes_on_sqlite(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("SETTLEKIT_")}
    env["SETTLEKIT_DB"] = f"sqlite:///{tmp_path / 'x.db'}"
    done = subprocess.run([sys.executable, "-m", "settlekit.cli", "serve", "--workers", "2", "--port", "0"],
                          env=env, capture_output=True, text=True, timeout=60)
    assert done.returncode == 2
    assert "several API processes need PostgreSQL" in done.stderr


def _scrape(base: str, key: str) -> dict[str, float]:
    """The samples of one /metrics answer, by name and labels (pid left out), on a fresh connection."""
    r = httpx.get(f"{base}/metrics", headers={"authorization": f"Bearer {key}", "connection": "close"}, timeout=10)
    assert r.status_code == 200, r.text
    out: dict[str, float] = {}
    for family in text_string_to_metric_families(r.text):
        for sample in family.samples:
            labels = ",".join(f"{k}={v}" for k, v in sorted(sample.labels.items()) if k != "pid")
            out[f"{sample.name}{{{labels}}}"] = out.get(f"{sample.name}{{{labels}}}", 0.0) + sample.value
    return out


@dataclass
class _Serving:
    base: str
    key: str
    parent: int  # the pid of `serve`
    pids: set[int] = field(default_factory=set)  # the API processes' pids
    stopped_in: float = 0.0  # seconds from SIGTERM to the exit of `serve`


@contextlib.contextmanager
def _serve_two_processes(pg_url: str, tmp_path: Path, tenant: str, scopes: list[str]) -> Iterator[_Serving]:
    """`serve --workers 2` (both API processes answering) and a key of `tenant` with `scopes`; stopped with SIGTERM
    at the end, which must end it cleanly."""
    from settlekit.api.auth import create_api_key
    from settlekit.store.db import connect

    db = connect(pg_url)
    try:
        db.migrate()
        _, key = create_api_key(db, tenant, scopes)
    finally:
        db.close()
    port = free_port()
    log = tmp_path / "serve.log"
    env = {**os.environ, "SETTLEKIT_DB": pg_url, "SETTLEKIT_SERVER_KEY_FILE": str(tmp_path / "server.pem")}
    proc = subprocess.Popen([sys.executable, "-m", "settlekit.cli", "serve", "--workers", "2", "--port", str(port)],
                            env=env, stdout=log.open("wb"), stderr=subprocess.STDOUT)
    serving = _Serving(f"http://127.0.0.1:{port}", key, proc.pid)
    try:
        serving.pids = _answering_pids(serving.base, proc, log, 2)
        assert len(serving.pids) == 2, log.read_text()[-3000:]
        yield serving
    finally:
        started = time.monotonic()
        proc.send_signal(signal.SIGTERM)
        try:
            code = proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            proc.kill()
            pytest.fail(f"serve did not stop on SIGTERM: {log.read_text()[-3000:]}")
        serving.stopped_in = time.monotonic() - started
    assert code == 0, log.read_text()[-3000:]


def test_metrics_of_every_process_in_one_scrape(pg_url: str, tmp_path: Path) -> None:
    """Under `serve --workers 2`, whichever process answers /metrics, it counts the requests both API processes
    served, and it shows the background workers of the parent and the delivery queue."""
    with _serve_two_processes(pg_url, tmp_path, "system", ["ops"]) as serving:
        pids: list[int] = []
        for _ in range(40):  # fresh connections: the two processes share them
            r = httpx.get(f"{serving.base}/healthz", headers={"connection": "close"}, timeout=5)
            pids.append(r.json()["pid"])
        assert len(set(pids)) == 2, "one process served every request: the sum would prove nothing"
        for _ in range(6):
            samples = _scrape(serving.base, serving.key)
            assert samples["settlekit_api_requests_total{method=GET,route=/healthz,status=200}"] >= len(pids)
            assert any(name.startswith("settlekit_consumer_lag_events") for name in samples), sorted(samples)[:40]
            assert any(name.startswith("settlekit_delivery_dlq_size") for name in samples), sorted(samples)[:40]


def test_open_event_streams_end_when_serve_with_two_processes_stops(pg_url: str, tmp_path: Path) -> None:
    """An open SSE stream on each API process of `serve --workers 2`: SIGTERM ends them and the server stops
    promptly, instead of waiting out its 20-second graceful shutdown timeout."""
    ended: list[bool] = []
    opened = threading.Semaphore(0)

    def follow(base: str, key: str) -> None:
        with httpx.Client(base_url=base, headers={"authorization": f"Bearer {key}"}, timeout=60) as http, \
                http.stream("GET", "/v1/events/stream") as stream:
            assert stream.status_code == 200
            opened.release()
            with contextlib.suppress(httpx.HTTPError):  # a stream cut at shutdown has ended too
                for _ in stream.iter_lines():
                    pass
            ended.append(True)

    with _serve_two_processes(pg_url, tmp_path, "tenant_a", ["jobs:read"]) as serving:
        readers = [threading.Thread(target=follow, args=(serving.base, serving.key), daemon=True)
                   for _ in range(4)]  # on both processes, most likely
        for reader in readers:
            reader.start()
        for _ in readers:
            assert opened.acquire(timeout=30)
    for reader in readers:
        reader.join(10)
    assert len(ended) == len(readers)
    assert serving.stopped_in < 15, f"the open streams held the shutdown for {serving.stopped_in:.1f} s"


def _port_is_free(port: int) -> bool:
    """Whether a new `serve` could listen on `port` (bound as uvicorn binds, with SO_REUSEADDR)."""
    with socket.socket() as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            probe.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def test_api_processes_die_with_a_killed_serve(pg_url: str, tmp_path: Path) -> None:
    """SIGKILL of the `serve --workers 2` parent: its API processes stop too (the kernel's parent-death signal
    asks them for a graceful stop, which closes the port first) and the port is free for a new `serve`. Before,
    both kept answering under pid 1 for minutes and a new `serve` exited with "Address already in use"."""
    port = free_port()
    log = tmp_path / "serve.log"
    env = {**os.environ, "SETTLEKIT_DB": pg_url, "SETTLEKIT_SERVER_KEY_FILE": str(tmp_path / "server.pem")}
    proc = subprocess.Popen([sys.executable, "-m", "settlekit.cli", "serve", "--workers", "2", "--port", str(port),
                             "--no-workers"], env=env, stdout=log.open("wb"), stderr=subprocess.STDOUT)
    pids: set[int] = set()
    try:
        pids = _answering_pids(f"http://127.0.0.1:{port}", proc, log, 2)
        assert len(pids) == 2, log.read_text()[-3000:]
        proc.kill()
        proc.wait(timeout=30)
        killed = time.monotonic()
        deadline = killed + 30  # a hang guard; how long it took is reported below
        while any(Path(f"/proc/{pid}").exists() and "Z" not in _state(pid) for pid in pids) \
                or not _port_is_free(port):
            assert time.monotonic() < deadline, f"API processes {pids} outlived their parent: {log.read_text()[-2000:]}"
            time.sleep(0.05)
        print(f"port free {time.monotonic() - killed:.2f} s after the SIGKILL")
    finally:
        proc.kill()
        proc.wait(timeout=30)
        for pid in pids | set(_children(proc.pid)):  # what outlived the test (before, both API processes)
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)


def _state(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return "Z"
