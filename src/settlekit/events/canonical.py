"""Canonical JSON: the exact text JavaScript's JSON.stringify gives after recursive key sorting.

Fast path: validate and reorder in one Python walk, then let the C json encoder write the text.
Floats whose Python repr differs from JS Number#toString send the whole value to a slow writer.

Lone UTF-16 surrogates (a JS string may hold them; JSON text read with `parse_json` keeps them) are written as
JSON.stringify writes them: the six-character escape `\\udxxx`, lower-case hex. The text stays valid UTF-8, so
streams holding them verify and hash as in the reference. The live append path refuses them in new input on
purpose (`require_well_formed`).
"""

from __future__ import annotations

import hashlib
import json
import math
import re
from collections.abc import Callable, Iterator
from datetime import UTC, datetime
from typing import Any, Final, NoReturn, TypeGuard

import orjson

from settlekit.errors import CanonicalJsonError, ValidationError

MAX_SAFE_INTEGER: Final = 2**53 - 1
# JavaScript assigns each key of a canonical copy with `out[key] = …`; for "__proto__" that sets the copy's prototype
# (or does nothing), so settld's canonical JSON leaves the key out whatever its value.
PROTO_KEY: Final = "__proto__"
_ARRAY_INDEX_LIMIT: Final = 2**32 - 1


class _Undefined:
    """Marks a dict value that is dropped by `normalize` (JS `undefined`)."""

    _instance: _Undefined | None = None

    def __new__(cls) -> _Undefined:
        if cls._instance is None:
            cls._instance = super().__new__(cls)
        return cls._instance

    def __repr__(self) -> str:
        return "UNDEFINED"


UNDEFINED: Final = _Undefined()


def is_safe_int(v: Any) -> TypeGuard[int]:
    """A Python int (never a bool or float) within the JS safe-integer range."""
    return type(v) is int and -MAX_SAFE_INTEGER <= v <= MAX_SAFE_INTEGER


def _is_array_index(key: str) -> bool:
    if not key.isdigit() or not key.isascii():
        return False
    if len(key) > 1 and key[0] == "0":
        return False
    return int(key) < _ARRAY_INDEX_LIMIT


def _utf16_key(key: str) -> bytes:
    return key.encode("utf-16-be", "surrogatepass")


def ordered_keys(keys: list[str]) -> list[str]:
    """JS property order: array-index keys numerically, then the rest by UTF-16 code units."""
    plain = sorted(keys)
    special = False
    for k in plain:
        if k.isascii():
            if k and "0" <= k[0] <= "9":
                special = True
                break
        elif max(k) > "\uffff":
            special = True
            break
    if not special:
        return plain
    index_keys = [k for k in plain if _is_array_index(k)]
    rest = [k for k in plain if not _is_array_index(k)]
    index_keys.sort(key=int)
    rest.sort(key=_utf16_key)
    return index_keys + rest


def js_number(x: float) -> str:
    """Format a finite float exactly like JavaScript's Number.prototype.toString."""
    if x == 0:
        return "0"
    if x.is_integer() and abs(x) <= MAX_SAFE_INTEGER:
        return str(int(x))
    sign = "-" if x < 0 else ""
    r = repr(abs(x))
    if "e" in r:
        mant, exp_s = r.split("e")
        exp = int(exp_s)
    else:
        mant, exp = r, 0
    if "." in mant:
        int_part, frac_part = mant.split(".")
    else:
        int_part, frac_part = mant, ""
    if frac_part == "0":
        frac_part = ""
    digits = (int_part + frac_part).lstrip("0")
    # value = 0.<digits> * 10**n
    lead_zeros = len(int_part + frac_part) - len((int_part + frac_part).lstrip("0"))
    n = len(int_part) + exp - lead_zeros
    digits = digits.rstrip("0") or "0"
    k = len(digits)
    if k <= n <= 21:
        out = digits + "0" * (n - k)
    elif 0 < n <= 21:
        out = digits[:n] + "." + digits[n:]
    elif -6 < n <= 0:
        out = "0." + "0" * (-n) + digits
    else:
        e = n - 1
        out = digits[0] + ("." + digits[1:] if k > 1 else "") + "e" + ("+" if e >= 0 else "-") + str(abs(e))
    return sign + out


