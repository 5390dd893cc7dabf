"""Counting PostgreSQL round trips (no tests here): a loopback proxy that reads the frontend protocol of every
connection through it and counts the messages after which the client waits for the server: a simple Query ('Q')
or a Sync ('S', the end of an extended-protocol exchange, prepared or not). Connect with sslmode=disable."""

from __future__ import annotations

import struct
import threading
from collections.abc import Callable
from urllib.parse import urlsplit, urlunsplit

from support.tcp_proxy import TcpProxy

_WAITING_MESSAGES = frozenset(b"QS")
_SSL_OR_GSS_REQUESTS = frozenset((80877103, 80877104))


class RoundTripCounter(TcpProxy):
    def __init__(self, target_host: str, target_port: int):
        super().__init__(target_host, target_port)
        self._count_lock = threading.Lock()
        self._count = 0

    @classmethod
    def for_url(cls, url: str) -> tuple[RoundTripCounter, str]:
        """A counter in front of the server of `url`, and the URL to connect through it."""
        parts = urlsplit(url)
        counter = cls(parts.hostname or "127.0.0.1", parts.port or 5432)
        netloc = f"{parts.username}@" if parts.username else ""
        query = "&".join(q for q in (parts.query, "sslmode=disable") if q)
        return counter, urlunsplit((parts.scheme, f"{netloc}127.0.0.1:{counter.port}", parts.path, query, ""))

    def take(self) -> int:
        """Round trips counted since the last take()."""
        with self._count_lock:
            count, self._count = self._count, 0
            return count

    def client_tap(self) -> Callable[[bytes], None]:
        buffer = bytearray()
        started = False

        def see(data: bytes) -> None:
            nonlocal started
            buffer.extend(data)
            while True:
                if not started:  # startup-phase messages have no type byte
                    if len(buffer) < 8:
                        return
                    length, code = struct.unpack("!ii", buffer[:8])
                    if len(buffer) < length:
                        return
                    del buffer[:length]
                    started = code not in _SSL_OR_GSS_REQUESTS
                    continue
                if len(buffer) < 5:
                    return
                kind, length = buffer[0], struct.unpack("!i", buffer[1:5])[0]
                if len(buffer) < 1 + length:
                    return
                if kind in _WAITING_MESSAGES:
                    with self._count_lock:
                        self._count += 1
                del buffer[:1 + length]

        return see
