"""Payload checks for BOOKED and RESERVED, as settld's `core/booking.js` validates them (with the zone set rules of
`core/zoneset.js` and the policy hash of `core/policy.js`)."""

from __future__ import annotations

import math
from typing import Any, Final

from settlekit.events.canonical import js_number, ordered_keys, quote_string, sha256_hex
from settlekit.events.js import utf16_key
from settlekit.jobs.api_payloads._js import (
    MISSING,
    boolean,
    field,
    is_finite_number,
    is_nullish,
    iso_date,
    js_keys,
    js_trim,
    non_empty_string,
    non_negative_int,
    nullable_hex64,
    nullable_non_empty_string,
    object_with_fields,
    one_of,
    optional_non_empty_string,
    plain_object,
    positive_int,
    reject,
    safe_int,
    start_before_end,
    strictly_equal,
    truthy,
)

ENV_TIERS: Final = frozenset({"ENV_MANAGED_BUILDING", "ENV_HOSPITALITY", "ENV_OFFICE_AFTER_HOURS", "ENV_IN_HOME"})
POLICY_SNAPSHOT_VERSION: Final = "PolicySnapshot.v1"
ZONE_SET_VERSION: Final = "ZoneSet.v1"

_BOOKED_FIELDS: Final = frozenset(
    {
        "paymentHoldId",
        "startAt",
        "endAt",
        "environmentTier",
        "requiresOperatorCoverage",
        "zoneId",
        "requiredZones",
        "requiredZonesHash",
        "sla",
        "customerId",
        "siteId",
        "contractId",
        "contractVersion",
        "customerContractHash",
        "customerCompilerId",
        "creditPolicy",
        "evidencePolicy",
        "policySnapshot",
        "policyHash",
    }
)
_SLA_FIELDS: Final = frozenset({"slaVersion", "mustStartWithinWindow", "maxStallMs", "maxExecutionMs"})
_CREDIT_FIELDS: Final = frozenset({"enabled", "defaultAmountCents", "maxAmountCents", "currency", "ladder"})
_LADDER_TIER_FIELDS: Final = frozenset({"latenessMsGte", "amountCents"})
_EVIDENCE_FIELDS: Final = frozenset({"retentionDays"})
_RESERVED_FIELDS: Final = frozenset({"robotId", "startAt", "endAt", "reservationId", "reservedUntil"})
_ZONE_SET_FIELDS: Final = frozenset({"schemaVersion", "zoneSetId", "zones"})
_ZONE_FIELDS: Final = frozenset({"zoneId", "label", "areaSqFt"})

# JS assigns every key with `out[key] = ...`; for the key "__proto__" that sets the prototype instead of a property.
_PROTO_KEY: Final = "__proto__"


# --- canonical JSON as settld's canonical-json.js computes it on parsed JSON ---


def _is_negative_zero(value: Any) -> bool:
    return type(value) is float and value == 0 and math.copysign(1.0, value) < 0


def _canonical_number_error(value: Any) -> str | None:
    if type(value) is float:
        if not math.isfinite(value):
            return "non-finite"
        if _is_negative_zero(value):
            return "-0"
    return None


def _check_canonicalizable(value: Any) -> None:
    """canonicalJsonStringify's refusals, found in its order (object keys in sorted order, depth first). The walks
    here do not recurse: a recorded payload may nest thousands of levels."""
    stack = [value]
    while stack:
        item = stack.pop()
        problem = _canonical_number_error(item)
        if problem is not None:
            reject(f"Unsupported number for canonical JSON: {problem}")
        if type(item) is list:
            stack.extend(reversed(item))
        elif type(item) is dict:
            stack.extend(item[key] for key in sorted(item, key=utf16_key, reverse=True))


