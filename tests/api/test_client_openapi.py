"""`settlekit.client` against the OpenAPI document of `create_app`: every operation has a client method, and each
method's route, path and query parameters and body exist in the document as the method sends them (so a route
renamed or a parameter dropped on either side fails here)."""

from __future__ import annotations

import inspect
import re
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import pytest

from settlekit.client.operations import UNSET, Operations
from settlekit.store.db import connect
from support.api import make_app

_PARAM = re.compile(r"\{([a-z_]+)\}")


@pytest.fixture(scope="module")
def document(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Any]]:
    db = connect(f"sqlite:///{tmp_path_factory.mktemp('db') / 'settlekit.db'}")
    db.migrate()
    try:
        yield make_app(db).openapi()
    finally:
        db.close()


Asked = tuple[str, dict[str, Any], Any]


class _Recorder(Operations[Asked, Asked]):
    """Answers each call (or stream) with what the method asked for instead of sending it."""

    def _call(self, route: str, /, *, body: Any = UNSET, headers: Mapping[str, str] | None = None,
              idempotency_key: str | None = None, **params: Any) -> Asked:
        return route, params, body

    def _stream(self, route: str, /, *, headers: Mapping[str, str] | None = None, **params: Any) -> Asked:
        return route, params, UNSET


def _sample(annotation: str) -> Any:
    """A value of the annotated type, enough to reach the route."""
    kind = annotation.replace(" | None", "").strip()
    if kind.startswith("Literal["):
        return re.findall(r"[\"']([^\"']+)[\"']", kind)[0]
    if kind == "int" or kind.startswith("int |"):
        return 7
    if kind == "bool":
        return True
    if kind.startswith(("Mapping", "dict")):
        return {"k": "v"}
    if kind.startswith(("Sequence[Mapping", "list")):
        return [{"k": "v"}]
    if kind.startswith("Sequence"):
        return ["v"]
    return "v1"


def _calls() -> Iterator[tuple[str, tuple[str, dict[str, Any], Any], dict[str, Any]]]:
    """Each public method of the client called with every parameter given (and the arguments)."""
    recorder = _Recorder()
    for name, method in inspect.getmembers(Operations, inspect.isfunction):
        if name.startswith("_"):
            continue
        args = {p.name: _sample(str(p.annotation)) for p in inspect.signature(method).parameters.values()
                if p.name not in ("self", "idempotency_key")}
        yield name, getattr(recorder, name)(**args), args


def _operations(document: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {f"{method.upper()} {path}": op for path, ops in document["paths"].items() for method, op in ops.items()}


def test_every_operation_has_a_client_method(document: dict[str, Any]) -> None:
    covered = {route for _, (route, _, _), _ in _calls()}
    missing = sorted(set(_operations(document)) - covered)
    assert not missing, f"add a method to settlekit.client.operations.Operations for: {missing}"


def _resolved(document: dict[str, Any]) -> Any:
    """A parameter as written, or the component its `$ref` names."""

    def resolve(param: dict[str, Any]) -> dict[str, Any]:
        ref = param.get("$ref")
        return document["components"]["parameters"][ref.rsplit("/", 1)[1]] if ref else param

    return resolve


def test_each_method_matches_its_operation(document: dict[str, Any]) -> None:
    operations = _operations(document)
    wrong = []
    for name, (route, params, body), args in _calls():
        op = operations.get(route)
        if op is None:
            wrong.append(f"{name}: {route} is not in the OpenAPI document")
            continue
        declared = {(p["name"], p["in"]) for p in map(_resolved(document), op.get("parameters", []))}
        path_names = set(_PARAM.findall(route.partition(" ")[2]))
        sent = {(k, "path" if k in path_names else "query") for k in params}
        documented = {(n, where) for n, where in declared if where in ("path", "query")}
        if sent != documented:
            wrong.append(f"{name}: sends {sorted(sent)}, the document has {sorted(documented)}")
        schemas = {p["name"]: p.get("schema", {}) for p in map(_resolved(document), op.get("parameters", []))}
        for param, value in params.items():
            types = _types(schemas.get(param, {}))
            if isinstance(value, (int, str)) and types and _JSON_TYPE[type(value)] not in types:
                wrong.append(f"{name}: sends {param} as {type(value).__name__}, the document has {sorted(types)}")
        if (body is not UNSET) != ("requestBody" in op):
            wrong.append(f"{name}: body {'sent' if body is not UNSET else 'not sent'}, the document "
                         f"{'has' if 'requestBody' in op else 'has no'} requestBody")
        schema = _body_schema(document, op)
        passed_through = any(body is arg for arg in args.values())  # a document the caller gives whole (GlMapping)
        if isinstance(body, dict) and schema is not None and "properties" in schema and not passed_through:
            unknown = set(body) - set(schema["properties"])
            if unknown:
                wrong.append(f"{name}: body fields {sorted(unknown)} are not in the request schema")
            required = set(schema.get("required", [])) - set(body)
            if required:
                wrong.append(f"{name}: required body fields {sorted(required)} are never sent")
    assert not wrong, "\n".join(wrong)


_JSON_TYPE = {int: "integer", str: "string", bool: "boolean"}


def _types(schema: dict[str, Any]) -> set[str]:
    """The JSON types a parameter's schema allows (cursors and ids are strings, counts integers)."""
    found = {schema["type"]} if "type" in schema else set()
    for variant in schema.get("anyOf", []):
        found |= _types(variant)
    return found - {"null"}


def _body_schema(document: dict[str, Any], op: dict[str, Any]) -> dict[str, Any] | None:
    content = op.get("requestBody", {}).get("content", {}).get("application/json", {})
    schema = content.get("schema")
    if not isinstance(schema, dict):
        return None
    for variant in schema.get("anyOf", [schema]):
        ref = variant.get("$ref")
        if ref:
            resolved: dict[str, Any] = document
            for part in ref.lstrip("#/").split("/"):
                resolved = resolved[part]
            return resolved
    return schema


def test_the_client_does_not_import_the_server_side() -> None:
    source = Path(inspect.getfile(Operations)).parent
    for path in source.rglob("*.py"):
        text = path.read_text(encoding="utf-8")
        assert not re.search(r"settlekit\.(store|api|append|dispatch|delivery)\b", text), path.name


def _schemas(node: Any) -> Iterator[dict[str, Any]]:
    if isinstance(node, dict):
        yield node
        for child in node.values():
            yield from _schemas(child)
    elif isinstance(node, list):
        for child in node:
            yield from _schemas(child)


def test_bounds_are_json_schema_keywords_with_exact_values(document: dict[str, Any]) -> None:
    """Bounds are `minimum`/`maximum` (FastAPI wrote pydantic's `ge`/`le` when a validator came first, which JSON
    Schema ignores) and integers (its document model made floats of them: 2**63 - 1 became 2**63)."""
    wrong = []
    for node in _schemas(document):
        if {"ge", "le", "gt", "lt"} & node.keys() and {"type", "anyOf"} & node.keys():
            wrong.append(node)
        wrong += [node for name in ("minimum", "maximum") if isinstance(node.get(name), float)]
    assert not wrong, wrong[:3]
    reset = document["components"]["schemas"]["ResetIn"]["properties"]["to"]["anyOf"][0]
    assert reset["maximum"] == 2**53 - 1 and type(reset["maximum"]) is int
