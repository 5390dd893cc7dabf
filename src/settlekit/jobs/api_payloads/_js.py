"""The checks settld's payload validators are built from, with JavaScript's value semantics.

A payload is a dict decoded from JSON. `MISSING` stands for JavaScript's `undefined` (a key that is absent),
`None` for `null`; the validators tell them apart, as settld's do (`x !== undefined` vs `x != null`). Every
refusal raises `Rejected` with settld's message text.
"""

from __future__ import annotations

import math
import re
from collections.abc import Collection, Iterable, Mapping
from typing import Any, Final, NoReturn

from settlekit.events import js
from settlekit.events.js import date_parse_ms, js_is_safe_integer, js_string


class _Missing:
    """JavaScript's `undefined`: the value of an absent key."""

    _instance: _Missing | None = None

    def __new__(cls) -> _Missing:
        if cls._instance is None:
            cls._instance = super().__new__(cls)
        return cls._instance

    def __repr__(self) -> str:
        return "MISSING"

    def __bool__(self) -> bool:
        return False


MISSING: Final = _Missing()


class Rejected(Exception):
    """A payload settld's validators refuse; `message` is settld's text."""

    def __init__(self, message: str):
        super().__init__(message)
        self.message = message


def reject(message: str) -> NoReturn:
    raise Rejected(message)


def field(obj: Any, key: str) -> Any:
    """`obj[key]`: MISSING when `obj` is a dict without the key (or not a dict)."""
    if type(obj) is dict:
        return obj.get(key, MISSING)
    return MISSING


def truthy(v: Any) -> bool:
    """`Boolean(v)` (MISSING is falsy)."""
    return v is not MISSING and js.truthy(v)


def to_string(v: Any) -> str:
    """`String(v)` for a JSON scalar (`"undefined"` for MISSING)."""
    return "undefined" if v is MISSING else js_string(v)


def strictly_equal(a: Any, b: Any) -> bool:
    """`a === b` for values parsed from JSON (two objects or arrays are never the same one)."""
    if type(a) in (dict, list) or type(b) in (dict, list):
        return False
    if type(a) is bool or type(b) is bool or a is None or b is None or a is MISSING or b is MISSING:
        return a is b
    if type(a) is str or type(b) is str:
        return type(a) is type(b) and a == b
    return bool(a == b)  # two numbers


def is_nullish(v: Any) -> bool:
    """`v == null` (null or undefined)."""
    return v is None or v is MISSING


# JavaScript's String.prototype.trim, and `typeof v === "string" && v.trim() !== ""` (events.js)
js_trim = js.js_trim
is_nonblank = js.js_nonblank


def is_string(v: Any) -> bool:
    return type(v) is str


def is_number(v: Any) -> bool:
    """`typeof v === "number"` (never a bool)."""
    return type(v) is int or type(v) is float


def is_finite_number(v: Any) -> bool:
    """`Number.isFinite(v)`."""
    return type(v) is int or (type(v) is float and math.isfinite(v))


def is_safe_integer(v: Any) -> bool:
    """`Number.isSafeInteger(v)`."""
    return js_is_safe_integer(v)


def utf16_length(s: str) -> int:
    """`s.length`: UTF-16 code units."""
    return len(s.encode("utf-16-le", "surrogatepass")) // 2


def js_keys(obj: Mapping[str, Any]) -> list[str]:
    """`Object.keys(obj)` for a parsed JSON object: array-index keys ascending, then the rest in insertion order."""
    keys = list(obj)
    index_keys = [k for k in keys if _is_array_index(k)]
    if not index_keys:
        return keys
    index_keys.sort(key=int)
    return index_keys + [k for k in keys if not _is_array_index(k)]


def _is_array_index(key: str) -> bool:
    return key.isascii() and key.isdigit() and (key == "0" or key[0] != "0") and int(key) < 2**32 - 1


def date_parse(v: Any) -> float:
    """`Date.parse(v)` for a string: milliseconds, NaN when unparseable."""
    return date_parse_ms(v)


# --- assertions (each settld core module has the same copies of these) ---


def non_empty_string(v: Any, name: str) -> None:
    if not is_nonblank(v):
        reject(f"{name} must be a non-empty string")


def plain_object(v: Any, name: str) -> None:
    """`assertPlainObject`: a parsed JSON value is plain whenever it is an object."""
    if type(v) is not dict:
        reject(f"{name} must be an object")


def only_fields(obj: Mapping[str, Any], allowed: Iterable[str], name: str) -> None:
    """The first key of `obj` (in JS order) not in `allowed` is refused."""
    allowed_set = allowed if isinstance(allowed, frozenset) else frozenset(allowed)
    if all(key in allowed_set for key in obj):
        return
    for key in js_keys(obj):
        if key not in allowed_set:
            reject(f"{name} contains unknown field: {key}")


