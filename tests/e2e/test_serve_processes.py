"""`serve --workers N`: N API processes answer on one port, the background workers run once (in the parent), SIGTERM
stops them all cleanly; on SQLite more than one API process is refused with a clear error."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest

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
    port = free_port()
    log = tmp_path / "serve.log"
    env = {**os.environ, "SETTLEKIT_DB": pg_url, "SETTLEKIT_SERVER_KEY_FILE": str(tmp_path / "server.pem")}
    proc = subprocess.Popen([sys.executable, "-m", "settlekit.cli", "serve", "--workers", "2", "--port", str(port)],
                            env=env, stdout=log.open("wb"), stderr=subprocess.STDOUT)
    try:
        pids = _answering_pids(f"http://127.0.0.1:{port}", proc, log, 2)
        assert len(pids) == 2, log.read_text()[-3000:]
        assert proc.pid not in pids
        assert pids <= set(_children(proc.pid))
        assert httpx.get(f"http://127.0.0.1:{port}/readyz", timeout=5).status_code == 200
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            code = proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            proc.kill()
            pytest.fail(f"serve did not stop on SIGTERM: {log.read_text()[-3000:]}")
    assert code == 0, log.read_text()[-3000:]
    assert not any(Path(f"/proc/{pid}").exists() for pid in pids)  # joined by the parent before it exited


def test_serve_refuses_several_processes_on_sqlite(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("SETTLEKIT_")}
    env["SETTLEKIT_DB"] = f"sqlite:///{tmp_path / 'x.db'}"
    done = subprocess.run([sys.executable, "-m", "settlekit.cli", "serve", "--workers", "2", "--port", "0"],
                          env=env, capture_output=True, text=True, timeout=60)
    assert done.returncode == 2
    assert "several API processes need PostgreSQL" in done.stderr
