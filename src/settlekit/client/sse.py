"""Server-Sent Events as the client reads them (the WHATWG event-stream format): `id`, `event`, `data` (lines
joined with newlines) and `retry` fields, a blank line ends an event, lines starting with ":" are comments (the
server's heartbeats)."""

from __future__ import annotations

import json
from collections.abc import AsyncIterable, AsyncIterator, Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True)
class ServerSentEvent:
    data: str
    event: str = "message"
    id: str | None = None
    retry: int | None = None

    def json(self) -> Any:
        return json.loads(self.data)


@dataclass
class _Builder:
    data: list[str] = field(default_factory=list)
    event: str | None = None
    id: str | None = None
    retry: int | None = None

    def feed(self, line: str) -> ServerSentEvent | None:
        """Take one line; the event it completes, if any."""
        if line == "":
            return self._dispatch()
        if line.startswith(":"):
            return None
        name, _, value = line.partition(":")
        value = value[1:] if value.startswith(" ") else value
        if name == "data":
            self.data.append(value)
        elif name == "event":
            self.event = value
        elif name == "id" and "\x00" not in value:
            self.id = value
        elif name == "retry" and value.isdigit():
            self.retry = int(value)
        return None

    def _dispatch(self) -> ServerSentEvent | None:
        if not self.data:
            self.event = None
            return None
        out = ServerSentEvent("\n".join(self.data), self.event or "message", self.id, self.retry)
        self.data, self.event = [], None
        return out


def parse(lines: Iterable[str]) -> Iterator[ServerSentEvent]:
    """The events of a stream given line by line (without their line ends)."""
    builder = _Builder()
    for line in lines:
        event = builder.feed(line.rstrip("\r\n"))
        if event is not None:
            yield event


async def aparse(lines: AsyncIterable[str]) -> AsyncIterator[ServerSentEvent]:
    builder = _Builder()
    async for line in lines:
        event = builder.feed(line.rstrip("\r\n"))
        if event is not None:
            yield event
