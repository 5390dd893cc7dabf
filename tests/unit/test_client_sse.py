"""Server-Sent Events in the client: the event-stream format parsed (ids, event names, multi-line data, comment
heartbeats, retry), a stream route's error answer raised as the typed ApiError, no connection as
API_UNREACHABLE; the same for the async client. A stream route is one method calling `_stream`, as below."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator

import anyio
import httpx
import pytest

from settlekit.client import ApiUnreachableError, AsyncClient, Client
from settlekit.client.errors import ApiValidationError
from settlekit.client.sse import ServerSentEvent, parse

BODY = (": heartbeat\n\nretry: 1500\nid: 7\nevent: event\ndata: {\"position\": 7}\n\n"
        "id: 9\ndata: line one\ndata: line two\n\n: heartbeat\n\ndata: tail\n\n")


class _Sync(Client):
    def tail(self, *, after: int | None = None) -> Iterator[ServerSentEvent]:
        return self._stream("GET /v1/tail", after=after)


class _Async(AsyncClient):
    def tail(self, *, after: int | None = None) -> AsyncIterator[ServerSentEvent]:
        return self._stream("GET /v1/tail", after=after)


def _handler(request: httpx.Request) -> httpx.Response:
    assert request.headers["accept"] == "text/event-stream" and request.headers["authorization"] == "Bearer sk_t"
    if request.url.params.get("after") == "-1":
        return httpx.Response(400, headers={"content-type": "application/problem+json", "x-request-id": "r1"},
                              json={"code": "SCHEMA_INVALID", "status": 400, "detail": "after: must be >= 0"})
    assert request.url.params["after"] == "5"
    return httpx.Response(200, headers={"content-type": "text/event-stream"}, content=BODY.encode())


EXPECTED = [ServerSentEvent('{"position": 7}', "event", "7", 1500), ServerSentEvent("line one\nline two", "message",
                                                                                      "9", 1500),
            ServerSentEvent("tail", "message", "9", 1500)]


def test_the_event_stream_format() -> None:
    events = list(parse(BODY.splitlines()))
    assert events == EXPECTED and events[0].json() == {"position": 7}


def test_a_stream_route_on_the_sync_client() -> None:
    api = _Sync("http://api", "sk_t", http=httpx.Client(base_url="http://api", transport=httpx.MockTransport(_handler)))
    assert list(api.tail(after=5)) == EXPECTED
    with pytest.raises(ApiValidationError) as refused:
        list(api.tail(after=-1))
    assert refused.value.code == "SCHEMA_INVALID" and refused.value.request_id == "r1"

    def refuse(request: httpx.Request) -> httpx.Response:
        raise httpx.ConnectError("refused", request=request)

    down = _Sync("http://api", "sk_t", http=httpx.Client(base_url="http://api", transport=httpx.MockTransport(refuse)))
    with pytest.raises(ApiUnreachableError):
        list(down.tail(after=5))


def test_a_stream_route_on_the_async_client() -> None:
    async def scenario() -> tuple[list[ServerSentEvent], str]:
        http = httpx.AsyncClient(base_url="http://api", transport=httpx.MockTransport(_handler))
        async with _Async("http://api", "sk_t", http=http) as api:
            events = [e async for e in api.tail(after=5)]
            try:
                _ = [e async for e in api.tail(after=-1)]
            except ApiValidationError as exc:
                return events, exc.code
        raise AssertionError("no error")

    events, code = anyio.run(scenario)
    assert events == EXPECTED and code == "SCHEMA_INVALID"
