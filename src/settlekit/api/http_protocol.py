"""The HTTP/1.1 protocol `settlekit serve` runs: uvicorn's httptools protocol with a bound on the request head.

httptools (llhttp) is the faster of uvicorn's two parsers, but it sets no limit on the request line and headers:
uvicorn's protocol appends each piece of a header to the one before (bytes concatenation), so a 48 MiB header costs
seconds of the event loop, during which every other request of the process waits, and its size in memory several
times over. h11 has a limit (`h11_max_incomplete_event_size`) but parses in Python, several times slower on every
request. This protocol keeps httptools and counts the bytes of each request head as they arrive: beyond
`max_head_bytes` (the request line and the headers together, `Settings.max_header_bytes`) the request is answered
431 `REQUEST_HEAD_TOO_LARGE` and the connection closed, without feeding the parser more. The count is exact when
the head starts a read; a pipelined request that starts inside a read is counted from the next read on.

An answer of known length (Content-Length, not to HEAD) goes out in one write: its head is held until its first
body bytes and written with them (uvicorn writes each ASGI message apart, so two sends on the socket per answer).
"""

from __future__ import annotations

import logging
from typing import Any

from uvicorn.protocols.http.httptools_impl import STATUS_LINE, HttpToolsProtocol

from settlekit.api.responses import dumps
from settlekit.errors import SettlekitError

log = logging.getLogger("settlekit.api.request")
LINGER_SECONDS = 2.0  # after a 431: how long the rest of the request is read and dropped before the connection closes


class BoundedHttpToolsProtocol(HttpToolsProtocol):
    """uvicorn's httptools protocol; a request head over `max_head_bytes` is answered 431 and the connection closed
    once the client has read the answer.
    Give it to uvicorn as `http=functools.partial(BoundedHttpToolsProtocol, max_head_bytes=N)`."""

    def __init__(self, *args: Any, max_head_bytes: int, **kwargs: Any):
        super().__init__(*args, **kwargs)
        self.max_head_bytes = max_head_bytes
        self.head_bytes = 0  # bytes of the current request head received so far
        self.in_head = True  # waiting for (the rest of) a request head: at the start and after each request
        self.heads_done = 0  # request heads parsed on this connection
        self.refused = False  # a 431 was sent: what else arrives is dropped

    def data_received(self, data: bytes) -> None:
        if self.refused:
            return  # the rest of a refused request: read and dropped until the connection closes
        if not self.in_head or self.parser is None:
            super().data_received(data)
            return
        room = self.max_head_bytes - self.head_bytes
        if len(data) <= room:
            self.head_bytes += len(data)
            super().data_received(data)
            return
        # more than the head may still take: feed what it may, and the rest only if the head ended within it
        heads = self.heads_done
        self.head_bytes = self.max_head_bytes
        if room:
            super().data_received(data[:room])
        if self.transport.is_closing():
            return
        if self.heads_done == heads:
            self._refuse_head()
        else:
            self.data_received(data[room:])

    def on_message_begin(self) -> None:
        super().on_message_begin()
        self.in_head = True

    def on_headers_complete(self) -> None:
        self.in_head = False
        self.heads_done += 1
        self.head_bytes = 0
        super().on_headers_complete()
        cycle: Any = self.cycle
        if cycle is not None and cycle.transport is self.transport:
            cycle.transport = _OneWriteAnswer(self.transport, cycle)

    def on_message_complete(self) -> None:
        super().on_message_complete()
        self.in_head = True  # the next request's head is counted from the next read

    def _refuse_head(self) -> None:
        """Answer 431 with a problem body and close; the parser gets nothing more of this connection."""
        error = SettlekitError(f"the request line and headers are over the limit of {self.max_head_bytes} bytes",
                               code="REQUEST_HEAD_TOO_LARGE", status=431, limitBytes=self.max_head_bytes)
        body = dumps(error.to_problem())
        client = self.client[0] if self.client else None
        log.warning("request", extra={"status": 431, "error_code": error.code, "client": client,
                                      "limit_bytes": self.max_head_bytes})
        head = [STATUS_LINE[431]]
        for name, value in self.server_state.default_headers:
            head.extend([name, b": ", value, b"\r\n"])
        head.extend([b"content-type: application/problem+json\r\n",
                     b"content-length: " + str(len(body)).encode("ascii") + b"\r\n",
                     b"connection: close\r\n\r\n", body])
        self.transport.write(b"".join(head))
        self.refused = True
        self.in_head = False
        # close after the client has read the answer: closing with unread data in the socket would reset the
        # connection and the client would never see the 431. Its further bytes are dropped for LINGER_SECONDS at
        # most; the client usually closes first
        if self.transport.can_write_eof():
            self.transport.write_eof()
            self.loop.call_later(LINGER_SECONDS, self.transport.close)
        else:
            self.transport.close()

    def eof_received(self) -> None:
        if self.refused:
            self.transport.close()


class _OneWriteAnswer:
    """The transport as one request's cycle (uvicorn's RequestResponseCycle) sees it: the head of an answer with a
    Content-Length (a body to come; not to HEAD) is held and written together with the first body bytes. Every
    other write, and everything else, goes to the transport as it is."""

    __slots__ = ("_cycle", "_head", "_started", "_transport")

    def __init__(self, transport: Any, cycle: Any):
        self._transport = transport
        self._cycle = cycle
        self._head: bytes | None = None
        self._started = False  # the answer's head was written (or held)

    def write(self, data: bytes) -> None:
        head = self._head
        if head is not None:
            self._head = None
            self._transport.write(head + data)
            return
        cycle = self._cycle
        if (not self._started and cycle.response_started and cycle.chunked_encoding is False
                and cycle.expected_content_length > 0 and cycle.scope["method"] != "HEAD"):
            self._started = True
            self._head = data
            return
        if cycle.response_started:
            self._started = True
        self._transport.write(data)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._transport, name)
