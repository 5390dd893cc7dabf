"""What settlekit makes of a request body or a stream file, in the terms of tests/reference/spelling_xcheck.mjs
(which reads them as settld does), and how the two answers compare. Shared by tests/reference/spelling_xcheck.py
and tests/unit/test_json_spellings_reference.py."""

from __future__ import annotations

import json
from typing import Any

from settlekit.api.guards import parse_body
from settlekit.errors import SettlekitError
from settlekit.events.canonical import canonical_json, js_number, parse_json, quote_string, sha256_hex
from settlekit.jobs.api_payloads import ROUTES, api_payload_error
from settlekit.jobs.api_payloads._js import MISSING, js_keys


def written(value: Any) -> str:
    """The value as spelling_xcheck.mjs writes a JavaScript value: JS key order, JS number text, -0, Infinity."""
    t = type(value)
    if t is float:
        if value != value:
            return "NaN"
        if value in (float("inf"), float("-inf")):
            return "Infinity" if value > 0 else "-Infinity"
        return "-0" if value == 0 and str(value).startswith("-") else js_number(value)
    if t is int:
        return str(value)
    if t is str:
        return quote_string(value)
    if t is list:
        return "[" + ",".join(written(v) for v in value) + "]"
    if t is dict:
        return "{" + ",".join(f"{quote_string(k)}:{written(value[k])}" for k in js_keys(value)) + "}"
    return json.dumps(value)


def judged(value: Any) -> dict[str, Any]:
    """What spelling_xcheck.mjs answers for a parsed value, computed by settlekit."""
    out: dict[str, Any] = {"parsed": True, "value": written(value)}
    try:
        out["canonical"] = canonical_json(value)
    except SettlekitError:
        out["canonicalError"] = True
    if type(value) is dict and type(value.get("type")) is str:
        try:
            out["payloadHash"] = sha256_hex(canonical_json(value.get("payload")))
        except SettlekitError:
            out["payloadHash"] = None
        if value["type"] in ROUTES:
            message = api_payload_error(value["type"], value.get("payload", MISSING))
            out["validator"] = {"ok": message is None, "message": message}
        else:
            out["validator"] = {"ok": None, "message": "no validator"}
    return out


def settlekit_answers(raw: bytes) -> dict[str, dict[str, Any]]:
    """`body`: the append route's reading (`parse_body`); `file`: the offline tools' (`parse_json`)."""
    try:
        body = judged(parse_body(raw))
    except SettlekitError as exc:
        body = {"parsed": False, "deliberate": exc.code == "SCHEMA_INVALID" or "UTF-8" in exc.message}
    try:
        file = judged(parse_json(raw))
    except (ValueError, SettlekitError):
        file = {"parsed": False}
    return {"body": body, "file": file}


def digested(answer: dict[str, Any]) -> dict[str, Any]:
    """`answer` with its value and canonical text as their sha256 (a vendored answer's form)."""
    return {k: sha256_hex(v.encode("utf-8", "surrogatepass")) if k in ("value", "canonical") else v
            for k, v in answer.items()}


def not_utf8(raw: bytes) -> bool:
    try:
        raw.decode("utf-8")
    except UnicodeDecodeError:
        return True
    return False


def _comparable(answer: dict[str, Any]) -> dict[str, Any]:
    out = {k: v for k, v in answer.items() if k != "deliberate"}
    if out.get("empty"):  # settld's route refuses a null body ("type is required"); settlekit JSON_INVALID
        return {"parsed": False}
    if "canonicalError" in out:
        out["canonicalError"] = True  # both refuse; the messages are each one's own
    return out


def verdict(where: str, raw: bytes, mine: dict[str, Any], theirs: dict[str, Any]) -> str:
    """"same", a deliberate or harmless difference (named), or "DIFFERENT (the keys that differ)"."""
    if mine.get("deliberate") and theirs["parsed"]:
        return f"refused on purpose ({'not UTF-8' if not_utf8(raw) else 'U+0000 or a lone surrogate'})"
    if _comparable(mine) == _comparable(theirs):
        return "same"
    if where == "file" and not_utf8(raw) and not mine["parsed"]:
        return "not UTF-8, which settlekit's reader refuses (settld reads U+FFFD)"
    if where == "file" and raw.startswith(b"\xef\xbb\xbf") and mine["parsed"] and not theirs["parsed"]:
        return "a BOM before the JSON, which settlekit's reader skips"
    keys = sorted(k for k in set(mine) | set(theirs) if mine.get(k) != theirs.get(k))
    return f"DIFFERENT ({', '.join(keys)})"