_DIGITS = frozenset("0123456789")


def _fast_ok(x: Any) -> bool:
    """True when the C encoder with sort_keys gives the canonical text: no index-like or astral keys, no
    non-str keys, no tuples or other types, only safe ints and floats whose repr matches JS."""
    t = type(x)
    if t is dict:
        for k, v in x.items():
            if type(k) is not str:
                return False
            if k and (k[0] in _DIGITS or k == PROTO_KEY or (not k.isascii() and max(k) > "\uffff")):
                return False
            tv = type(v)
            if tv is str or v is None or tv is bool:
                continue
            if not _fast_ok(v):
                return False
        return True
    if t is str or x is None or t is bool:
        return True
    if t is int:
        return -MAX_SAFE_INTEGER <= x <= MAX_SAFE_INTEGER
    if t is list:
        for v in x:
            tv = type(v)
            if tv is str or v is None or tv is bool:
                continue
            if not _fast_ok(v):
                return False
        return True
    if t is float:
        return not x.is_integer() and "e" not in repr(x)
    return False


_SORTED_ENCODER = json.JSONEncoder(ensure_ascii=False, separators=(",", ":"), allow_nan=False,
                                   check_circular=False, sort_keys=True)
_encode_sorted = _SORTED_ENCODER.encode


def _path_join(path: str, key: str | int) -> str:
    return path + _path_step(key)


def _path_step(key: str | int) -> str:
    if isinstance(key, int):
        return f"[{key}]"
    if key.isidentifier():
        return f".{key}"
    return f"[{json.dumps(key, ensure_ascii=False)}]"


_encode_basestring = json.encoder.encode_basestring  # JSON.stringify's escapes for every other character
_SURROGATE = re.compile("[\ud800-\udfff]")


def _escape_surrogate(m: re.Match[str]) -> str:
    return f"\\u{ord(m.group()):04x}"


def quote_string(s: str) -> str:
    """JSON.stringify of one string, lone surrogates included (well-formed JSON.stringify, ES2019)."""
    text = _encode_basestring(s)
    if text.isascii() or _SURROGATE.search(text) is None:
        return text
    # a high+low pair held as two code points is one character in JS: join pairs, escape what is left alone
    joined = s.encode("utf-16-le", "surrogatepass").decode("utf-16-le", "surrogatepass")
    return _SURROGATE.sub(_escape_surrogate, _encode_basestring(joined))


_STORE_ENCODER = json.JSONEncoder(ensure_ascii=False, separators=(",", ":"), allow_nan=False)
# orjson writes what the standard encoder would (up to the spelling of float exponents, which reads back the
# same); subclasses, dataclasses and datetimes are passed through so that they take the standard path.
_ORJSON_STORE_OPTIONS: Final = (orjson.OPT_PASSTHROUGH_SUBCLASS | orjson.OPT_PASSTHROUGH_DATACLASS
                                | orjson.OPT_PASSTHROUGH_DATETIME)


def storable_json(x: Any) -> str:
    """Compact JSON text that any UTF-8 store takes: non-ASCII written as is, a lone surrogate (only ever inside
    a JSON string) as its `\\udxxx` escape, which `parse_json` reads back to the same string.

    For values whose numbers are finite (every stored event and state: they passed canonical JSON). orjson
    writes them; what it refuses (lone surrogates, integers beyond 64 bits, non-string keys) takes the
    standard encoder's path, whose errors stand. Use `storable_size` where a non-finite number must raise. Unlike
    the standard encoder, orjson also writes plain Enum members and UUIDs (as their values); none is given."""
    try:
        return orjson.dumps(x, option=_ORJSON_STORE_OPTIONS).decode("utf-8")
    except (TypeError, orjson.JSONEncodeError):
        return _standard_storable_json(x)


def storable_size(x: Any) -> int:
    """The UTF-8 size of `storable_json(x)` as the standard encoder writes it; raises ValueError for NaN or an
    infinity and TypeError for what is not JSON."""
    return len(_standard_storable_json(x).encode("utf-8"))


