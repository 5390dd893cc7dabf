"""The API served over real loopback HTTP by uvicorn in a thread (no tests here), and an httpx transport that
injects faults in front of it: refused connections, answers lost after the server handled the request, 503s."""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

import httpx
import uvicorn

HANG_GUARD = 30.0


@contextlib.contextmanager
def serve(app: Any) -> Iterator[str]:
    """Serve `app` on 127.0.0.1 (a free port) until the block ends; yields its base URL."""
    config = uvicorn.Config(app, host="127.0.0.1", port=0, log_config=None, access_log=False, lifespan="off",
                            log_level="warning")
    server = uvicorn.Server(config)
    thread = threading.Thread(target=server.run, name="api-server", daemon=True)
    thread.start()
    deadline = time.monotonic() + HANG_GUARD
    while not server.started:
        assert time.monotonic() < deadline and thread.is_alive(), "hang guard: the API server did not start"
        time.sleep(0.01)
    sock = server.servers[0].sockets[0]
    port = sock.getsockname()[1]
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        thread.join(HANG_GUARD)


# what happens to a request: "refuse" (no connection: nothing reaches the server), "drop" (the server handles it,
# the answer is lost), "unavailable" (a 503 problem with Retry-After; nothing reaches the server), "pass"
Fault = str


class FaultyTransport(httpx.BaseTransport):
    """Forwards to `inner` except where a fault is planned: `plan` takes faults for the next matching requests,
    `down` refuses every request until `up`. `seen` counts the requests that reached the server."""

    def __init__(self, inner: httpx.BaseTransport | None = None):
        self.inner = inner or httpx.HTTPTransport()
        self._lock = threading.Lock()
        self._plan: list[tuple[Callable[[httpx.Request], bool], Fault]] = []
        self.is_down = False
        self.seen = 0
        self.faults: list[tuple[str, str]] = []

    def plan(self, *faults: Fault, when: Callable[[httpx.Request], bool] = lambda r: True) -> None:
        with self._lock:
            self._plan.extend((when, f) for f in faults)

    def down(self) -> None:
        self.is_down = True

    def up(self) -> None:
        self.is_down = False

    def _next_fault(self, request: httpx.Request) -> Fault:
        with self._lock:
            if self.is_down:
                return "refuse"
            for i, (when, fault) in enumerate(self._plan):
                if when(request):
                    del self._plan[i]
                    return fault
        return "pass"

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        fault = self._next_fault(request)
        if fault != "pass":
            self.faults.append((fault, f"{request.method} {request.url.path}"))
        if fault == "refuse":
            raise httpx.ConnectError("connection refused (injected)", request=request)
        if fault == "unavailable":
            body = b'{"code":"DATABASE_UNAVAILABLE","status":503,"detail":"injected outage","title":"x"}'
            return httpx.Response(503, headers={"content-type": "application/problem+json", "retry-after": "0"},
                                  content=body, request=request)
        response = self.inner.handle_request(request)
        response.read()
        with self._lock:
            self.seen += 1
        if fault == "drop":
            response.close()
            raise httpx.ReadError("connection reset after the request was sent (injected)", request=request)
        return response

    def close(self) -> None:
        self.inner.close()


def is_append(request: httpx.Request) -> bool:
    return request.method == "POST" and request.url.path.endswith("/events")
