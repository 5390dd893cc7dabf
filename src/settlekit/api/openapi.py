"""The OpenAPI document as the API behaves: the bearer API key, the request headers the routes read, the response
headers every answer carries, and every error an operation can answer as `application/problem+json` with its codes.

Every string a request carries is refused when it holds U+0000 (api/guards.py), so `document` gives each string of
a parameter or request body that has no pattern, format or enum of its own the pattern NO_NUL, and each open JSON
object of a request (a payload, a contract document) keys and values without it (JsonValue). FastAPI's document
model turns integer bounds into floats; `document` writes them back as integers (2**63 - 1 has no float).

A route declares what is its own: `response_model=` (schemas.py) for its 2xx body, `responses=problems(...)` for
the error codes it raises itself and `openapi_extra=request_headers(...)` for the headers it reads. `document` adds
what every operation shares (input guards, authentication, scopes, rate limit, body limit, database outage,
idempotency keys) and replaces FastAPI's 422 `HTTPValidationError`, which the API never answers (it answers 400).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from fastapi import FastAPI
from fastapi.openapi.utils import get_openapi

from settlekit.api.problems import PROBLEM_TYPE
from settlekit.api.schemas import Problem
from settlekit.errors import CATALOGUE

MAX_INT64 = 2**63 - 1
NO_NUL = "^[^\\u0000]*$"
"""The pattern of a request string: any text without U+0000."""
JSON_VALUE_REF = "#/components/schemas/JsonValue"
PAYLOAD_VALUE_REF = "#/components/schemas/PayloadValue"
PAYLOAD_OBJECT_REF = "#/components/schemas/PayloadObject"
PAYLOAD_NAME: dict[str, Any] = {"pattern": NO_NUL, "not": {"const": "__proto__"}}
"""A member name in an event payload."""
PY_SPACE = ("\\t\\n\\v\\f\\r\\u001c-\\u001f \\u0085\\u00a0\\u1680\\u2000-\\u200a\\u2028\\u2029\\u202f\\u205f"
            "\\u3000")
"""Python's white space (`str.isspace`, `\\s` of its `re`) as the members of a regex class: spelled out, as `\\s`
differs between regex engines."""
NO_SPACE = f"^[^\\u0000{PY_SPACE}]+$"
"""The pattern of an id without white space (event and job ids)."""
JS_NONBLANK = ("^[^\\u0000]*[^\\u0000\\t\\n\\v\\f\\r \\u00a0\\u1680\\u2000-\\u200a\\u2028\\u2029\\u202f\\u205f\\u3000"
               "\\ufeff][^\\u0000]*$")
"""A string JavaScript's `trim` leaves non-empty (settld's non-empty string), without U+0000."""
_JSON_SCHEMAS: dict[str, Any] = {
    "JsonValue": {"description": "Any JSON value whose strings and member names hold no U+0000.",
                  "anyOf": [{"type": "string", "pattern": NO_NUL}, {"type": "number"}, {"type": "boolean"},
                            {"type": "null"}, {"type": "array", "items": {"$ref": JSON_VALUE_REF}},
                            {"$ref": "#/components/schemas/JsonObject"}]},
    "JsonObject": {"type": "object", "propertyNames": {"pattern": NO_NUL},
                   "additionalProperties": {"$ref": JSON_VALUE_REF}},
    "PayloadValue": {"description": "A value of an event payload: JSON whose strings and member names hold no "
                                    "U+0000 and whose objects have no member `__proto__` (settld's hashes leave it "
                                    "out). Numbers are read as JavaScript reads them; -0 is refused.",
                     "anyOf": [{"type": "string", "pattern": NO_NUL}, {"type": "number"}, {"type": "boolean"},
                               {"type": "null"}, {"type": "array", "items": {"$ref": PAYLOAD_VALUE_REF}},
                               {"$ref": PAYLOAD_OBJECT_REF}]},
    "PayloadObject": {"type": "object", "propertyNames": PAYLOAD_NAME,
                      "additionalProperties": {"$ref": PAYLOAD_VALUE_REF}},
}
CODES_KEY = "x-problem-codes"  # a response's codes; rendered into its description by `document`
_PROBLEM_REF = "#/components/schemas/Problem"


def problems(*codes: str) -> dict[int | str, dict[str, Any]]:
    """`responses=` for the error codes a route raises itself, grouped by their catalogued status."""
    out: dict[int | str, dict[str, Any]] = {}
    for code in codes:
        status = CATALOGUE[code].status
        out.setdefault(status, {CODES_KEY: []})[CODES_KEY].append(code)
    return out


_REQUEST_HEADERS: dict[str, dict[str, Any]] = {
    "Idempotency-Key": {
        "description": "Runs the write at most once per key (for this API key and route): a repeat with the same "
                       "request returns the first answer with `Idempotent-Replayed: true`; with another request "
                       "409 IDEMPOTENCY_CONFLICT.",
        "schema": {"type": "string", "minLength": 1, "maxLength": 500}},
    "X-Idempotency-Key": {"description": "The older name of Idempotency-Key (read when it is absent).",
                          "deprecated": True, "schema": {"type": "string", "minLength": 1, "maxLength": 500}},
    "x-expected-prev-chain-hash": {
        "description": "Server drafts: the chain hash the stream's head must have (`null` or empty: the stream "
                       "must not exist yet); without it a draft append answers 428 PRECONDITION_REQUIRED. Optional "
                       "with client-finalized events (they carry their prevChainHash): when given, the head must "
                       "have it too, else 409 PREV_CHAIN_HASH_MISMATCH; it is then not part of an idempotent "
                       "request's identity.",
        "schema": {"type": "string", "maxLength": 128}},
    "x-proxy-expected-prev-chain-hash": {"description": "The reference API's name of x-expected-prev-chain-hash; "
                                                        "ignored with client-finalized events, as settld does.",
                                         "deprecated": True, "schema": {"type": "string", "maxLength": 128}},
}
IDEMPOTENCY_HEADERS = ("Idempotency-Key", "X-Idempotency-Key")
CHAIN_HEADERS = ("x-expected-prev-chain-hash", "x-proxy-expected-prev-chain-hash")


def request_headers(*names: str) -> dict[str, Any]:
    """`openapi_extra=` declaring request headers a route reads (IDEMPOTENCY_HEADERS, CHAIN_HEADERS)."""
    return {"parameters": [{"name": name, "in": "header", "required": False, **_REQUEST_HEADERS[name]}
                           for name in names]}


IDEMPOTENT = request_headers(*IDEMPOTENCY_HEADERS)
"""`openapi_extra=` of a write run under `idempotency.write`."""


_RESPONSE_HEADERS: dict[str, Any] = {
    "X-Request-Id": {"description": "The request's id: the client's X-Request-Id (1..128 visible ASCII characters) "
                                    "or a generated one; also the requestId of a problem body.",
                     "required": True, "schema": {"type": "string"}},
    "RateLimit-Limit": {"description": "The API key's token bucket: requests allowed in a burst.",
                        "schema": {"type": "integer"}},
    "RateLimit-Remaining": {"description": "Requests the API key may still make now.",
                            "schema": {"type": "integer"}},
    "RateLimit-Reset": {"description": "Seconds until the API key's bucket is full again.",
                        "schema": {"type": "integer"}},
    "Retry-After": {"description": "Seconds to wait before retrying.", "required": True,
                    "schema": {"type": "integer", "minimum": 1}},
    "WWW-Authenticate": {"description": "`Bearer`: how to authenticate.", "schema": {"type": "string"}},
    "Idempotent-Replayed": {"description": "`true` when the answer is the stored one of an earlier request with "
                                           "the same Idempotency-Key.", "schema": {"type": "string", "enum": ["true"]}},
}
_RATE_HEADERS = ("RateLimit-Limit", "RateLimit-Remaining", "RateLimit-Reset")
_REQUEST_ID_PARAMETER = {
    "name": "X-Request-Id", "in": "header", "required": False,
    "description": "The request's id for the logs and the answer (1..128 visible ASCII characters); any other "
                   "value is replaced by a generated id.",
    "schema": {"type": "string"}}


def document(app: FastAPI, open_paths: Iterable[str], unbounded_paths: Iterable[str] = ()) -> None:
    """Install `app.openapi`: FastAPI's document completed as the module docstring says (built once).
    `unbounded_paths`: those the API process's bound of requests waiting for threads does not apply to."""
    unauthenticated = frozenset(open_paths)
    unbounded = frozenset(unbounded_paths)

    def openapi() -> dict[str, Any]:
        if app.openapi_schema is None:
            schema = get_openapi(title=app.title, version=app.version, description=app.description,
                                 routes=app.routes)
            components = schema.setdefault("components", {})
            components["securitySchemes"] = {
                "apiKey": {"type": "http", "scheme": "bearer", "bearerFormat": "sk_<keyid>_<secret>",
                           "description": "An API key: `Authorization: Bearer sk_…`, bound to one tenant and "
                                          "a set of scopes."}}
            schema["security"] = [{"apiKey": []}]
            components["headers"] = _RESPONSE_HEADERS
            components["parameters"] = {"X-Request-Id": _REQUEST_ID_PARAMETER}
            for path, operations in schema.get("paths", {}).items():
                for method, operation in operations.items():
                    _complete(operation, method, secured=path not in unauthenticated, bounded=path not in unbounded)
            schemas = components.setdefault("schemas", {})
            for unused in ("HTTPValidationError", "ValidationError"):
                schemas.pop(unused, None)
            schemas["Problem"] = Problem.model_json_schema(ref_template="#/components/schemas/{model}")
            schemas.update(_JSON_SCHEMAS)
            _exact_bounds(schema)
            _request_strings_without_nul(schema)
            app.openapi_schema = schema
        return app.openapi_schema

    app.openapi = openapi  # type: ignore[method-assign]