def _standard_storable_json(x: Any) -> str:
    text = plain_json(x)
    if text.isascii() or _SURROGATE.search(text) is None:
        return text
    return _SURROGATE.sub(_escape_surrogate, text)


def plain_json(x: Any) -> str:
    """What `json.dumps(x, ensure_ascii=False, separators=(",", ":"), allow_nan=False)` writes (keys in their own
    order, lone surrogates left as they are), at any depth: the standard encoder recurses and stops near the
    recursion limit, so a value nested deeper is written by a loop instead (imported history may nest thousands
    of levels). Raises ValueError for NaN or an infinity and TypeError for what is not JSON, as json does."""
    try:
        return _STORE_ENCODER.encode(x)
    except RecursionError:
        return _write_plain(x)


def _plain_scalar(v: Any) -> str:
    if isinstance(v, str):
        return _encode_basestring(v)
    if v is None:
        return "null"
    if v is True:
        return "true"
    if v is False:
        return "false"
    if isinstance(v, int):
        return int.__repr__(v)
    if isinstance(v, float):
        if v != v or v in (math.inf, -math.inf):
            raise ValueError("Out of range float values are not JSON compliant: " + repr(v))
        return float.__repr__(v)
    raise TypeError(f"Object of type {type(v).__name__} is not JSON serializable")


def _plain_key(k: Any) -> str:
    if isinstance(k, str):
        return k
    if isinstance(k, bool) or k is None:
        return "null" if k is None else "true" if k else "false"
    if isinstance(k, int | float):
        return _plain_scalar(k)
    raise TypeError(f"keys must be str, int, float, bool or None, not {type(k).__name__}")


def _write_plain(x: Any) -> str:
    """`plain_json` without recursion: a stack of what is left to write, each entry a value or (marked True) text
    written as it is."""
    out: list[str] = []
    stack: list[tuple[bool, Any]] = [(False, x)]
    while stack:
        raw, v = stack.pop()
        if raw:
            out.append(v)
        elif isinstance(v, dict):
            items = list(v.items())
            out.append("{")
            stack.append((True, "}"))
            for n in range(len(items) - 1, -1, -1):
                key, child = items[n]
                stack.append((False, child))
                stack.append((True, ("," if n else "") + _encode_basestring(_plain_key(key)) + ":"))
        elif isinstance(v, list | tuple):
            out.append("[")
            stack.append((True, "]"))
            for n in range(len(v) - 1, -1, -1):
                stack.append((False, v[n]))
                if n:
                    stack.append((True, ","))
        else:
            out.append(_plain_scalar(v))
    return "".join(out)


def same_json(a: Any, b: Any) -> bool:
    """`a == b` for parsed JSON values at any depth (Python's `==` recurses and stops near the recursion limit)."""
    try:
        return bool(a == b)
    except RecursionError:
        pass
    stack = [(a, b)]
    while stack:
        x, y = stack.pop()
        if isinstance(x, dict) or isinstance(y, dict):
            if not (isinstance(x, dict) and isinstance(y, dict)) or x.keys() != y.keys():
                return False
            stack.extend((x[k], y[k]) for k in x)
        elif isinstance(x, list | tuple) or isinstance(y, list | tuple):
            if type(x) is not type(y) or len(x) != len(y):
                return False
            stack.extend(zip(x, y, strict=True))
        elif x != y:
            return False
    return True


def storable_text(s: str) -> str:
    """A plain text column's value: a lone surrogate becomes its six-character `\\udxxx` escape (UTF-8 has no
    encoding for it); any other string is returned unchanged."""
    if s.isascii() or _SURROGATE.search(s) is None:
        return s
    return _SURROGATE.sub(_escape_surrogate, s)


PathNode = tuple[Any, str | int] | None  # (parent node, key or index); None is the root, "$"


def _render_path(node: PathNode, root: str = "$") -> str:
    steps: list[str] = []
    while node is not None:
        node, key = node
        steps.append(_path_step(key))
    steps.append(root)
    return "".join(reversed(steps))


