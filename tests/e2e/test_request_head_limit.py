"""The request head limit of `settlekit serve` (`max_header_bytes`), against a real server process: a head over it
is answered 431 REQUEST_HEAD_TOO_LARGE without the parser taking it in, so three 48 MiB headers at once neither
grow the process nor keep other requests from their answers."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import orjson
import pytest

from support.multiprocess import free_port

LIMIT = 32_768  # the default


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[int, int, str]]:
    """(port, pid, an API key) of `serve --no-workers` on SQLite."""
    from settlekit.api.auth import create_api_key
    from settlekit.store.db import connect

    tmp = tmp_path_factory.mktemp("head_limit")
    env = {k: v for k, v in os.environ.items() if not k.startswith("SETTLEKIT_")}
    env["SETTLEKIT_DB"] = f"sqlite:///{tmp / 'api.db'}"
    db = connect(env["SETTLEKIT_DB"])
    try:
        db.migrate()
        _, key = create_api_key(db, "tenant_a", ["jobs:write"])
    finally:
        db.close()
    port = free_port()
    log = tmp / "serve.log"
    proc = subprocess.Popen([sys.executable, "-m", "settlekit.cli", "serve", "--no-workers", "--port", str(port)],
                            env=env, stdout=log.open("wb"), stderr=subprocess.STDOUT)
    try:
        deadline = time.monotonic() + 60
        while True:
            assert proc.poll() is None, log.read_text()[-3000:]
            assert time.monotonic() < deadline, "serve did not answer within a minute"
            try:
                if httpx.get(f"http://127.0.0.1:{port}/healthz", timeout=2).status_code == 200:
                    break
            except httpx.HTTPError:
                time.sleep(0.1)
        yield port, proc.pid, key
    finally:
        proc.terminate()
        proc.wait(timeout=60)


def _exchange(port: int, request: bytes) -> bytes:
    """Send `request` on a new connection and read the answer until the server closes (or 60 s pass)."""
    with socket.create_connection(("127.0.0.1", port), timeout=60) as sock:
        sock.sendall(request)
        chunks = []
        while chunk := sock.recv(65_536):
            chunks.append(chunk)
    return b"".join(chunks)


def _status_and_body(answer: bytes) -> tuple[int, dict[str, object]]:
    head, _, body = answer.partition(b"\r\n\r\n")
    return int(head.split(b" ", 2)[1]), orjson.loads(body) if body.startswith(b"{") else {}


def _peak_rss_kib(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1])
    raise AssertionError("no VmHWM")


def test_a_head_over_the_limit_is_431(server: tuple[int, int, str]) -> None:
    port, _, key = server
    under = b"GET /healthz HTTP/1.1\r\nHost: x\r\nConnection: close\r\nX-Pad: " + b"a" * (LIMIT - 200) + b"\r\n\r\n"
    assert _status_and_body(_exchange(port, under))[0] == 200
    over_header = b"GET /healthz HTTP/1.1\r\nHost: x\r\nX-Pad: " + b"a" * LIMIT + b"\r\n\r\n"
    over_line = b"GET /healthz?" + b"q" * LIMIT + b" HTTP/1.1\r\nHost: x\r\n\r\n"
    many_headers = b"GET /healthz HTTP/1.1\r\nHost: x\r\n" + b"X-A: b\r\n" * (LIMIT // 8) + b"\r\n"
    for request in (over_header, over_line, many_headers):
        status, problem = _status_and_body(_exchange(port, request))
        assert status == 431 and problem["code"] == "REQUEST_HEAD_TOO_LARGE", problem
        assert problem["details"] == {"limitBytes": LIMIT}
    # a body is not part of the head, even when it arrives in the same read
    body = b"{" + b" " * (512 * 1024) + b"}"
    post = (b"POST /v1/jobs HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nConnection: close\r\n"
            b"Authorization: Bearer " + key.encode() + b"\r\n"
            b"Content-Length: " + str(len(body)).encode() + b"\r\n\r\n" + body)
    status, problem = _status_and_body(_exchange(port, post))
    assert status == 400 and problem["code"] == "SCHEMA_INVALID", problem


def test_three_48_mib_headers_at_once(server: tuple[int, int, str]) -> None:
    port, pid, _ = server
    base = f"http://127.0.0.1:{port}"
    peak_before = _peak_rss_kib(pid)
    outcomes: list[object] = []

    def huge() -> None:
        try:
            outcomes.append(_status_and_body(_exchange(
                port, b"GET /healthz HTTP/1.1\r\nHost: x\r\nX-Big: " + b"a" * (48 << 20) + b"\r\n\r\n"))[0])
        except (ConnectionResetError, BrokenPipeError) as exc:  # closed before the client finished sending
            outcomes.append(type(exc).__name__)

    senders = [threading.Thread(target=huge) for _ in range(3)]
    for sender in senders:
        sender.start()
    answered = []
    while any(sender.is_alive() for sender in senders):
        answered.append(httpx.get(f"{base}/healthz", timeout=30).status_code)
    for sender in senders:
        sender.join()
    assert len(outcomes) == 3 and all(o in (431, "ConnectionResetError", "BrokenPipeError") for o in outcomes)
    assert set(answered) <= {200}
    assert httpx.get(f"{base}/healthz", timeout=30).status_code == 200
    # the parser never held the headers: before the limit the process grew by some 220 MB
    assert _peak_rss_kib(pid) - peak_before < 32 * 1024
