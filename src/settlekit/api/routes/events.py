"""The tenant's event feed (scope `jobs:read`): catch-up pages (`GET /v1/events`) and a Server-Sent Events stream
(`GET /v1/events/stream`). Both are commit-safe: an event is never passed over because its transaction commits
after a later position's (dispatch/feed.py), so following `next` (or the SSE ids) sees every committed event of
the tenant once, in position order. Positions are shown as opaque tokens bound to the tenant (settlekit/cursors.py):
a global position would count every other tenant's events."""

from __future__ import annotations

import functools
import re
from typing import Annotated, Any

from fastapi import APIRouter, Header, Query, Request
from pydantic import BaseModel, Field
from starlette.responses import Response

from settlekit.api.auth import ApiKey, still_active
from settlekit.api.deps import CURSOR_PATTERN, ApiContext, PageLimit, context, cursors_ready, require
from settlekit.api.feed import FeedStreams
from settlekit.api.openapi import problems
from settlekit.cursors import Cursors
from settlekit.errors import ConfigurationError, ValidationError

router = APIRouter(prefix="/v1", tags=["events"])

MAX_TYPES = 50
_TYPE = "[A-Za-z0-9_.:-]{1,100} *"
TYPES_PATTERN = f"^( *{_TYPE}(, *{_TYPE}){{0,{MAX_TYPES - 1}}})?$"  # spaces around the commas allowed
_TYPES = re.compile(TYPES_PATTERN)
TypesQuery = Annotated[str | None, Query(pattern=TYPES_PATTERN, description=(
    f"event types to include, comma separated (spaces around names allowed), at most {MAX_TYPES} (absent or empty: "
    "every type)"))]


class FeedItem(BaseModel):
    position: str = Field(description="the event's position as an opaque cursor of the tenant (`after` of a "
                                      "later read, the SSE id)", pattern=CURSOR_PATTERN)
    event: dict[str, Any] = Field(description="the event envelope exactly as stored")


class FeedPageOut(BaseModel):
    """A page of the tenant's events in position order. Ask again with `after=next`: the last event's cursor when
    the page is full, else the cursor past every settled event of the tenant (it moves only with the tenant's own
    events)."""

    events: list[FeedItem]
    next: str = Field(pattern=CURSOR_PATTERN)


# an `after` or Last-Event-ID that is not a cursor the API returned to the tenant, or a number (an old position)
_FEED_PROBLEMS = problems("CURSOR_INVALID", "CURSOR_NUMERIC")


def parse_types(value: str | None) -> tuple[str, ...]:
    """The `types` filter: comma-separated event types, at most MAX_TYPES (repeats count once)."""
    if not value:
        return ()
    if not _TYPES.fullmatch(value):
        raise ValidationError(f"types must be at most {MAX_TYPES} comma-separated event type names",
                              code="SCHEMA_INVALID", field="types")
    return tuple(dict.fromkeys(name.strip(" ") for name in value.split(",")))


def feed_streams(ctx: ApiContext) -> FeedStreams:
    if ctx.feed is None:
        raise ConfigurationError("this API was built without the event feed", code="CONFIGURATION_INVALID")
    return ctx.feed


AfterQuery = Annotated[str | None, Query(min_length=1, max_length=200, pattern=CURSOR_PATTERN,
                                         description="a position cursor the API returned (`next`, an event's "
                                                     "`position`, an SSE id, an append's `positions`); absent "
                                                     "or `0`: from the first event")]


def start_position(cursors: Cursors, tenant_id: str, cursor: str | None, *, field: str) -> int:
    """The position a feed read starts after: 0 for none (or `0`), else the one the tenant's cursor carries."""
    if cursor is None or cursor == "0":
        return 0
    return cursors.position(tenant_id, cursor, field=field)


@router.get("/events", summary="The tenant's events past a position (commit-safe catch-up)",
            response_model=FeedPageOut, responses=_FEED_PROBLEMS)