def find_lone_surrogate(x: Any, path: str = "$") -> str | None:
    """JSON path of the first string (value or key) holding a lone surrogate, or None. Depth first in key order,
    without recursion (any depth)."""
    stack: list[tuple[Any, PathNode]] = [(x, None)]
    while stack:
        value, node = stack.pop()
        t = type(value)
        if t is str:
            if _SURROGATE.search(value) is not None:
                return _render_path(node, path)
        elif value is _BAD_KEY:
            return _render_path(node, path)
        elif t is dict:
            pending: list[tuple[Any, PathNode]] = []
            for k, v in value.items():
                if type(k) is str and _SURROGATE.search(k) is not None:
                    pending.append((_BAD_KEY, (node, "<key>")))  # found when the walk gets there
                    break
                pending.append((v, (node, k if type(k) is str else str(k))))
            stack.extend(reversed(pending))
        elif t is list or t is tuple:
            stack.extend((value[i], (node, i)) for i in range(len(value) - 1, -1, -1))
    return None


_BAD_KEY: Final = object()  # an object's key holding a lone surrogate, in the walk of `find_lone_surrogate`


def _check_json_string(value: str, path: str) -> None:
    if "\x00" in value:
        raise ValidationError(f"U+0000 in string at {path}", code="SCHEMA_INVALID", path=path)
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        raise ValidationError(f"lone surrogate in string at {path}", code="SCHEMA_INVALID", path=path) from None


def check_json_strings(value: Any, path: str = "$") -> None:
    """Every key and string of a parsed JSON body is text both backends store: no U+0000, no lone surrogate
    (SCHEMA_INVALID naming the JSON path, as the append path words it). Iterative: depth is no concern."""
    stack: list[tuple[Any, str]] = [(value, path)]
    while stack:
        item, where = stack.pop()
        if isinstance(item, str):
            _check_json_string(item, where)
        elif isinstance(item, dict):
            for k, v in item.items():
                _check_json_string(k, f"{where}.<key>")
                stack.append((v, f"{where}.{k}"))
        elif isinstance(item, list):
            stack.extend((v, f"{where}[{i}]") for i, v in enumerate(item))


def require_well_formed(x: Any, path: str = "$", *, hashed_keys: bool = False) -> None:
    """Refuse a value holding a lone surrogate (SCHEMA_INVALID naming the path): settlekit's live append path
    takes only well-formed Unicode in new input, although the offline tools reproduce such streams.

    With `hashed_keys`, refuse a "__proto__" key too: settld's canonical JSON leaves it out, so neither an event's
    hash nor its signature would cover it (settld stores it from a client-finalized event, drops it from a server
    draft, and fails on a draft whose value for it is an object). The offline tools hash such a stream as settld
    does."""
    try:
        # refuses any lone surrogate (and big integers, non-string keys: then look)
        text: bytes | None = orjson.dumps(x)
    except (TypeError, orjson.JSONEncodeError):
        text = None  # a surrogate, or not JSON for another reason (left to the checks that own it)
    if text is None:
        found = find_lone_surrogate(x, path)
        if found is not None:
            raise CanonicalJsonError(f"lone surrogate in string at {found}", path=found)
    if hashed_keys and (text is None or b'"__proto__":' in text):
        found = _find_proto_key(x, path)
        if found is not None:
            raise CanonicalJsonError(f"the key __proto__ is not allowed (settld's hash leaves it out) at {found}",
                                     path=found)


def _find_proto_key(x: Any, path: str) -> str | None:
    """JSON path of the first "__proto__" key, depth first in key order, without recursion (any depth)."""
    stack: list[tuple[Any, PathNode]] = [(x, None)]
    while stack:
        value, node = stack.pop()
        t = type(value)
        if t is dict:
            pending: list[tuple[Any, PathNode]] = []
            for k, v in value.items():
                where = (node, k) if type(k) is str else node
                if k == PROTO_KEY:
                    pending.append((_PROTO_FOUND, where))
                    break
                pending.append((v, where))
            stack.extend(reversed(pending))
        elif t is list or t is tuple:
            stack.extend((value[i], (node, i)) for i in range(len(value) - 1, -1, -1))
        elif value is _PROTO_FOUND:
            return _render_path(node, path)
    return None


