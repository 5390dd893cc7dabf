"""The ZoneCoverageFacts.v1 document (settld's proof verifier): which zones a booking requires, the latest
coverage report per zone and the zones excused by incidents. Used by the server rules (the settlement proof
gate) and by the artifact builders (effective proof); both fold the stream into the same two accumulators with
`observe_coverage_report` and `observe_excuse_incident` (settld has one proof verifier for both)."""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any, Final, Protocol

from settlekit.errors import ValidationError
from settlekit.events import js
from settlekit.events.js import (
    coalesce,
    get,
    js_is_safe_integer,
    js_sorted,
    js_string,
    js_trim,
    locale_key,
    nonblank,
    truthy,
)

DEFAULT_THRESHOLD_PCT: Final = 95
DEFAULT_EXCUSE_TYPES: Final = ("BLOCKED_ZONE",)


class ZoneSetInvalid(ValidationError):
    code = "ZONE_SET_INVALID"


class CoverageFacts(Protocol):
    """The two accumulators the document is computed from (an artifact fold state, or the server rules' facts):
    latest coverage report per zone id, and the zones excused per incident type."""

    @property
    def coverage(self) -> Mapping[str, Mapping[str, Any]]: ...

    @property
    def excused(self) -> Mapping[str, Mapping[str, bool]]: ...


def _zone_id(v: Any) -> str:
    """The zone id of a payload field, trimmed as by JavaScript ("" when it is not a string)."""
    return js_trim(v) if type(v) is str else ""


def _end_ms(window: Any) -> float:
    """`Date.parse` of `window.endAt`: milliseconds, or NaN when absent or unparseable (never infinite)."""
    return js.date_parse_ms(window.get("endAt") if type(window) is dict else None)


def _id_text(v: Any) -> str:
    """`String(id ?? "")`: only a missing id is empty (an id 0 or False is text, not "no id")."""
    return "" if v is None else str(v)


def observe_coverage_report(coverage: dict[str, dict[str, Any]], event: Mapping[str, Any]) -> None:
    """Fold a ZONE_COVERAGE_REPORTED event into `coverage` (trimmed zone id -> latest report), as settld's proof
    verifier picks the latest report: a parseable `window.endAt` later than the kept one (or replacing an
    unparseable one) wins; on equal ends the greater event id (UTF-16 order) wins, and a missing id never does.
    A payload without a zone id is ignored."""
    p = event.get("payload")
    if type(p) is not dict:
        return
    zone_id = _zone_id(p.get("zoneId"))
    if not zone_id:
        return
    window = p.get("window")
    report = {
        "eventId": event.get("id"),
        "chainHash": event.get("chainHash"),
        "at": event.get("at"),
        "coveragePct": p.get("coveragePct"),
        "window": window,
    }
    prev = coverage.get(zone_id)
    if prev is None:
        coverage[zone_id] = report
        return
    end, prev_end = _end_ms(window), _end_ms(prev["window"])
    if math.isfinite(end) and (not math.isfinite(prev_end) or end > prev_end):
        coverage[zone_id] = report
    elif end == prev_end:
        new_id, prev_id = _id_text(event.get("id")), _id_text(prev["eventId"])
        if new_id and (not prev_id or js.utf16_key(new_id) > js.utf16_key(prev_id)):
            coverage[zone_id] = report


def observe_excuse_incident(excused: dict[str, dict[str, bool]], event: Mapping[str, Any]) -> None:
    """Fold an INCIDENT_REPORTED / INCIDENT_DETECTED event into `excused` (incident type -> trimmed zone ids);
    which types excuse a zone is the booking's policy, applied when the document is built."""
    p = event.get("payload")
    if type(p) is not dict:
        return
    itype = p.get("type")
    zone_id = _zone_id(p.get("zoneId"))
    if type(itype) is str and itype and zone_id:
        excused.setdefault(itype, {})[zone_id] = True