def _shared_codes(operation: dict[str, Any], method: str, *, secured: bool, bounded: bool = True) -> list[str]:
    """The codes every operation like this one can answer, whatever its route does."""
    headers = {p["name"] for p in operation.get("parameters", []) if p.get("in") == "header"}
    has_input = bool(operation.get("parameters")) or "requestBody" in operation
    codes = ["INPUT_INVALID", "INTERNAL"]
    if any(p.get("in") == "path" for p in operation.get("parameters", [])):
        codes.append("NOT_FOUND")  # a path parameter that is empty or holds `/` leaves no route to serve it
    if has_input or method != "get":
        codes.append("SCHEMA_INVALID")
    if "requestBody" in operation:
        codes.append("JSON_INVALID")
    if method != "get":
        codes.append("PAYLOAD_TOO_LARGE")
    if secured:
        codes += ["UNAUTHENTICATED", "API_KEY_INVALID", "SCOPE_REQUIRED", "RATE_LIMITED", "DATABASE_UNAVAILABLE"]
        if bounded:
            codes.append("OVERLOADED")  # the process's bound of requests waiting for threads (api.middleware)
    if headers.intersection(IDEMPOTENCY_HEADERS):
        codes += ["IDEMPOTENCY_CONFLICT", "IDEMPOTENCY_IN_PROGRESS"]
    return codes


