"""Small helpers that reproduce the JavaScript value semantics the v1 artifacts depend on (`??`, truthiness,
`Number.isSafeInteger`, number addition, `Array.prototype.sort`, `localeCompare`, `Date.parse`)."""

from __future__ import annotations

import math
from collections.abc import Iterable
from typing import Any, Final

from settlekit.events.canonical import MAX_SAFE_INTEGER, js_number
from settlekit.events.collation import sort_key
from settlekit.events.js_date import js_date_parse_ms


def get(obj: Any, key: str) -> Any:
    """`obj?.[key]` with undefined mapped to None."""
    return obj.get(key) if type(obj) is dict else None


def is_object(v: Any) -> bool:
    """`v && typeof v === "object"` for JSON values: an object or an array."""
    return type(v) is dict or type(v) is list


def coalesce(*values: Any) -> Any:
    """`a ?? b ?? …`: the first value that is not None (JS null/undefined)."""
    for v in values:
        if v is not None:
            return v
    return None


def truthy(v: Any) -> bool:
    """JS truthiness for JSON values: null, false, 0, NaN and "" are falsy; objects and arrays are truthy."""
    if v is None or v is False:
        return False
    if type(v) is str:
        return v != ""
    if type(v) in (int, float):
        return v != 0 and not (type(v) is float and math.isnan(v))
    return True


def nonblank(v: Any) -> bool:
    """A string that is not empty after JavaScript's trim (`js_nonblank`)."""
    return js_nonblank(v)


def js_is_safe_integer(v: Any) -> bool:
    """`Number.isSafeInteger(v)`; integral floats count, booleans do not."""
    if type(v) is int:
        return -MAX_SAFE_INTEGER <= v <= MAX_SAFE_INTEGER
    if type(v) is float:
        return v.is_integer() and -MAX_SAFE_INTEGER <= v <= MAX_SAFE_INTEGER
    return False


def js_add(a: int | float, b: int | float) -> int | float:
    """`a + b` on JS numbers: exact while the sum is a safe integer; beyond, the IEEE double sum (Python floats are
    doubles with the same rounding), kept as a float so that canonical JSON writes it as JSON.stringify does."""
    if type(a) is int and type(b) is int:
        total = a + b
        if -MAX_SAFE_INTEGER <= total <= MAX_SAFE_INTEGER:
            return total
    return float(a) + float(b)


def js_integer(v: int) -> int | float:
    """An integral JS number as JS holds it: beyond the safe range it is a double."""
    return v if -MAX_SAFE_INTEGER <= v <= MAX_SAFE_INTEGER else float(v)


def js_string(v: Any) -> str:
    """`String(v)` for JSON scalars (objects are not expected here)."""
    if v is None:
        return "null"
    if v is True:
        return "true"
    if v is False:
        return "false"
    if type(v) is float and v.is_integer() and abs(v) < 1e21:
        return str(int(v))
    return str(v)


def js_to_string(v: Any) -> str:
    """`String(v)` for any JSON value: arrays join their items (null as ""), objects are "[object Object]"."""
    if type(v) is dict:
        return "[object Object]"
    if type(v) is list:
        return ",".join("" if x is None else js_to_string(x) for x in v)
    if type(v) is float:
        return js_number(v)
    return js_string(v)


_JS_SPACE: Final = (
    "\t\n\v\f\r \u00a0\u1680\u2000\u2001\u2002\u2003\u2004\u2005\u2006\u2007\u2008\u2009\u200a"
    "\u2028\u2029\u202f\u205f\u3000\ufeff"
)


def js_trim(s: str) -> str:
    """`String.prototype.trim` (JS white space and line terminators only)."""
    return s.strip(_JS_SPACE)


def js_nonblank(v: Any) -> bool:
    """`typeof v === "string" && v.trim() !== ""`."""
    return type(v) is str and js_trim(v) != ""


def js_usv_string(s: str) -> str:
    """The string as node turns it into UTF-8 (hashing, Buffer, URL parsing): surrogate pairs joined, lone
    surrogates replaced by U+FFFD."""
    return s.encode("utf-16-le", "surrogatepass").decode("utf-16-le", "replace")


def utf16_key(s: str) -> bytes:
    """Sort key giving UTF-16 code-unit order (JS default `sort` on strings)."""
    return s.encode("utf-16-be", "surrogatepass")


def js_sorted(values: Iterable[str]) -> list[str]:
    return sorted(values, key=utf16_key)


def locale_key(s: str) -> bytes:
    """Sort key giving `a.localeCompare(b)` order (ICU collation as in V8; see `settlekit.events.collation`)."""
    return sort_key(s)


def _to_string(v: Any) -> str | None:
    """`String(v)` for a parsed JSON value (arrays join their elements with ","; null and undefined elements are
    empty); None for a value JSON cannot hold."""
    if type(v) is str:
        return v
    if v is None:
        return "null"
    if type(v) is bool:
        return "true" if v else "false"
    if type(v) is int:
        return str(v) if -MAX_SAFE_INTEGER <= v <= MAX_SAFE_INTEGER else js_number(float(v))
    if type(v) is float:
        return js_number(v) if math.isfinite(v) else "NaN" if math.isnan(v) else "Infinity" if v > 0 else "-Infinity"
    if type(v) is list:
        parts = ["" if x is None else _to_string(x) for x in v]
        return None if None in parts else ",".join(p for p in parts if p is not None)
    if type(v) is dict:
        return "[object Object]"
    return None


def date_parse_ms(v: Any) -> float:
    """`Date.parse(String(v ?? ""))`, which is `Date.parse(v)` for any JSON value: milliseconds since the epoch as
    node 20 computes them (see `settlekit.events.js_date`; local time is UTC), NaN when V8 refuses the string.
    Non-strings go through their JS string: 2026 is the year 2026, ["2026-01-05"] that date, null and absent NaN."""
    s = "" if v is None else _to_string(v)
    return math.nan if s is None else js_date_parse_ms(s)