_PROTO_FOUND: Final = object()  # a "__proto__" key, in the walk of `_find_proto_key`


def _write_scalar(x: Any, node: PathNode) -> str:
    t = type(x)
    if t is str:
        return quote_string(x)
    if x is None:
        return "null"
    if t is bool:
        return "true" if x else "false"
    if t is int:
        if not -MAX_SAFE_INTEGER <= x <= MAX_SAFE_INTEGER:
            path = _render_path(node)
            raise CanonicalJsonError(f"integer outside the JS safe range at {path}", path=path)
        return str(x)
    if t is float:
        if x != x or x in (math.inf, -math.inf) or (x == 0 and math.copysign(1.0, x) < 0):
            path = _render_path(node)
            what = "NaN is not JSON" if x != x else (
                "negative zero is not allowed" if x == 0 else "Infinity is not JSON")
            raise CanonicalJsonError(f"{what} at {path}", path=path)
        return js_number(x)
    path = _render_path(node)
    raise CanonicalJsonError(f"type {t.__name__} is not canonical JSON at {path}", path=path)


def _dict_items(value: dict[Any, Any], node: PathNode) -> Iterator[tuple[str, Any]]:
    for k in value:
        if type(k) is not str:
            path = _render_path(node)
            raise CanonicalJsonError(f"non-string key {k!r} at {path}", path=path)
    return ((k, value[k]) for k in ordered_keys(list(value)))


def _write_slow(x: Any, keep_proto: bool = False) -> str:
    """Canonical JSON without recursion (any depth): a stack of the open arrays and objects, each with the iterator
    over what it has left to write.

    A "__proto__" key is left out, its value still checked, as settld's canonicalize walks it; with
    `keep_proto` it is written in its place like any other key (the text of a value JSON.stringify writes with
    its own "__proto__" property, keys sorted)."""
    t = type(x)
    if t is not list and t is not dict:
        return _write_scalar(x, None)
    out: list[str] = ["[" if t is list else "{"]
    write = out.append
    # frames: [iterator, is_dict, node, muted, items taken, keys written (objects)]
    stack: list[list[Any]] = [[iter(x) if t is list else _dict_items(x, None), t is dict, None, False, 0, 0]]
    while stack:
        frame = stack[-1]
        it, is_dict, node, muted, count, _ = frame
        item: Any = next(it, _END)
        if item is _END:
            stack.pop()
            if not muted:
                write("}" if is_dict else "]")
            continue
        frame[4] = count + 1
        key: str | int
        child: Any
        if is_dict:
            key, child = item
            child_muted = muted or (key == PROTO_KEY and not keep_proto)
            if not child_muted:
                write(("," if frame[5] else "") + quote_string(item[0]) + ":")
                frame[5] += 1
        else:
            key, child = count, item
            child_muted = muted
            if count and not muted:
                write(",")
        tc = type(child)
        if tc is list or tc is dict:
            child_node = (node, key)
            if not child_muted:
                write("[" if tc is list else "{")
            stack.append([iter(child) if tc is list else _dict_items(child, child_node), tc is dict, child_node,
                          child_muted, 0, 0])
        elif child_muted:
            _write_scalar(child, (node, key))
        else:
            write(_write_scalar(child, (node, key)))
    return "".join(out)


_END: Final = object()  # an exhausted iterator's answer


def canonical_json(x: Any, *, keep_proto: bool = False) -> str:
    """Canonical JSON text of `x`; raises CanonicalJsonError naming the JSON path of a bad value. Any depth.

    `keep_proto`: write "__proto__" keys too (settld's canonical JSON, hence every hash, leaves them out; a value
    JSON.parse read holds them as own keys, which settld's JSON.stringify of an artifact or a job writes)."""
    if keep_proto:
        return _write_slow(x, keep_proto=True)
    try:
        if not _fast_ok(x):
            return _write_slow(x)
        text = _encode_sorted(x)
    except (ValueError, RecursionError):  # RecursionError: nested deeper than the C encoder goes
        return _write_slow(x)
    if not text.isascii():
        try:
            text.encode("utf-8")
        except UnicodeEncodeError:
            return _write_slow(x)
    return text


