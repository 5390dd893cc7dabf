"""A finalized envelope as settld 0.1.0's API recorded it: what an import of its history (history mode) stores.

settld's events route builds the stored event from the body's envelope fields alone (`v` defaults to 1, `payload`,
the hashes, `signature` and `signerKeyId` to null; any other field is dropped) and judges it by its own rules: ids
and types are strings JavaScript's `trim` leaves non-empty (any length, white space inside allowed), `at` any
string `Date.parse` reads, `actor` an object whose `type` and `id` are such strings (other keys kept), and a
`schemaVersion` (or `schema_version`) is absent, blank or a value `Number` reads as 1 (on a stream's first event,
made by settld's job route, it is not read). New input gets settlekit's
stricter envelope rules instead (`envelope.check_envelope_shape`); this module is for recorded history only.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from typing import Any, Final

from settlekit.errors import ValidationError
from settlekit.events.envelope import ENVELOPE_FIELDS, Event
from settlekit.events.js import date_parse_ms, js_nonblank, js_to_string, js_trim

_DECIMAL: Final = re.compile(r"[+-]?(?:[0-9]+\.?[0-9]*|\.[0-9]+)(?:[eE][+-]?[0-9]+)?", re.ASCII)
_RADIX: Final = {"0x": (16, "0123456789abcdefABCDEF"), "0o": (8, "01234567"), "0b": (2, "01")}


def js_number(value: Any) -> float:
    """JavaScript's `Number(value)` for a JSON value (NaN where it gives NaN)."""
    if value is None:
        return 0.0
    if value is True or value is False:
        return float(value)
    if type(value) in (int, float):
        return float(value)
    text = js_trim(js_to_string(value))
    if text == "":
        return 0.0
    if text in ("Infinity", "+Infinity"):
        return math.inf
    if text == "-Infinity":
        return -math.inf
    radix = _RADIX.get(text[:2].lower())
    if radix is not None:
        base, digits = radix
        body = text[2:]
        return float(int(body, base)) if body and all(c in digits for c in body) else math.nan
    if _DECIMAL.fullmatch(text):
        try:
            return float(text)
        except (OverflowError, ValueError):  # pragma: no cover - float() reads every decimal literal
            return math.nan
    return math.nan


def check_schema_version(item: Mapping[str, Any], index: int) -> None:
    """settld's reading of a body's `schemaVersion ?? schema_version`: absent, null or blank is version 1; else
    `Number` of it must be the integer 1 (SCHEMA_INVALID with settld's message)."""
    raw = item.get("schemaVersion")
    if raw is None:
        raw = item.get("schema_version")
    if raw is None or js_trim(js_to_string(raw)) == "":
        return
    n = js_number(raw)
    if not math.isfinite(n) or not n.is_integer():
        raise ValidationError(f"event {index}: schemaVersion must be an integer", code="SCHEMA_INVALID",
                              index=index, field="schemaVersion")
    if n != 1:
        raise ValidationError(f"event {index}: unsupported event schemaVersion", code="SCHEMA_INVALID",
                              index=index, field="schemaVersion", supported=[1])


def recorded_envelope(item: Mapping[str, Any], index: int) -> Event:
    """The event settld stores for the finalized envelope `item`, judged by its API's envelope rules (not the
    chain, the stream or the time: the append checks those). Raises SCHEMA_INVALID naming the field.

    Only the envelope fields are kept (others, `schemaVersion` included, are dropped as settld drops them);
    a missing `v` is 1 and a missing payload, hash or signature field is null. `signature` and `signerKeyId`
    are kept as recorded, an empty string included (settld reads it as no signature); a value that is neither
    a string nor null is refused, since the store keeps them as text."""
    if item.get("prevChainHash") is not None:  # a stream's first event comes from settld's job route, which
        check_schema_version(item, index)      # reads no schemaVersion (its events route does)
    event: Event = {field: item.get(field) for field in ENVELOPE_FIELDS}
    if event["v"] is None:
        event["v"] = 1

    def bad(field: str, why: str) -> ValidationError:
        return ValidationError(f"event {index}: {field} {why}", code="SCHEMA_INVALID", index=index, field=field)

    if type(event["v"]) not in (int, float) or event["v"] != 1:
        raise bad("v", "must be 1")
    event["v"] = 1
    for field in ("id", "streamId", "type", "payloadHash", "chainHash"):
        if not js_nonblank(event[field]):
            raise bad(field, "must be a non-empty string")
    if not js_nonblank(event["at"]) or math.isnan(date_parse_ms(event["at"])):
        raise bad("at", "must be an ISO date string")
    actor = event["actor"]
    if type(actor) is not dict:
        raise bad("actor", "must be an object")
    for key in ("type", "id"):
        if not js_nonblank(actor.get(key)):
            raise bad(f"actor.{key}", "must be a non-empty string")
    prev = event["prevChainHash"]
    if prev is not None and type(prev) is not str:
        raise bad("prevChainHash", "must be null or a string")
    for field in ("signature", "signerKeyId"):
        if event[field] is not None and type(event[field]) is not str:
            raise bad(field, "must be null or a string")
    return event


def dropped_fields(item: Mapping[str, Any]) -> list[str]:
    """The fields of `item` that `recorded_envelope` leaves out (settld drops them too)."""
    return sorted(k for k in item if k not in ENVELOPE_FIELDS)


MAX_RECORDED_DEPTH: Final = 10_000
"""Arrays and objects nested deeper than this in a recorded event are refused (JSON_INVALID). settld's canonical JSON
recurses, so its hash (hence its API) stops near 2,200 levels under node's default stack: anything it stored is far
within. settlekit reads, hashes, stores and serves recorded events without recursion, and the databases' own JSON
readers (a job listing's status filter) are kept from the rare deeper snapshot."""


def check_nesting(event: Mapping[str, Any], index: int, limit: int = MAX_RECORDED_DEPTH) -> None:
    """Refuse an event whose arrays and objects nest more than `limit` levels, the event's own object the first
    (walked without recursion)."""
    stack: list[tuple[Any, int]] = [(event, 1)]
    while stack:
        item, depth = stack.pop()
        if type(item) is dict:
            children: Any = item.values()
        elif type(item) is list:
            children = item
        else:
            continue
        if depth > limit:
            raise ValidationError(f"event {index}: nests arrays and objects deeper than {limit} levels",
                                  code="JSON_INVALID", index=index, limit=limit)
        stack.extend((child, depth + 1) for child in children)