def _check_normalizable(value: Any, path: str) -> None:
    """normalizeForCanonicalJson's refusals (they name the path), found in its order (JS key order)."""
    stack: list[tuple[Any, Any]] = [(value, None)]
    while stack:
        item, node = stack.pop()
        problem = _canonical_number_error(item)
        if problem is not None:
            reject(f"Unsupported number for canonical JSON: {problem} at {_path(path, node)}")
        if type(item) is list:
            stack.extend((item[i], (node, f"[{i}]")) for i in range(len(item) - 1, -1, -1))
        elif type(item) is dict:
            stack.extend((item[key], (node, f".{key}")) for key in reversed(js_keys(item)))


def _path(root: str, node: Any) -> str:
    steps: list[str] = []
    while node is not None:
        node, step = node
        steps.append(step)
    return root + "".join(reversed(steps))


def _sets_prototype(value: Any) -> bool:
    """Whether normalizing leaves some object whose prototype a "__proto__" key replaced with an object (which
    canonicalizing then refuses as non-plain; null or a primitive there leaves it plain)."""
    stack = [value]
    while stack:
        item = stack.pop()
        if type(item) is list:
            stack.extend(item)
        elif type(item) is dict:
            if type(item.get(_PROTO_KEY)) in (dict, list):
                return True
            stack.extend(item.values())
    return False


def _write_canonical(value: Any, out: list[str]) -> None:
    """The text of canonicalJsonStringify (written without recursion): a stack of values to write and of text
    (marked True) to write as it is."""
    stack: list[tuple[bool, Any]] = [(False, value)]
    while stack:
        raw, item = stack.pop()
        if raw:
            out.append(item)
        elif item is None:
            out.append("null")
        elif item is True:
            out.append("true")
        elif item is False:
            out.append("false")
        elif type(item) is str:
            out.append(quote_string(item))
        elif type(item) is int:
            out.append(str(item) if abs(item) <= 2**53 - 1 else js_number(float(item)))
        elif type(item) is float:
            out.append(js_number(item))
        elif type(item) is list:
            out.append("[")
            stack.append((True, "]"))
            for n in range(len(item) - 1, -1, -1):
                stack.append((False, item[n]))
                if n:
                    stack.append((True, ","))
        else:
            keys = ordered_keys([k for k in item if k != _PROTO_KEY])
            out.append("{")
            stack.append((True, "}"))
            for n in range(len(keys) - 1, -1, -1):
                stack.append((False, item[keys[n]]))
                stack.append((True, ("," if n else "") + quote_string(keys[n]) + ":"))


def _canonical_text(value: Any) -> str:
    """canonicalJsonStringify(value) for a JSON value."""
    _check_canonicalizable(value)
    out: list[str] = []
    _write_canonical(value, out)
    return "".join(out)


def _comparable_text(value: Any) -> str:
    """canonicalJsonStringify(normalizeForCanonicalJson(value ?? null)), as booking compares policy parts."""
    value = None if is_nullish(value) else value
    _check_normalizable(value, "$")
    if _sets_prototype(value):
        reject("Unsupported object for canonical JSON: non-plain object")
    return _canonical_text(value)


# --- zone sets (core/zoneset.js) ---


def _validate_zone_set(zone_set: Any) -> None:
    object_with_fields(zone_set, _ZONE_SET_FIELDS, "zoneSet")
    if field(zone_set, "schemaVersion") != ZONE_SET_VERSION:
        reject("zoneSet.schemaVersion is not supported")
    non_empty_string(field(zone_set, "zoneSetId"), "zoneSet.zoneSetId")
    zones = field(zone_set, "zones")
    if type(zones) is not list or not zones:
        reject("zoneSet.zones must be a non-empty array")
    seen: set[str] = set()
    for index, zone in enumerate(zones):
        name = f"zoneSet.zones[{index}]"
        object_with_fields(zone, _ZONE_FIELDS, name)
        zone_id = field(zone, "zoneId")
        non_empty_string(zone_id, f"{name}.zoneId")
        nullable_non_empty_string(field(zone, "label"), f"{name}.label")
        area = field(zone, "areaSqFt")
        if not is_nullish(area) and (not is_finite_number(area) or area <= 0):
            reject(f"{name}.areaSqFt must be a positive number")
        trimmed = js_trim(zone_id)
        if trimmed in seen:
            reject("zoneSet.zones zoneId must be unique")
        seen.add(trimmed)