def js_int(text: str) -> int | float:
    """An integer literal as JavaScript reads it: a double outside the safe range, ±Infinity beyond the
    largest double (which canonical JSON then refuses, naming the path). `-0` is JavaScript's negative zero."""
    if text == "-0":
        return -0.0
    value = int(text)
    if -MAX_SAFE_INTEGER <= value <= MAX_SAFE_INTEGER:
        return value
    try:
        return float(value)
    except OverflowError:
        return math.inf if value > 0 else -math.inf


def js_float(text: str) -> int | float:
    """A number literal with a fraction or an exponent as JavaScript reads it. JavaScript has one number type, so
    one whose value is a safe integer (`2.0`, `1e2`) is that integer, as `JSON.parse` gives it to every check
    (`Number.isSafeInteger(2.0)` is true); `-0.0` stays negative zero."""
    value = float(text)
    if value.is_integer() and -MAX_SAFE_INTEGER <= value <= MAX_SAFE_INTEGER and (value or text[0] != "-"):
        return int(value)
    return value


# The end of a number token with a fraction or an exponent: the fraction or the exponent, then what may follow a
# value (a string that looks like one only costs the slower parser). Timestamps such as "…T11:00:00.000Z" do not
# match. Each pattern starts with a literal ('.', 'e', 'E'), which the regular expression engine scans for fast.
_NUMBER_ENDS: Final = tuple(re.compile(pattern) for pattern in (
    rb"\.[0-9]+(?:[eE][+-]?[0-9]+)?(?=[ \t\n\r,\]}]|\Z)",
    rb"e(?<=[0-9]e)[+-]?[0-9]+(?=[ \t\n\r,\]}]|\Z)",
    rb"E(?<=[0-9]E)[+-]?[0-9]+(?=[ \t\n\r,\]}]|\Z)",
))


# A JSON text without a run of 16 digits holds no integer beyond the safe range (2**53 has 16 digits). The
# run is found by mapping every digit to "0" and everything else to "x" (much faster than a regular expression).
_DIGITS_AS_ZERO: Final = bytes(48 if 48 <= b <= 57 else 120 for b in range(256))
_SIXTEEN_DIGITS: Final = b"0" * 16


def _has_long_digit_run(text: str | bytes) -> bool:
    data = text.encode("utf-8", "surrogatepass") if isinstance(text, str) else bytes(text)
    return _SIXTEEN_DIGITS in data.translate(_DIGITS_AS_ZERO)


# `-0` not followed by a digit, fraction or exponent; with only a blank or `:`, `[`, `,` before it, a `-0` number
# token (orjson reads it as the integer 0). Strings may match too, which only costs the slow parser. The pattern
# starts with a literal, so the search skips ahead fast (a leading alternation made it scan every byte).
_MINUS_ZERO: Final = re.compile(rb"-0(?![0-9.eE])")
_BLANKS: Final = frozenset(b" \t\n\r\f\v")
_BEFORE_NUMBER: Final = frozenset(b":[,")


def _has_negative_zero(data: bytes) -> bool:
    for match in _MINUS_ZERO.finditer(data):
        i = match.start() - 1
        while i >= 0 and data[i] in _BLANKS:
            i -= 1
        if i < 0 or data[i] in _BEFORE_NUMBER:
            return True
    return False


def parse_json(text: str | bytes) -> Any:
    """Parse JSON like JavaScript: integers beyond the safe range become doubles.

    orjson reads a text without long digit runs (all its integers are safe, so both parsers agree); the
    standard parser reads the rest and whatever orjson refuses (NaN, an infinity, a lone surrogate escape,
    another encoding than UTF-8), and raises its own errors."""
    data = text if isinstance(text, bytes) else text.encode("utf-8", "surrogatepass")
    if _orjson_reads_as_javascript(data):
        try:
            return orjson.loads(text)
        except orjson.JSONDecodeError:
            pass
    try:
        return _standard_loads(text)
    except RecursionError:  # nested deeper than the recursive parsers go (orjson stops at 1024 levels)
        return parse_json_deep(text if isinstance(text, str) else text.decode(json.detect_encoding(text)))


