"""Payload checks for the access events (plan issued, granted/denied, revoked/expired), as settld's
`core/access.js` validates them."""

from __future__ import annotations

import re
from typing import Any, Final

from settlekit.jobs.api_payloads._js import (
    MISSING,
    date_parse,
    field,
    iso_date,
    js_keys,
    non_empty_string,
    only_fields,
    plain_object,
    reject,
    string_array,
)

ACCESS_METHODS: Final = frozenset({"SMART_LOCK_CODE", "BUILDING_CONCIERGE", "ON_SITE_OWNER", "DOCKED_IN_BUILDING"})

# A key naming a secret, anywhere in the payload. JS `/i` without `u` folds ASCII letters only, and its `$` is the
# end of input.
_FORBIDDEN_KEY: Final = re.compile(
    r"(pass(word|code)?|pin|secret|token|lockcode|accesscode|code)\Z", re.IGNORECASE | re.ASCII
)

_PLAN_FIELDS: Final = frozenset(
    {"jobId", "accessPlanId", "method", "credentialRef", "scope", "validFrom", "validTo", "revocable", "requestedBy"}
)
_SCOPE_FIELDS: Final = frozenset({"areas", "noGo"})
_RESULT_FIELDS: Final = frozenset({"jobId", "accessPlanId", "method", "reason"})
_REVOKED_FIELDS: Final = frozenset({"jobId", "accessPlanId", "requestedBy", "reason"})


def _forbidden_key_path(value: Any, path: str = "") -> str | None:
    """Path of the first key (depth first, JS key order) that names a secret."""
    if type(value) is list:
        for index, item in enumerate(value):
            hit = _forbidden_key_path(item, f"{path}[{index}]")
            if hit:
                return hit
        return None
    if type(value) is not dict:
        return None
    for key in js_keys(value):
        key_path = f"{path}.{key}" if path else key
        if _FORBIDDEN_KEY.search(key):
            return key_path
        hit = _forbidden_key_path(value[key], key_path)
        if hit:
            return hit
    return None


def _no_secrets(payload: Any) -> None:
    hit = _forbidden_key_path(payload)
    if hit:
        reject(f"access payload contains forbidden key: {hit}")


def _optional_string(payload: dict[str, Any], key: str) -> None:
    value = field(payload, key)
    if value is not MISSING:
        non_empty_string(value, f"payload.{key}")


def _method(method: Any) -> None:
    non_empty_string(method, "payload.method")
    if method not in ACCESS_METHODS:
        reject("payload.method is not a supported access method")


def validate_access_plan_issued(payload: Any) -> None:
    plain_object(payload, "payload")
    _no_secrets(payload)
    only_fields(payload, _PLAN_FIELDS, "payload")

    non_empty_string(field(payload, "jobId"), "payload.jobId")
    non_empty_string(field(payload, "accessPlanId"), "payload.accessPlanId")
    _method(field(payload, "method"))

    credential_ref = field(payload, "credentialRef")
    non_empty_string(credential_ref, "payload.credentialRef")
    if not credential_ref.startswith("vault://"):
        reject("payload.credentialRef must start with vault://")

    scope = field(payload, "scope")
    if scope is not MISSING:
        plain_object(scope, "payload.scope")
        only_fields(scope, _SCOPE_FIELDS, "payload.scope")
        areas = field(scope, "areas")
        if areas is not MISSING:
            string_array(areas, "payload.scope.areas")
        no_go = field(scope, "noGo")
        if no_go is not MISSING:
            string_array(no_go, "payload.scope.noGo")

    valid_from = field(payload, "validFrom")
    valid_to = field(payload, "validTo")
    iso_date(valid_from, "payload.validFrom")
    iso_date(valid_to, "payload.validTo")
    if date_parse(valid_from) >= date_parse(valid_to):
        reject("payload.validFrom must be before payload.validTo")

    if type(field(payload, "revocable")) is not bool:
        reject("payload.revocable must be a boolean")
    _optional_string(payload, "requestedBy")


def validate_access_result(payload: Any, name: str) -> None:
    """ACCESS_GRANTED / ACCESS_DENIED; `name` is the event type (settld passes it but does not use it)."""
    del name
    plain_object(payload, "payload")
    _no_secrets(payload)
    only_fields(payload, _RESULT_FIELDS, "payload")
    non_empty_string(field(payload, "jobId"), "payload.jobId")
    non_empty_string(field(payload, "accessPlanId"), "payload.accessPlanId")
    method = field(payload, "method")
    if method is not MISSING:
        _method(method)
    _optional_string(payload, "reason")


def validate_access_revoked(payload: Any) -> None:
    """ACCESS_REVOKED and ACCESS_EXPIRED."""
    plain_object(payload, "payload")
    _no_secrets(payload)
    only_fields(payload, _REVOKED_FIELDS, "payload")
    non_empty_string(field(payload, "jobId"), "payload.jobId")
    non_empty_string(field(payload, "accessPlanId"), "payload.accessPlanId")
    _optional_string(payload, "requestedBy")
    _optional_string(payload, "reason")
