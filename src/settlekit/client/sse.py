"""Server-Sent Events as the client reads them (the WHATWG event-stream format): `id`, `event`, `data` (lines
joined with newlines) and `retry` fields, a blank line ends an event, lines starting with ":" are comments (the
server's heartbeats)."""

from __future__ import annotations

import json
import re
from collections.abc import AsyncIterable, AsyncIterator, Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any

from settlekit.events.canonical import parse_json_deep


@dataclass(frozen=True)
class ServerSentEvent:
    data: str
    event: str = "message"
    id: str | None = None
    retry: int | None = None

    def json(self) -> Any:
        try:
            return json.loads(self.data)
        except RecursionError:  # imported history may nest thousands of levels: read without recursion
            return parse_json_deep(self.data)


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


def sse_lines(chunks: Iterable[str]) -> Iterator[str]:
    """The lines of an event stream given as text chunks, split where SSE splits them: at CR LF, CR or LF only.
    (httpx's iter_lines splits like str.splitlines, also at U+2028, U+0085, …, which a JSON string may hold: a
    payload could then forge an `id:` line.)"""
    pending = ""
    for chunk in chunks:
        pending += chunk
        lines, pending = _complete_lines(pending)
        yield from lines
    if pending:
        yield pending


async def asse_lines(chunks: AsyncIterable[str]) -> AsyncIterator[str]:
    pending = ""
    async for chunk in chunks:
        pending += chunk
        lines, pending = _complete_lines(pending)
        for line in lines:
            yield line
    if pending:
        yield pending


def _complete_lines(text: str) -> tuple[list[str], str]:
    """(the complete lines of `text`, what is left): a line ended by a CR at the very end is kept back, as its LF
    may come in the next chunk (CR LF is one line end)."""
    held = ""
    if text.endswith("\r"):
        start = max(text.rfind("\n", 0, len(text) - 1), text.rfind("\r", 0, len(text) - 1)) + 1
        text, held = text[:start], text[start:]
    parts = _LINE_END.split(text)
    rest = parts.pop()
    return parts, rest + held


_LINE_END = re.compile(r"\r\n|\r|\n")


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