def zone_set_hash(zone_set: Any) -> str:
    """computeZoneSetHash: the zone set checked (Rejected with settld's message when invalid), then hashed."""
    plain_object(zone_set, "zoneSet")
    _validate_zone_set(zone_set)
    return _zone_set_hash(zone_set)


def _zone_set_hash(zone_set: dict[str, Any]) -> str:
    """computeZoneSetHash of a valid zone set: zones ordered by zoneId (UTF-16 order; ids are unique)."""
    zones = sorted(zone_set["zones"], key=lambda zone: utf16_key(zone["zoneId"]))
    return sha256_hex(_canonical_text({**zone_set, "zones": zones}))


# --- BOOKED ---


def _sla(sla: Any) -> None:
    if is_nullish(sla):
        reject("payload.sla is required")
    object_with_fields(sla, _SLA_FIELDS, "payload.sla")
    safe_int(field(sla, "slaVersion"), "payload.sla.slaVersion")
    boolean(field(sla, "mustStartWithinWindow"), "payload.sla.mustStartWithinWindow")
    positive_int(field(sla, "maxStallMs"), "payload.sla.maxStallMs")
    positive_int(field(sla, "maxExecutionMs"), "payload.sla.maxExecutionMs")


def _credit_policy(credit: Any) -> None:
    if is_nullish(credit):
        reject("payload.creditPolicy is required")
    object_with_fields(credit, _CREDIT_FIELDS, "payload.creditPolicy")
    boolean(field(credit, "enabled"), "payload.creditPolicy.enabled")
    default_cents = field(credit, "defaultAmountCents")
    max_cents = field(credit, "maxAmountCents")
    non_negative_int(default_cents, "payload.creditPolicy.defaultAmountCents")
    non_negative_int(max_cents, "payload.creditPolicy.maxAmountCents")
    one_of(field(credit, "currency"), {"USD"}, "payload.creditPolicy.currency")
    if max_cents > 0 and default_cents > max_cents:
        reject("payload.creditPolicy.defaultAmountCents must be <= maxAmountCents when maxAmountCents > 0")

    ladder = field(credit, "ladder")
    if is_nullish(ladder):
        return
    if type(ladder) is not list:
        reject("payload.creditPolicy.ladder must be an array")
    last_lateness: int | float = -1
    for index, tier in enumerate(ladder):
        name = f"payload.creditPolicy.ladder[{index}]"
        object_with_fields(tier, _LADDER_TIER_FIELDS, name)
        lateness = field(tier, "latenessMsGte")
        amount = field(tier, "amountCents")
        non_negative_int(lateness, "payload.creditPolicy.ladder latenessMsGte")
        non_negative_int(amount, "payload.creditPolicy.ladder amountCents")
        if lateness <= last_lateness:
            reject("payload.creditPolicy.ladder must be strictly increasing by latenessMsGte")
        last_lateness = lateness
        if max_cents > 0 and amount > max_cents:
            reject("payload.creditPolicy.ladder amountCents must be <= maxAmountCents when maxAmountCents > 0")


def _evidence_policy(evidence: Any) -> None:
    if is_nullish(evidence):
        reject("payload.evidencePolicy is required")
    object_with_fields(evidence, _EVIDENCE_FIELDS, "payload.evidencePolicy")
    non_negative_int(field(evidence, "retentionDays"), "payload.evidencePolicy.retentionDays")