def parse_request_json(data: bytes) -> Any:
    """UTF-8 JSON text as JavaScript's JSON.parse reads a request body: `parse_json`'s numbers, NaN and Infinity
    refused (ValueError), and no slow path for depth: text nested deeper than the parsers go raises RecursionError
    (the caller refuses it rather than spend the time)."""
    if _orjson_reads_as_javascript(data):
        try:
            return orjson.loads(data)
        except orjson.JSONDecodeError:
            pass
    return _JS_REQUEST_DECODER.decode(data.decode("utf-8"))


def _orjson_reads_as_javascript(data: bytes) -> bool:
    """Whether orjson reads every number of `data` as JSON.parse does (no unsafe integer, no negative zero, no
    integral fraction); a string that merely looks like such a number only costs the standard parser."""
    return not _has_long_digit_run(data) and not _has_negative_zero(data) and not _has_javascript_fraction(data)


_JSON_BLANKS: Final = re.compile(r"[ \t\n\r]*")
_JSON_NUMBER: Final = re.compile(r"-?(?:0|[1-9][0-9]*)(\.[0-9]+)?([eE][-+]?[0-9]+)?")
# json's own string scanner (C): escapes, lone surrogates kept, control characters refused
_scan_string: Final[Callable[[str, int, bool], tuple[str, int]]] = json.decoder.scanstring  # type: ignore[attr-defined]


def parse_json_deep(s: str) -> Any:
    """JSON text read without recursion, any depth, as `parse_json` reads it (JavaScript's numbers, lone surrogate
    escapes kept, a repeated key's last value in its first place); raises ValueError (json.JSONDecodeError) for
    what JSON.parse refuses, NaN and Infinity included. The slow path of `parse_json` for deeply nested text."""
    number, scan = _JSON_NUMBER.match, _scan_string
    end = len(s)

    def blanks(i: int) -> int:  # past JSON's white space from i
        m = _JSON_BLANKS.match(s, i)
        assert m is not None  # the pattern matches the empty string
        return m.end()

    def fail(message: str, at: int) -> NoReturn:
        raise json.JSONDecodeError(message, s, min(at, end))

    def key_at(i: int) -> tuple[str, int]:
        if i >= end or s[i] != '"':
            fail("Expecting property name enclosed in double quotes", i)
        key, i = scan(s, i + 1, True)
        i = blanks(i)
        if i >= end or s[i] != ":":
            fail("Expecting ':' delimiter", i)
        return key, blanks(i + 1)

    open_: list[Any] = []  # the containers being filled, innermost last
    keys: list[str | None] = []  # the key each open object fills next
    i = blanks(0)
    while True:
        if i >= end:
            fail("Expecting value", i)
        c = s[i]
        value: Any
        if c == "{" or c == "[":
            i = blanks(i + 1)
            if i < end and s[i] == ("}" if c == "{" else "]"):
                value, i = ({} if c == "{" else []), i + 1
            else:
                if c == "{":
                    key, i = key_at(i)
                    open_.append({})
                    keys.append(key)
                else:
                    open_.append([])
                    keys.append(None)
                continue
        elif c == '"':
            value, i = scan(s, i + 1, True)
        elif (m := number(s, i)) is not None:
            value = js_float(m.group()) if m.group(1) or m.group(2) else js_int(m.group())
            i = m.end()
        elif s.startswith("null", i):
            value, i = None, i + 4
        elif s.startswith("true", i):
            value, i = True, i + 4
        elif s.startswith("false", i):
            value, i = False, i + 5
        else:
            fail("Expecting value", i)
        while True:  # put the value in place; close the containers that end after it
            if not open_:
                i = blanks(i)
                if i != end:
                    fail("Extra data", i)
                return value
            top = open_[-1]
            if type(top) is list:
                top.append(value)
            else:
                top[keys[-1]] = value
            i = blanks(i)
            if i < end and s[i] == ",":
                i = blanks(i + 1)
                if type(top) is dict:
                    keys[-1], i = key_at(i)
                break
            if i >= end or s[i] != ("]" if type(top) is list else "}"):
                fail("Expecting ',' delimiter", i)
            i += 1
            value = open_.pop()
            keys.pop()


