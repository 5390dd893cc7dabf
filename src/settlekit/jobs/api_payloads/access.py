"""Payload checks for the access events (plan issued, granted/denied, revoked/expired), as settld's
`core/access.js` validates them."""

from __future__ import annotations

import re
from typing import Any, Final

from settlekit.jobs.api_payloads._js import (
    MISSING,
    boolean,
    field,
    js_keys,
    non_empty_string,
    object_with_fields,
    one_of,
    only_fields,
    optional_non_empty_string,
    plain_object,
    reject,
    start_before_end,
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


def _forbidden_key_path(value: Any) -> str | None:
    """Path of the first key (depth first, JS key order) that names a secret. Walked without recursion: each
    stack entry is a value with its path as a chain of (parent, key or index) steps, rendered only for a hit."""
    stack: list[tuple[Any, Any]] = [(value, None)]
    while stack:
        item, node = stack.pop()
        if item is _SECRET_KEY:
            return _key_path(node)
        if type(item) is list:
            stack.extend((item[i], (node, i)) for i in range(len(item) - 1, -1, -1))
        elif type(item) is dict:
            pending: list[tuple[Any, Any]] = []
            for key in js_keys(item):
                if _FORBIDDEN_KEY.search(key):
                    pending.append((_SECRET_KEY, (node, key)))
                    break
                pending.append((item[key], (node, key)))
            stack.extend(reversed(pending))
    return None


_SECRET_KEY: Final = object()  # a key naming a secret, in the walk of `_forbidden_key_path`


def _key_path(node: Any) -> str:
    """`a.b[0].c` for the steps a, b, 0, c (a key right at the start has no dot)."""
    steps: list[str | int] = []
    while node is not None:
        node, step = node
        steps.append(step)
    parts: list[str] = []
    for step in reversed(steps):
        if type(step) is int:
            parts.append(f"[{step}]")
        else:
            parts.append(f".{step}" if any(parts) else str(step))
    return "".join(parts)


def _secret_free_object(payload: Any, allowed: frozenset[str]) -> None:
    """An object without secret-named keys at any depth, then known fields only (settld's order)."""
    plain_object(payload, "payload")
    hit = _forbidden_key_path(payload)
    if hit:
        reject(f"access payload contains forbidden key: {hit}")
    only_fields(payload, allowed, "payload")


def _method(method: Any) -> None:
    one_of(method, ACCESS_METHODS, "payload.method", "is not a supported access method")


def validate_access_plan_issued(payload: Any) -> None:
    _secret_free_object(payload, _PLAN_FIELDS)

    non_empty_string(field(payload, "jobId"), "payload.jobId")
    non_empty_string(field(payload, "accessPlanId"), "payload.accessPlanId")
    _method(field(payload, "method"))

    credential_ref = field(payload, "credentialRef")
    non_empty_string(credential_ref, "payload.credentialRef")
    if not credential_ref.startswith("vault://"):
        reject("payload.credentialRef must start with vault://")

    scope = field(payload, "scope")
    if scope is not MISSING:
        object_with_fields(scope, _SCOPE_FIELDS, "payload.scope")
        areas = field(scope, "areas")
        if areas is not MISSING:
            string_array(areas, "payload.scope.areas")
        no_go = field(scope, "noGo")
        if no_go is not MISSING:
            string_array(no_go, "payload.scope.noGo")

    start_before_end(field(payload, "validFrom"), field(payload, "validTo"), "payload.validFrom", "payload.validTo")

    boolean(field(payload, "revocable"), "payload.revocable")
    optional_non_empty_string(field(payload, "requestedBy"), "payload.requestedBy")


def validate_access_result(payload: Any, name: str) -> None:
    """ACCESS_GRANTED / ACCESS_DENIED; `name` is the event type (settld passes it but does not use it)."""
    del name
    _secret_free_object(payload, _RESULT_FIELDS)
    non_empty_string(field(payload, "jobId"), "payload.jobId")
    non_empty_string(field(payload, "accessPlanId"), "payload.accessPlanId")
    method = field(payload, "method")
    if method is not MISSING:
        _method(method)
    optional_non_empty_string(field(payload, "reason"), "payload.reason")


def validate_access_revoked(payload: Any) -> None:
    """ACCESS_REVOKED and ACCESS_EXPIRED."""
    _secret_free_object(payload, _REVOKED_FIELDS)
    non_empty_string(field(payload, "jobId"), "payload.jobId")
    non_empty_string(field(payload, "accessPlanId"), "payload.accessPlanId")
    optional_non_empty_string(field(payload, "requestedBy"), "payload.requestedBy")
    optional_non_empty_string(field(payload, "reason"), "payload.reason")
