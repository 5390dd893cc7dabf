"""JSON answers: typed answers (the pydantic models of api/schemas.py) and plain JSON values rendered by one
writer, orjson, without FastAPI's encoder pass (event payloads come back exactly as parsed); `TypedRoute`, the
route class whose handlers return those models; and the attachment header of a download.

A model is rendered from its fields as they are (`__dict__`: no copy, no second validation), unless pydantic would
dump it otherwise (an alias, an exclusion, a serializer, extra members): then `model_dump(by_alias=True)`. A
`RootModel` is its root. Stored JSON that a model carries `Verbatim` (api/schemas.py) is rendered as it was
read."""

from __future__ import annotations

import functools
import inspect
import re
from collections.abc import Callable
from typing import Any
from urllib.parse import quote

import orjson
from fastapi.routing import APIRoute
from pydantic import BaseModel, RootModel
from starlette.responses import Response

from settlekit.events.canonical import storable_json

_ORJSON_OPTIONS = orjson.OPT_NON_STR_KEYS
_AS_FIELDS: dict[type[BaseModel], bool] = {}


def _renders_as_fields(cls: type[BaseModel]) -> bool:
    """Whether pydantic's dump of a `cls` is its fields' values as they are, in their order (cached per class)."""
    found = _AS_FIELDS.get(cls)
    if found is None:
        decorators = cls.__pydantic_decorators__
        found = (cls.model_config.get("extra") != "allow" and not cls.__pydantic_computed_fields__
                 and not decorators.field_serializers and not decorators.model_serializers
                 and all(field.alias in (None, name) and field.serialization_alias in (None, name)
                         and not field.exclude and field.exclude_if is None
                         for name, field in cls.__pydantic_fields__.items()))
        _AS_FIELDS[cls] = found
    return found


def _members(value: Any) -> Any:
    """orjson's `default`: what a model is rendered as."""
    if isinstance(value, RootModel):
        return value.root
    if isinstance(value, BaseModel):
        return value.__dict__ if _renders_as_fields(type(value)) else value.model_dump(by_alias=True)
    raise TypeError(f"Type is not JSON serializable: {type(value).__name__}")


def _plain(value: Any) -> Any:
    """A model as plain JSON values (for the standard library's writer)."""
    if isinstance(value, BaseModel):
        return value.model_dump(by_alias=True)
    return value


def dumps(value: Any) -> bytes:
    """Compact UTF-8 JSON of a model or a JSON value (not the canonical form: answers are not hashed). orjson where
    it can; what it refuses (integers beyond 64 bits, lone surrogates in strings, more than 255 levels of nesting)
    takes the store's writer (`storable_json`: any depth, a lone surrogate, which imported history may hold and
    UTF-8 cannot carry, as its `\\uXXXX` escape, as JavaScript's JSON.stringify writes it), whose errors stand."""
    try:
        return orjson.dumps(value, default=_members, option=_ORJSON_OPTIONS)
    except (TypeError, orjson.JSONEncodeError):
        return storable_json(_plain(value)).encode("utf-8")


class JsonResponse(Response):
    """JSON without FastAPI's encoder pass: a typed answer (a model) or a JSON value, rendered by `dumps`."""

    media_type = "application/json"

    def render(self, content: Any) -> bytes:
        return dumps(content)


class TypedRoute(APIRoute):
    """A route whose handler returns its typed answer, a pydantic model: rendered by `dumps` (as JsonResponse)
    with the route's status code. The model is also the route's `response_model` (from the handler's return
    annotation unless the decorator names it), so the OpenAPI document is generated from what the handler returns.
    Headers and a status of the handler's own go on FastAPI's `response: Response` parameter, as with FastAPI's own
    rendering; a Response the handler returns (a problem, a stored answer) is passed on as it is."""

    def __init__(self, path: str, endpoint: Callable[..., Any], **kwargs: Any) -> None:
        super().__init__(path, _rendering(endpoint, kwargs.get("status_code") or 200), **kwargs)


def _rendering(endpoint: Callable[..., Any], status_code: int) -> Callable[..., Any]:
    """`endpoint` with its model answer rendered (FastAPI reads the signature through `__wrapped__`)."""

    def answer(value: Any, arguments: dict[str, Any]) -> Any:
        if not isinstance(value, BaseModel):
            return value
        given = next((v for v in arguments.values() if isinstance(v, Response)), None)  # FastAPI's `response`
        if given is None:
            return JsonResponse(value, status_code=status_code)
        rendered = JsonResponse(value, status_code=given.status_code or status_code)
        rendered.headers.update(given.headers)
        return rendered

    if inspect.iscoroutinefunction(endpoint):
        @functools.wraps(endpoint)
        async def call_async(*args: Any, **kwargs: Any) -> Any:
            return answer(await endpoint(*args, **kwargs), kwargs)

        return call_async

    @functools.wraps(endpoint)
    def call(*args: Any, **kwargs: Any) -> Any:
        return answer(endpoint(*args, **kwargs), kwargs)

    return call


_UNSAFE_FILENAME = re.compile(r"[^A-Za-z0-9._-]")


def content_disposition(filename: str) -> str:
    """An RFC 6266 attachment header: a quoted ASCII fallback with every other character replaced, and the
    exact name as an RFC 8187 `filename*` (percent-encoded UTF-8), so no name can inject parameters."""
    fallback = _UNSAFE_FILENAME.sub("_", filename).lstrip(".") or "download"
    encoded = quote(filename.encode("utf-8", "surrogatepass"), safe="")
    return f"attachment; filename=\"{fallback}\"; filename*=UTF-8''{encoded}"