def _complete(operation: dict[str, Any], method: str, *, secured: bool, bounded: bool = True) -> None:
    """One operation: security, the X-Request-Id parameter, response headers and every problem response."""
    if not secured:
        operation["security"] = []
    # a new list: FastAPI puts a route's openapi_extra parameters in the document as they are (shared)
    operation["parameters"] = [*operation.get("parameters", []), {"$ref": "#/components/parameters/X-Request-Id"}]
    responses: dict[str, Any] = operation.setdefault("responses", {})
    responses.pop("422", None)
    codes: dict[int, list[str]] = {}
    for status, response in responses.items():
        for code in response.pop(CODES_KEY, []):
            codes.setdefault(int(status), []).append(code)
    for code in _shared_codes(operation, method, secured=secured, bounded=bounded):
        codes.setdefault(CATALOGUE[code].status, []).append(code)
    success = ["X-Request-Id", *_RATE_HEADERS] if secured else ["X-Request-Id"]
    if any(p.get("name") in IDEMPOTENCY_HEADERS for p in operation.get("parameters", [])):
        success.append("Idempotent-Replayed")
    for status, response in responses.items():
        if status.startswith("2"):
            _add_headers(response, success)
    for problem_status in sorted(codes):
        responses[str(problem_status)] = _problem_response(problem_status, codes[problem_status], secured=secured)


