"""Request guards, before a route sees a request: the raw body size limit, no U+0000 or lone surrogate in the
path, query, headers or JSON body, and the JavaScript-like body parser of the append route."""

from __future__ import annotations

import json
import re
from typing import Any

from starlette.types import Scope

from settlekit.errors import SettlekitError
from settlekit.events.canonical import check_json_strings, parse_request_json
from settlekit.events.js import js_trim


def parse_body(raw: bytes) -> Any:
    """A request body read as settld reads one: the bytes as UTF-8 (no other encoding is guessed), white space
    JavaScript's `trim` removes taken off both ends (a BOM, U+00A0, U+2028, …, not only JSON's own), then parsed like
    JavaScript JSON.parse (unsafe integers become doubles; NaN/Infinity refused). Bytes that are not UTF-8 are
    refused (settld would read them as U+FFFD). Strings holding U+0000 or a lone surrogate are refused
    (SCHEMA_INVALID), as everywhere in a request."""
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise SettlekitError("the request body is not valid UTF-8", code="JSON_INVALID", status=400) from exc
    trimmed = js_trim(text)
    try:
        value = parse_request_json(raw if len(trimmed) == len(text) else trimmed.encode("utf-8"))
    except (ValueError, RecursionError) as exc:
        raise SettlekitError("the request body is not valid JSON", code="JSON_INVALID", status=400) from exc
    if raw.count(b"[") + raw.count(b"{") > MAX_BODY_DEPTH and _deeper_than(value, MAX_BODY_DEPTH):
        raise SettlekitError(f"the request body nests arrays and objects deeper than {MAX_BODY_DEPTH} levels",
                             code="JSON_INVALID", status=400)
    if _SUSPECT_ESCAPE.search(raw):
        check_json_strings(value)
    return value


MAX_BODY_DEPTH = 256
"""Arrays and objects nested deeper than this are refused: every later step (checks, hashing, the domain) walks
a value recursively, and the parser itself stops near Python's recursion limit, at a depth that depends on the
stack it runs on."""


def _deeper_than(value: Any, limit: int) -> bool:
    """Whether `value` nests arrays and objects more than `limit` levels deep (walked without recursion)."""
    stack: list[tuple[Any, int]] = [(value, 0)]
    while stack:
        item, depth = stack.pop()
        if isinstance(item, dict):
            item = item.values()
        elif not isinstance(item, list):
            continue
        if depth == limit:
            return True
        stack.extend((child, depth + 1) for child in item)
    return False



# Every string a request brings (path, query, headers, JSON body) must be storable text on both backends:
# PostgreSQL refuses U+0000 in text and JSON, and a lone surrogate cannot be encoded as UTF-8.

# A JSON escape that can produce U+0000 or a surrogate: the body is walked only when one is present.
_SUSPECT_ESCAPE = re.compile(rb"\\u(?:0000|[dD][89a-fA-F][0-9a-fA-F]{2})")


class InputError(SettlekitError):
    """U+0000 in a request's path, query or headers (a JSON body's strings answer SCHEMA_INVALID instead):
    refused by api.middleware before authentication or a route."""

    code = "INPUT_INVALID"
    status = 400


def check_text(value: str, field: str) -> str:
    """`value` unless it holds U+0000 or a lone surrogate (InputError naming `field`)."""
    if "\x00" in value:
        raise InputError(f"{field} must not contain U+0000", field=field)
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        raise InputError(f"{field} must not contain a lone surrogate", field=field) from None
    return value


def check_request_head(scope: Scope) -> None:
    """Path, query string and header values of a request: no U+0000 (percent-encoded or not)."""
    if "\x00" in scope.get("path", ""):
        raise InputError("the path must not contain U+0000", field="path")
    query: bytes = scope.get("query_string", b"")
    if b"\x00" in query or b"%00" in query:
        raise InputError("the query string must not contain U+0000", field="query")
    for name, value in scope.get("headers", ()):
        if b"\x00" in value:
            raise InputError("a header must not contain U+0000", field=name.decode("latin-1"))


def check_json_body(body: bytes) -> None:
    """A JSON request body whose strings hold U+0000 or a lone surrogate: SCHEMA_INVALID. Bodies that are not JSON
    are left to the route's parser (which answers JSON_INVALID)."""
    if not _SUSPECT_ESCAPE.search(body):
        return
    try:
        value = json.loads(body, parse_int=_ignore, parse_float=_ignore, parse_constant=_ignore)
    except (ValueError, RecursionError):
        return
    check_json_strings(value)


def _ignore(text: str) -> None:
    return None
