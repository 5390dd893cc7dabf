"""One request straight through an ASGI app, without TestClient: raw header bytes (TestClient re-encodes
non-ASCII header values) and a call stack as shallow as uvicorn's."""

from __future__ import annotations

import asyncio
import contextlib
from typing import Any


class _Done(Exception):
    pass


def asgi_request(app: Any, method: str, path: str, headers: list[tuple[bytes, bytes]], body: bytes = b"",
                 query: bytes = b"") -> dict[str, Any]:
    """The answer's status and body (the body up to its first chunk of a 200 stream)."""
    scope = {"type": "http", "asgi": {"version": "3.0"}, "http_version": "1.1", "method": method,
             "scheme": "http", "path": path, "raw_path": path.encode(), "root_path": "", "query_string": query,
             "headers": [(k.lower(), v) for k, v in headers] + [(b"content-length", str(len(body)).encode())],
             "client": ("127.0.0.1", 5000), "server": ("testserver", 80), "state": {}}
    out: dict[str, Any] = {"status": None, "body": b""}
    sent = False

    async def receive() -> dict[str, Any]:
        nonlocal sent
        if not sent:
            sent = True
            return {"type": "http.request", "body": body, "more_body": False}
        await asyncio.sleep(3600)
        return {"type": "http.disconnect"}

    async def send(message: dict[str, Any]) -> None:
        if message["type"] == "http.response.start":
            out["status"] = message["status"]
        elif message["type"] == "http.response.body":
            out["body"] += message.get("body", b"")
            if out["status"] == 200 and message.get("more_body"):
                raise _Done()  # a stream's first chunk: enough

    async def run() -> None:
        with contextlib.suppress(_Done, TimeoutError):
            await asyncio.wait_for(app(scope, receive, send), 20)

    asyncio.run(run())
    return out
