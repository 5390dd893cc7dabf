"""Payload check for ZONE_COVERAGE_REPORTED, as settld's `core/zone-coverage.js` validates it."""

from __future__ import annotations

from typing import Any, Final

from settlekit.jobs.api_payloads._js import (
    date_parse,
    field,
    int_in_range,
    is_hex64,
    is_nullish,
    iso_date,
    js_trim,
    non_empty_string,
    object_with_fields,
    one_of,
    reject,
)

COVERAGE_SOURCES: Final = frozenset({"robot", "platform"})

_FIELDS: Final = frozenset({"jobId", "zoneId", "coveragePct", "window", "coverageMapHash", "source"})
_WINDOW_FIELDS: Final = frozenset({"startAt", "endAt"})


def validate_zone_coverage_reported(payload: Any) -> None:
    object_with_fields(payload, _FIELDS, "payload")
    non_empty_string(field(payload, "jobId"), "payload.jobId")
    non_empty_string(field(payload, "zoneId"), "payload.zoneId")

    int_in_range(field(payload, "coveragePct"), "payload.coveragePct", 0, 100)

    window = field(payload, "window")
    object_with_fields(window, _WINDOW_FIELDS, "payload.window")
    start_at = field(window, "startAt")
    end_at = field(window, "endAt")
    iso_date(start_at, "payload.window.startAt")
    iso_date(end_at, "payload.window.endAt")
    if date_parse(start_at) > date_parse(end_at):  # an empty window (start == end) is allowed here
        reject("payload.window.startAt must be <= payload.window.endAt")

    coverage_map_hash = field(payload, "coverageMapHash")
    if not is_nullish(coverage_map_hash):
        non_empty_string(coverage_map_hash, "payload.coverageMapHash")
        if not is_hex64(js_trim(coverage_map_hash)):
            reject("payload.coverageMapHash must be 64-hex when provided")

    one_of(field(payload, "source"), COVERAGE_SOURCES, "payload.source")