def object_with_fields(v: Any, allowed: Iterable[str], name: str) -> None:
    """`plain_object` then `only_fields`."""
    plain_object(v, name)
    only_fields(v, allowed, name)


def iso_date(v: Any, name: str) -> None:
    non_empty_string(v, name)
    if not math.isfinite(date_parse(v)):
        reject(f"{name} must be an ISO date string")


def start_before_end(start: Any, end: Any, start_name: str, end_name: str) -> None:
    """Two ISO dates, the first strictly earlier: "<start_name> must be before <end_name>"."""
    iso_date(start, start_name)
    iso_date(end, end_name)
    if date_parse(start) >= date_parse(end):
        reject(f"{start_name} must be before {end_name}")


_WINDOW_FIELDS: Final = frozenset({"startAt", "endAt"})


def time_window(v: Any, name: str) -> None:
    """A `{startAt, endAt}` object, start strictly earlier: "<name>.startAt must be before endAt"."""
    object_with_fields(v, _WINDOW_FIELDS, name)
    start_at = field(v, "startAt")
    end_at = field(v, "endAt")
    iso_date(start_at, f"{name}.startAt")
    iso_date(end_at, f"{name}.endAt")
    if date_parse(start_at) >= date_parse(end_at):
        reject(f"{name}.startAt must be before endAt")


def safe_int(v: Any, name: str) -> None:
    if not is_safe_integer(v):
        reject(f"{name} must be a safe integer")


def safe_int_at_least_zero(v: Any, name: str) -> None:
    safe_int(v, name)
    if v < 0:
        reject(f"{name} must be >= 0")


def safe_int_above_zero(v: Any, name: str) -> None:
    safe_int(v, name)
    if v <= 0:
        reject(f"{name} must be > 0")


def safe_int_within(v: Any, name: str, high: int) -> None:
    safe_int(v, name)
    if v < 0 or v > high:
        reject(f"{name} must be within 0..{high}")


def int_in_range(v: Any, name: str, low: int, high: int) -> None:
    if not is_safe_integer(v) or not low <= v <= high:
        reject(f"{name} must be an integer in range {low}..{high}")


def non_negative_cents(v: Any, name: str) -> None:
    if not is_safe_integer(v) or v < 0:
        reject(f"{name} must be a non-negative safe integer (cents)")


def positive_cents(v: Any, name: str) -> None:
    if not is_safe_integer(v) or v <= 0:
        reject(f"{name} must be a positive safe integer (cents)")


def positive_int(v: Any, name: str) -> None:
    if not is_safe_integer(v) or v <= 0:
        reject(f"{name} must be a positive safe integer")


def non_negative_int(v: Any, name: str) -> None:
    if not is_safe_integer(v) or v < 0:
        reject(f"{name} must be a non-negative safe integer")


def optional_non_empty_string(v: Any, name: str) -> None:
    """Checked unless absent (`v !== undefined`); null is refused."""
    if v is not MISSING:
        non_empty_string(v, name)


def nullable_non_empty_string(v: Any, name: str) -> None:
    """Checked unless null or absent (`v != null`)."""
    if is_nullish(v):
        return
    non_empty_string(v, name)


def boolean(v: Any, name: str) -> None:
    if type(v) is not bool:
        reject(f"{name} must be a boolean")


def optional_boolean(v: Any, name: str) -> None:
    """Checked unless absent; null is refused."""
    if v is not MISSING:
        boolean(v, name)


def one_of(v: Any, allowed: Collection[str], name: str, problem: str = "is not supported") -> None:
    """A non-empty string among `allowed`; otherwise "<name> <problem>"."""
    non_empty_string(v, name)
    if v not in allowed:
        reject(f"{name} {problem}")


def string_array(v: Any, name: str) -> None:
    if type(v) is not list:
        reject(f"{name} must be an array")
    for item in v:
        non_empty_string(item, f"{name}[]")


_HEX64: Final = re.compile(r"[0-9a-fA-F]{64}")


def is_hex64(s: str) -> bool:
    """`/^[a-f0-9]{64}$/i.test(s)`."""
    return _HEX64.fullmatch(s) is not None


def nullable_hex64(v: Any, name: str) -> None:
    """Unless null or absent, a non-empty string that is 64 hex digits once trimmed."""
    if is_nullish(v):
        return
    non_empty_string(v, name)
    if not is_hex64(js_trim(v)):
        reject(f"{name} must be 64-hex")