def _snapshot_matches_booking(payload: dict[str, Any], snapshot: dict[str, Any]) -> None:
    if not strictly_equal(field(snapshot, "environmentTier"), payload["environmentTier"]):
        reject("policySnapshot.environmentTier mismatch")
    if not strictly_equal(field(snapshot, "requiresOperatorCoverage"), payload["requiresOperatorCoverage"]):
        reject("policySnapshot.requiresOperatorCoverage mismatch")
    for part in ("sla", "creditPolicy", "evidencePolicy"):
        if _comparable_text(field(snapshot, part)) != _comparable_text(payload[part]):
            reject(f"policySnapshot.{part} mismatch")
    if not strictly_equal(field(snapshot, "contractId"), payload["contractId"]):
        reject("policySnapshot.contractId mismatch")
    if not strictly_equal(field(snapshot, "contractVersion"), payload["contractVersion"]):
        reject("policySnapshot.contractVersion mismatch")


def validate_booked(payload: Any) -> None:
    object_with_fields(payload, _BOOKED_FIELDS, "payload")

    optional_non_empty_string(field(payload, "paymentHoldId"), "payload.paymentHoldId")
    start_before_end(field(payload, "startAt"), field(payload, "endAt"), "payload.startAt", "payload.endAt")

    environment_tier = field(payload, "environmentTier")
    if environment_tier is MISSING:
        reject("payload.environmentTier is required")
    one_of(environment_tier, ENV_TIERS, "payload.environmentTier")
    boolean(field(payload, "requiresOperatorCoverage"), "payload.requiresOperatorCoverage")

    nullable_non_empty_string(field(payload, "zoneId"), "payload.zoneId")
    required_zones = field(payload, "requiredZones")
    if not is_nullish(required_zones):
        plain_object(required_zones, "payload.requiredZones")
        if field(required_zones, "schemaVersion") != ZONE_SET_VERSION:
            reject("payload.requiredZones.schemaVersion is not supported")
        _validate_zone_set(required_zones)
    required_zones_hash = field(payload, "requiredZonesHash")
    nullable_hex64(required_zones_hash, "payload.requiredZonesHash")
    nullable_non_empty_string(field(payload, "customerId"), "payload.customerId")
    nullable_non_empty_string(field(payload, "siteId"), "payload.siteId")
    if is_nullish(field(payload, "contractId")):
        reject("payload.contractId is required")
    nullable_non_empty_string(field(payload, "contractId"), "payload.contractId")
    positive_int(field(payload, "contractVersion"), "payload.contractVersion")
    nullable_non_empty_string(field(payload, "customerContractHash"), "payload.customerContractHash")
    nullable_non_empty_string(field(payload, "customerCompilerId"), "payload.customerCompilerId")

    _sla(field(payload, "sla"))
    _credit_policy(field(payload, "creditPolicy"))
    _evidence_policy(field(payload, "evidencePolicy"))

    snapshot = field(payload, "policySnapshot")
    plain_object(snapshot, "payload.policySnapshot")
    if field(snapshot, "schemaVersion") != POLICY_SNAPSHOT_VERSION:
        reject("payload.policySnapshot.schemaVersion is not supported")
    policy_hash = field(payload, "policyHash")
    non_empty_string(policy_hash, "payload.policyHash")
    if sha256_hex(_canonical_text(snapshot)) != policy_hash:
        reject("payload.policyHash does not match payload.policySnapshot")

    if not is_nullish(required_zones):
        if not truthy(required_zones_hash):
            reject("payload.requiredZonesHash is required when payload.requiredZones is provided")
        if _zone_set_hash(required_zones) != required_zones_hash:
            reject("payload.requiredZonesHash does not match payload.requiredZones")

    _snapshot_matches_booking(payload, snapshot)


# --- RESERVED ---


def validate_reserved(payload: Any) -> None:
    object_with_fields(payload, _RESERVED_FIELDS, "payload")
    non_empty_string(field(payload, "robotId"), "payload.robotId")
    start_before_end(field(payload, "startAt"), field(payload, "endAt"), "payload.startAt", "payload.endAt")
    optional_non_empty_string(field(payload, "reservationId"), "payload.reservationId")
    reserved_until = field(payload, "reservedUntil")
    if reserved_until is not MISSING:
        iso_date(reserved_until, "payload.reservedUntil")