def _has_javascript_fraction(data: bytes) -> bool:
    """Whether a number token with a fraction or an exponent may read otherwise in JavaScript than as the double
    orjson gives: its value an integer (`JSON.parse` gives `2.0` as 2, see `js_float`) or not finite. A token is
    found by its end (`_NUMBER_ENDS`) and read back to its start; a string that looks like one (or a token that
    does not read as a number) only costs the slower parser. Tokens without 16 digits in a row (the caller
    checks) are read by both parsers to the same double."""
    for pattern in _NUMBER_ENDS:
        for match in pattern.finditer(data):
            start = match.start()
            while start > 0 and data[start - 1] in _NUMBER_BODY:
                start -= 1
            if start > 0 and data[start - 1] == _MINUS:
                start -= 1
            try:
                value = float(data[start:match.end()])
            except ValueError:
                return True
            if value.is_integer() or not math.isfinite(value):
                return True
    return False


_NUMBER_BODY: Final = frozenset(b"0123456789.")
_MINUS: Final = ord("-")
# the standard parser with JavaScript's numbers, made once (json.loads with hooks builds a decoder per call)
_JS_DECODER: Final = json.JSONDecoder(parse_int=js_int, parse_float=js_float)


def _refuse_constant(name: str) -> Any:
    raise ValueError(f"{name} is not JSON")


_JS_REQUEST_DECODER: Final = json.JSONDecoder(parse_int=js_int, parse_float=js_float, parse_constant=_refuse_constant)


def _standard_loads(text: str | bytes) -> Any:
    """`json.loads(text, parse_int=js_int, parse_float=js_float)`, with its errors, on the decoder made once."""
    if isinstance(text, str):
        if text.startswith("\ufeff"):
            raise json.JSONDecodeError("Unexpected UTF-8 BOM (decode using utf-8-sig)", text, 0)
        return _JS_DECODER.decode(text)
    return _JS_DECODER.decode(text.decode(json.detect_encoding(text), "surrogatepass"))


def canonical_bytes(x: Any) -> bytes:
    return canonical_json(x).encode("utf-8")


def sha256_hex(data: bytes | str) -> str:
    if isinstance(data, str):
        data = data.encode("utf-8")
    return hashlib.sha256(data).hexdigest()


def canonical_hash(x: Any) -> str:
    """sha256 hex of the canonical JSON's UTF-8 bytes."""
    return hashlib.sha256(canonical_json(x).encode("utf-8")).hexdigest()


def iso_millis(dt: datetime) -> str:
    """JS toISOString: UTC, exactly three fraction digits, `Z`."""
    if dt.tzinfo is None:
        dt = dt.replace(tzinfo=UTC)
    dt = dt.astimezone(UTC)
    # the year padded to four digits as JavaScript writes it (strftime's %Y writes year 1 as "1")
    return f"{dt.year:04d}" + dt.strftime("-%m-%dT%H:%M:%S.") + f"{dt.microsecond // 1000:03d}Z"


def normalize(x: Any, path: str = "$") -> Any:
    """settld normalizeForCanonicalJson: drop UNDEFINED dict values, datetimes to ISO strings."""
    if isinstance(x, datetime):
        return iso_millis(x)
    if type(x) is dict:
        return {k: normalize(v, _path_join(path, str(k))) for k, v in x.items() if v is not UNDEFINED}
    if type(x) is list:
        out = []
        for i, v in enumerate(x):
            if v is UNDEFINED:
                raise CanonicalJsonError(f"undefined inside an array at {path}[{i}]", path=f"{path}[{i}]")
            out.append(normalize(v, _path_join(path, i)))
        return out
    if x is UNDEFINED:
        raise CanonicalJsonError(f"undefined value at {path}", path=path)
    return x