def _problem_response(status: int, codes: list[str], *, secured: bool) -> dict[str, Any]:
    unique = list(dict.fromkeys(codes))
    lines = "\n".join(f"- `{code}`: {CATALOGUE[code].meaning}" for code in unique)
    response: dict[str, Any] = {
        "description": f"A problem; `code` is one of:\n\n{lines}",
        "content": {PROBLEM_TYPE: {"schema": {"$ref": _PROBLEM_REF}}},
    }
    headers = ["X-Request-Id"]
    if status in (429, 503) and "MIGRATIONS_PENDING" not in unique:
        headers.append("Retry-After")
    elif status == 503:  # not ready: Retry-After only while the database is unreachable
        response["headers"] = {"Retry-After": {**_RESPONSE_HEADERS["Retry-After"], "required": False}}
    if status == 429 and secured:
        headers += _RATE_HEADERS
    if status == 401:
        headers.append("WWW-Authenticate")
    _add_headers(response, headers)
    return response


def _add_headers(response: dict[str, Any], names: Iterable[str]) -> None:
    response.setdefault("headers", {}).update({name: {"$ref": f"#/components/headers/{name}"} for name in names})


_BOUNDS = ("minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum")


def _exact_bounds(node: Any) -> None:
    """Integer bounds as integers: FastAPI's document model reads them as floats, and 2**63 - 1 becomes 2**63."""
    if isinstance(node, dict):
        for name in _BOUNDS:
            value = node.get(name)
            if isinstance(value, float) and value.is_integer():
                node[name] = MAX_INT64 if value == float(MAX_INT64) else int(value)
        for child in node.values():
            _exact_bounds(child)
    elif isinstance(node, list):
        for child in node:
            _exact_bounds(child)


def _request_strings_without_nul(document: dict[str, Any]) -> None:
    """NO_NUL on every string of a parameter or request body without a pattern, format or enum of its own (the
    components they name included), and JsonValue members in their open objects."""
    components = document.get("components", {}).get("schemas", {})
    seen: set[str] = set()

    def visit(node: Any) -> None:
        if isinstance(node, list):
            for child in node:
                visit(child)
            return
        if not isinstance(node, dict):
            return
        ref = node.get("$ref")
        if isinstance(ref, str) and ref.startswith("#/components/schemas/"):
            name = ref.rsplit("/", 1)[1]
            if name not in seen:
                seen.add(name)
                visit(components.get(name))
            return
        if node.get("type") == "string" and not {"pattern", "format", "enum", "const"} & node.keys():
            node["pattern"] = NO_NUL
        if node.get("type") == "object" and "properties" not in node and node.get("additionalProperties", True) is True:
            node["propertyNames"] = {"pattern": NO_NUL}
            node["additionalProperties"] = {"$ref": JSON_VALUE_REF}
        for key in ("anyOf", "oneOf", "allOf", "items", "prefixItems", "additionalProperties"):
            visit(node.get(key))
        for member in node.get("properties", {}).values():
            visit(member)

    for operations in document.get("paths", {}).values():
        for operation in operations.values():
            for parameter in operation.get("parameters", []):
                visit(parameter.get("schema"))
            for media in operation.get("requestBody", {}).get("content", {}).values():
                visit(media.get("schema"))
    for parameter in document.get("components", {}).get("parameters", {}).values():
        visit(parameter.get("schema"))