def _validate_zone_set(zone_set: Any) -> list[str]:
    """ZoneSet.v1 checks of settld's proof verifier; returns the zone ids (untrimmed, in order)."""
    if type(zone_set) is not dict:
        raise ZoneSetInvalid("requiredZones must be an object")
    unknown = set(zone_set) - {"schemaVersion", "zoneSetId", "zones"}
    if unknown:
        raise ZoneSetInvalid(f"requiredZones has unknown field {sorted(unknown)[0]}")
    if zone_set.get("schemaVersion") != "ZoneSet.v1":
        raise ZoneSetInvalid("requiredZones.schemaVersion is not supported")
    if not nonblank(zone_set.get("zoneSetId")):
        raise ZoneSetInvalid("requiredZones.zoneSetId must be a non-empty string")
    zones = zone_set.get("zones")
    if type(zones) is not list or not zones:
        raise ZoneSetInvalid("requiredZones.zones must be a non-empty array")
    seen: set[str] = set()
    ids: list[str] = []
    for i, z in enumerate(zones):
        if type(z) is not dict:
            raise ZoneSetInvalid(f"requiredZones.zones[{i}] must be an object")
        if set(z) - {"zoneId", "label", "areaSqFt"}:
            raise ZoneSetInvalid(f"requiredZones.zones[{i}] has an unknown field")
        zone_id = z.get("zoneId")
        if not nonblank(zone_id):
            raise ZoneSetInvalid(f"requiredZones.zones[{i}].zoneId must be a non-empty string")
        assert isinstance(zone_id, str)
        label = z.get("label")
        if label is not None and not nonblank(label):
            raise ZoneSetInvalid(f"requiredZones.zones[{i}].label must be a non-empty string")
        area = z.get("areaSqFt")
        if area is not None and (type(area) not in (int, float) or not area > 0 or area == float("inf")):
            raise ZoneSetInvalid(f"requiredZones.zones[{i}].areaSqFt must be a positive number")
        if js_trim(zone_id) in seen:
            raise ZoneSetInvalid("requiredZones zone ids must be unique")
        seen.add(js_trim(zone_id))
        ids.append(zone_id)
    return ids


def zone_coverage_facts(fs: CoverageFacts, booking: Any, anchor: str) -> dict[str, Any]:
    """The ZoneCoverageFacts.v1 document for `anchor`, with the booking at the anchor and the whole slice's
    coverage reports and excuse incidents."""
    threshold_pct, excuse_types = _zone_coverage_policy(booking)
    excuse_sorted = js_sorted(set(excuse_types))
    required = coalesce(get(booking, "requiredZones"))
    doc: dict[str, Any] = {
        "schemaVersion": "ZoneCoverageFacts.v1",
        "evaluatedAtChainHash": anchor,
        "requiredZonesHash": get(booking, "requiredZonesHash"),
        "thresholdPct": threshold_pct,
        "requiredZoneIds": [],
        "coverageByZone": [],
        "excusedZones": [],
        "excuseIncidentTypes": excuse_sorted,
    }
    if not truthy(required) or type(required) not in (dict, list):
        return doc
    required_ids = _validate_zone_set(required)
    rows = _coverage_rows(fs, set(required_ids))
    excused: set[str] = set()
    for t in set(excuse_types):
        zones = fs.excused.get(t)
        if zones:
            excused.update(zones)
    doc["requiredZoneIds"] = js_sorted(set(required_ids))
    doc["coverageByZone"] = rows
    doc["excusedZones"] = js_sorted(excused)
    return doc


def _zone_coverage_policy(booking: Any) -> tuple[Any, list[Any]]:
    """`(thresholdPct, excuseIncidentTypes)` of the booking's proof policy, defaults filled in."""
    policy_snapshot = get(booking, "policySnapshot")
    proof_policy = coalesce(get(policy_snapshot, "proofPolicy"), get(policy_snapshot, "proof"))
    zc = coalesce(get(proof_policy, "zoneCoverage"), {})
    threshold = get(zc, "thresholdPct")
    threshold_pct = threshold if js_is_safe_integer(threshold) else DEFAULT_THRESHOLD_PCT
    raw_types = get(zc, "excuseIncidentTypes")
    excuse_types = [js_string(t) for t in raw_types] if type(raw_types) is list else list(DEFAULT_EXCUSE_TYPES)
    return threshold_pct, excuse_types


def _coverage_rows(fs: CoverageFacts, wanted: set[str]) -> list[dict[str, Any]]:
    """The latest coverage report of each wanted zone, sorted by zone id then event id."""
    rows = []
    for zone_id, report in fs.coverage.items():
        if zone_id not in wanted:
            continue
        pct = report["coveragePct"]
        rows.append(
            {
                "zoneId": zone_id,
                "coveragePct": pct if js_is_safe_integer(pct) else None,
                "window": report["window"],
                "eventId": report["eventId"],
                "chainHash": report["chainHash"],
                "at": report["at"],
            }
        )
    rows.sort(key=lambda r: (locale_key(r["zoneId"]), locale_key(str(coalesce(r["eventId"], "")))))
    return rows