def list_events(request: Request, key: ApiKey = require("jobs:read"), after: AfterQuery = None,
                types: TypesQuery = None, limit: PageLimit = 100) -> Response:
    ctx = context(request)
    start = start_position(ctx.cursors, key.tenant_id, after, field="after")
    page = feed_streams(ctx).reader.read(key.tenant_id, start, types=parse_types(types), limit=limit)
    tokens = ctx.cursors.encode_all("event", key.tenant_id, [e.position for e in page.events] + [page.next])
    # the stored envelopes go out as they are, without a parse and a re-encode
    items = ",".join(f'{{"position":"{t}","event":{e.raw_json}}}' for t, e in zip(tokens, page.events, strict=False))
    return Response(f'{{"events":[{items}],"next":"{tokens[-1]}"}}'.encode(), media_type="application/json")


def _resume_position(cursors: Cursors, tenant_id: str, last_event_id: str | None, after: str | None) -> int:
    """Where a stream starts: after the Last-Event-ID a reconnecting client sends, else after `after`."""
    if last_event_id is None or not last_event_id.strip():
        return start_position(cursors, tenant_id, after, field="after")
    text = last_event_id.strip()
    if not re.fullmatch(CURSOR_PATTERN, text):
        raise ValidationError("Last-Event-ID must be the id of an event of this stream", code="CURSOR_INVALID",
                              field="Last-Event-ID")
    return start_position(cursors, tenant_id, text, field="Last-Event-ID")


def _sse_message(event: str, data_ref: str, description: str, **members: Any) -> dict[str, Any]:
    """One kind of SSE message as schemathesis and OpenAPI 3.1 read a text/event-stream schema: an object with
    `event`, `data` (JSON of `data_ref`'s shape) and optional `id` and `retry`."""
    return {"type": "object", "description": description, "required": ["event", "data", *members],
            "additionalProperties": False,
            "properties": {"event": {"const": event},
                           "data": {"type": "string", "contentMediaType": "application/json",
                                    "contentSchema": {"$ref": f"#/components/schemas/{data_ref}"}},
                           "id": {"type": "string"}, "retry": {"type": "integer", "minimum": 0}} | members}


SSE_MESSAGE = {"oneOf": [
    _sse_message("message", "Event", "An event: `id` is its position cursor (send it back as Last-Event-ID), "
                 "`data` the envelope as stored.", id={"type": "string", "pattern": CURSOR_PATTERN}),
    _sse_message("problem", "Problem", "The last message of a stream that cannot go on: `data` is the problem, "
                 "`retry` its Retry-After in milliseconds; `id` repeats the last event's."),
]}
"""A message of the event stream (comment lines, the heartbeats, are not messages)."""

_STREAM_RESPONSES: dict[int | str, dict[str, Any]] = {
    200: {"description": "text/event-stream: one message per event (`id:` its position cursor, `data:` the "
                         "envelope as stored); comment lines as heartbeats; a stream that cannot go on (e.g. "
                         "DATABASE_UNAVAILABLE) ends with one `event: problem` message (`data:` the problem body, "
                         "`retry:` its Retry-After in ms): resume with Last-Event-ID. The schema is that of one "
                         "message.",
          "content": {"text/event-stream": {"schema": SSE_MESSAGE}}},
    **problems("CURSOR_INVALID", "CURSOR_NUMERIC", "FEED_STREAM_LIMIT"),
}


@router.get("/events/stream", summary="The tenant's events as Server-Sent Events (resume with Last-Event-ID)",
            response_class=Response, responses=_STREAM_RESPONSES)
async def stream_events(request: Request, key: ApiKey = require("jobs:read"), after: AfterQuery = None,
                        types: TypesQuery = None, limit: PageLimit = 100,
                        last_event_id: Annotated[str | None, Header(
                            max_length=200, description="the id of the last event received (resume after it)")] = None,
                        ) -> Response:
    ctx = context(request)
    start = _resume_position(await cursors_ready(ctx), key.tenant_id, last_event_id, after)
    return feed_streams(ctx).response(key.tenant_id, start, parse_types(types), limit,
                                      key_active=functools.partial(still_active, ctx.db, key),
                                      event_ids=functools.partial(ctx.cursors.encode_all, "event", key.tenant_id))
