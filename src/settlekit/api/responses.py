"""JSON answers: rendered without FastAPI's encoder pass (event payloads come back exactly as parsed), and the
attachment header of a download."""

from __future__ import annotations

import re
from typing import Any
from urllib.parse import quote

import orjson
from starlette.responses import Response

from settlekit.events.canonical import plain_json

_ORJSON_OPTIONS = orjson.OPT_NON_STR_KEYS


def dumps(value: Any) -> bytes:
    """Compact UTF-8 JSON (not the canonical form: answers are not hashed). orjson where it can; what it refuses
    (integers beyond 64 bits, lone surrogates in strings, more than 255 levels of nesting) takes the standard
    library's path, whose errors stand (`plain_json`: any depth)."""
    try:
        return orjson.dumps(value, option=_ORJSON_OPTIONS)
    except (TypeError, orjson.JSONEncodeError):
        return plain_json(value).encode("utf-8")


class JsonResponse(Response):
    """JSON without FastAPI's encoder pass: event payloads are rendered exactly as parsed."""

    media_type = "application/json"

    def render(self, content: Any) -> bytes:
        return dumps(content)


_UNSAFE_FILENAME = re.compile(r"[^A-Za-z0-9._-]")


def content_disposition(filename: str) -> str:
    """An RFC 6266 attachment header: a quoted ASCII fallback with every other character replaced, and the
    exact name as an RFC 8187 `filename*` (percent-encoded UTF-8), so no name can inject parameters."""
    fallback = _UNSAFE_FILENAME.sub("_", filename).lstrip(".") or "download"
    encoded = quote(filename.encode("utf-8", "surrogatepass"), safe="")
    return f"attachment; filename=\"{fallback}\"; filename*=UTF-8''{encoded}"

