"""The tenant's event feed (scope `jobs:read`): catch-up pages (`GET /v1/events`) and a Server-Sent Events stream
(`GET /v1/events/stream`). Both are commit-safe: an event is never passed over because its transaction commits
after a later position's (dispatch/feed.py), so following `next` (or the SSE ids) sees every committed event of
the tenant once, in position order."""

from __future__ import annotations

import functools
import re
from typing import Annotated, Any

from fastapi import APIRouter, Header, Query, Request
from pydantic import BaseModel, Field
from starlette.responses import Response

from settlekit.api.auth import ApiKey, still_active
from settlekit.api.deps import MAX_INT64, ApiContext, PageLimit, PositionQuery, context, require
from settlekit.api.feed import FeedStreams
from settlekit.errors import ConfigurationError, ValidationError

router = APIRouter(prefix="/v1", tags=["events"])

MAX_TYPES = 50
_TYPE = re.compile(r"[A-Za-z0-9_.:-]{1,100}")
TypesQuery = Annotated[str | None, Query(max_length=5000, description="event types to include, comma separated "
                                                                       "(default: every type)")]


class FeedItem(BaseModel):
    position: int = Field(description="the event's global position (the feed's cursor)")
    event: dict[str, Any] = Field(description="the event envelope exactly as stored")


class FeedPageOut(BaseModel):
    """A page of the tenant's events in position order. Ask again with `after=next`: it is the last event's
    position when the page is full, else the highest position known to be settled (it may lie past other
    tenants' events)."""

    events: list[FeedItem]
    next: int


def _problem(description: str) -> dict[str, Any]:
    return {"description": description, "content": {"application/problem+json": {}}}


_FEED_PROBLEMS: dict[int | str, dict[str, Any]] = {
    400: _problem("SCHEMA_INVALID: a malformed `types`, `after`, `limit` or Last-Event-ID"),
    401: _problem("UNAUTHENTICATED or API_KEY_INVALID"),
    403: _problem("SCOPE_REQUIRED: the key lacks `jobs:read`"),
    429: _problem("RATE_LIMITED"),
}


def parse_types(value: str | None) -> tuple[str, ...]:
    """The `types` filter: comma-separated event types (blank items ignored), at most MAX_TYPES."""
    if value is None:
        return ()
    types = tuple(dict.fromkeys(part.strip() for part in value.split(",") if part.strip()))
    if len(types) > MAX_TYPES or not all(_TYPE.fullmatch(t) for t in types):
        raise ValidationError(f"types must be at most {MAX_TYPES} comma-separated event type names",
                              code="SCHEMA_INVALID", field="types")
    return types


def feed_streams(ctx: ApiContext) -> FeedStreams:
    if ctx.feed is None:
        raise ConfigurationError("this API was built without the event feed", code="CONFIGURATION_INVALID")
    return ctx.feed


@router.get("/events", summary="The tenant's events past a position (commit-safe catch-up)",
            response_model=FeedPageOut, responses=_FEED_PROBLEMS)
def list_events(request: Request, key: ApiKey = require("jobs:read"), after: PositionQuery = 0,
                types: TypesQuery = None, limit: PageLimit = 100) -> Response:
    page = feed_streams(context(request)).reader.read(key.tenant_id, after, types=parse_types(types), limit=limit)
    # the stored envelopes go out as they are, without a parse and a re-encode
    items = ",".join(f'{{"position":{e.position},"event":{e.raw_json}}}' for e in page.events)
    return Response(f'{{"events":[{items}],"next":{page.next}}}'.encode(), media_type="application/json")


def _resume_position(last_event_id: str | None, after: int) -> int:
    """Where a stream starts: after the Last-Event-ID a reconnecting client sends, else after `after`."""
    if last_event_id is None or not last_event_id.strip():
        return after
    text = last_event_id.strip()
    if not (text.isascii() and text.isdigit()) or int(text) > MAX_INT64:  # '²' is a digit to isdigit, not int
        raise ValidationError("Last-Event-ID must be an event position (a non-negative integer)",
                              code="SCHEMA_INVALID", field="Last-Event-ID")
    return int(text)


_STREAM_RESPONSES: dict[int | str, dict[str, Any]] = {
    200: {"description": "text/event-stream: one message per event (`id:` its position, `data:` the envelope as "
                         "stored); comment lines as heartbeats; a stream that cannot go on (e.g. "
                         "DATABASE_UNAVAILABLE) ends with one `event: problem` message (`data:` the problem body, "
                         "`retry:` its Retry-After in ms): resume with Last-Event-ID",
          "content": {"text/event-stream": {"schema": {"type": "string"}}}},
    **_FEED_PROBLEMS,
    429: _problem("FEED_STREAM_LIMIT: the tenant has `feed_max_streams_per_tenant` streams open (Retry-After); "
                  "or RATE_LIMITED"),
}


@router.get("/events/stream", summary="The tenant's events as Server-Sent Events (resume with Last-Event-ID)",
            response_class=Response, responses=_STREAM_RESPONSES)
async def stream_events(request: Request, key: ApiKey = require("jobs:read"), after: PositionQuery = 0,
                        types: TypesQuery = None, limit: PageLimit = 100,
                        last_event_id: Annotated[str | None, Header(max_length=40)] = None) -> Response:
    start = _resume_position(last_event_id, after)
    db = context(request).db
    return feed_streams(context(request)).response(key.tenant_id, start, parse_types(types), limit,
                                                   key_active=functools.partial(still_active, db, key))
