"""A loopback TCP proxy for outage tests (no tests here): point an app at it instead of the database server,
then `cut()` (every open connection is dropped, new ones are accepted and closed at once, as a restarting
server does) and `restore()`. The shared database server itself is never touched."""

from __future__ import annotations

import contextlib
import socket
import threading
from collections.abc import Callable


class TcpProxy:
    def __init__(self, target_host: str, target_port: int):
        self.target = (target_host, target_port)
        self._listener = socket.create_server(("127.0.0.1", 0))
        self.port: int = self._listener.getsockname()[1]
        self._lock = threading.Lock()
        self._open: set[socket.socket] = set()
        self._cut = False
        self._closed = False
        self._thread = threading.Thread(target=self._accept_loop, name="tcp-proxy", daemon=True)
        self._thread.start()

    def cut(self) -> None:
        """Drop every connection; refuse new ones (accept, then close) until restore()."""
        with self._lock:
            self._cut = True
            victims = list(self._open)
            self._open.clear()
        for sock in victims:
            _close(sock)

    def restore(self) -> None:
        with self._lock:
            self._cut = False

    def close(self) -> None:
        self._closed = True
        self.cut()
        _close(self._listener)
        self._thread.join(5)

    def _accept_loop(self) -> None:
        while not self._closed:
            try:
                client, _ = self._listener.accept()
            except OSError:
                return
            with self._lock:
                refused = self._cut
            if refused:
                _close(client)
                continue
            try:
                upstream = socket.create_connection(self.target, timeout=5)
                upstream.settimeout(None)
            except OSError:
                _close(client)
                continue
            with self._lock:
                if self._cut:
                    _close(client)
                    _close(upstream)
                    continue
                self._open.update((client, upstream))
            for src, dst, tap in ((client, upstream, self.client_tap()), (upstream, client, None)):
                threading.Thread(target=self._pump, args=(src, dst, tap), daemon=True).start()

    def client_tap(self) -> Callable[[bytes], None] | None:
        """Called once per connection: a function that sees what the client sends, in order (None: nothing)."""
        return None

    def _pump(self, src: socket.socket, dst: socket.socket, tap: Callable[[bytes], None] | None) -> None:
        try:
            while True:
                data = src.recv(65536)
                if not data:
                    break
                if tap is not None:
                    tap(data)
                dst.sendall(data)
        except OSError:
            pass  # the other side or cut() closed the socket: the pair is finished
        finally:
            with self._lock:
                self._open.discard(src)
                self._open.discard(dst)
            _close(src)
            _close(dst)


def _close(sock: socket.socket) -> None:
    with contextlib.suppress(OSError):
        sock.shutdown(socket.SHUT_RDWR)
    with contextlib.suppress(OSError):
        sock.close()
