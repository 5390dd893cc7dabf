"""Hostile webhook endpoints on loopback, for the delivery isolation tests and benchmark: a receiver that holds
every request (then answers normally, checking signatures), a black hole (accepts the connection, reads, never
answers) and a resetter (accepts, then resets the connection)."""

from __future__ import annotations

import contextlib
import socket
import struct
import threading
import time
from collections.abc import Mapping
from typing import Any

from settlekit.delivery.receiver import ReceiverServer
from settlekit.failpoints import arm, disarm


class HoldingReceiver(ReceiverServer):
    """Holds each request `hold` seconds (or until `release()` / `stop()`), then handles it normally. Records when
    each request arrived (`arrivals`: webhook-id → monotonic time) and how many are held now (`held`,
    `max_held`)."""

    def __init__(self, *, hold: float = 0.0, **kwargs: Any):
        super().__init__(**kwargs)
        self.hold = hold
        self.held = 0
        self.max_held = 0
        self.arrivals: dict[str, float] = {}
        self._released = threading.Event()
        self._count = threading.Lock()
        _HOLDERS.add(self)
        arm("receiver.request", _hold_hook)

    def release(self) -> None:
        """Answer every held request now, and later ones at once."""
        self._released.set()

    def stop(self) -> None:
        self._released.set()
        _HOLDERS.discard(self)
        if not _HOLDERS:
            disarm("receiver.request")
        super().stop()

    def wait_held(self, n: int, timeout: float) -> bool:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.held >= n:
                return True
            time.sleep(0.02)
        return False


_HOLDERS: set[HoldingReceiver] = set()


def _hold_hook(handler: Any, headers: Mapping[str, str], body: bytes) -> bool:
    owner = handler.server.owner
    if not isinstance(owner, HoldingReceiver):
        return False
    owner.arrivals.setdefault(headers.get("webhook-id", ""), time.monotonic())
    if owner.hold <= 0 or owner._released.is_set():
        return False
    with owner._count:
        owner.held += 1
        owner.max_held = max(owner.max_held, owner.held)
    try:
        owner._released.wait(owner.hold)
    finally:
        with owner._count:
            owner.held -= 1
    return False


class _RawServer:
    """A TCP listener on 127.0.0.1 that gives each accepted connection to `serve` on a thread of its own."""

    def __init__(self) -> None:
        self._sock = socket.create_server(("127.0.0.1", 0), backlog=256)
        self._stop = threading.Event()
        self._conns: list[socket.socket] = []
        self.accepted = 0
        self._thread = threading.Thread(target=self._accept, daemon=True)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self._sock.getsockname()[1]}/hook"

    def __enter__(self) -> _RawServer:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._sock.close()
        for conn in list(self._conns):
            with contextlib.suppress(OSError):
                conn.close()
        self._thread.join(5)

    def _accept(self) -> None:
        self._sock.settimeout(0.1)
        while not self._stop.is_set():
            try:
                conn, _ = self._sock.accept()
            except TimeoutError:
                continue
            except OSError:
                return
            self.accepted += 1
            self._conns.append(conn)
            threading.Thread(target=self.serve, args=(conn,), daemon=True).start()

    def serve(self, conn: socket.socket) -> None:
        raise NotImplementedError


class BlackHole(_RawServer):
    """Accepts every connection and reads what comes, never answering."""

    def serve(self, conn: socket.socket) -> None:
        conn.settimeout(0.2)
        while not self._stop.is_set():
            try:
                if not conn.recv(65536):
                    return
            except TimeoutError:
                continue
            except OSError:
                return


class Resetter(_RawServer):
    """Accepts every connection and resets it (RST) at once."""

    def serve(self, conn: socket.socket) -> None:
        conn.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        conn.close()
