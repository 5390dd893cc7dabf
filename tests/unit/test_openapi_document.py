"""The OpenAPI document describes every operation fully: a typed 2xx body, every error as problem+json with its
codes, never FastAPI's 422 (the API answers 400), the headers the routes read. A route added without its
`response_model` / `responses=problems(...)` fails here (see ARCHITECTURE.md, "Adding a route")."""

from __future__ import annotations

import re
from typing import Any

import pytest
from prometheus_client import CollectorRegistry

from settlekit.api.app import OPEN_PATHS, create_app
from settlekit.errors import CATALOGUE
from settlekit.runtime.settings import Settings

METHODS = ("get", "post", "put", "patch", "delete")
PROBLEM = "application/problem+json"
CODE_LINE = re.compile(r"^- `([A-Z0-9_]+)`: ", re.MULTILINE)


@pytest.fixture(scope="module")
def document(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    url = f"sqlite:///{tmp_path_factory.mktemp('openapi')}/api.db"
    app = create_app(url, Settings(), server_signer=None, registry=CollectorRegistry())
    spec: dict[str, Any] = app.openapi()
    return spec


def _operations(document: dict[str, Any]) -> list[tuple[str, str, dict[str, Any]]]:
    return [(path, method, op) for path, ops in document["paths"].items() for method, op in ops.items()
            if method in METHODS]


def _resolve(document: dict[str, Any], schema: dict[str, Any]) -> dict[str, Any]:
    while "$ref" in schema:
        name = schema["$ref"].rsplit("/", 1)[-1]
        schema = document["components"]["schemas"][name]
    return schema


def test_every_operation_has_a_typed_success_body(document: dict[str, Any]) -> None:
    assert len(_operations(document)) >= 38
    for path, method, op in _operations(document):
        label = f"{method.upper()} {path}"
        success = {s: r for s, r in op["responses"].items() if s.startswith("2")}
        assert success, label
        for status, response in success.items():
            content = response.get("content")
            assert content, f"{label} {status}: no content"
            for media, body in content.items():
                schema = body.get("schema") or {}
                assert schema, f"{label} {status} {media}: empty schema"
                if media == "application/json":
                    assert _resolve(document, schema).get("type") in ("object", "array"), f"{label} {status}"
    metrics = document["paths"]["/metrics"]["get"]["responses"]["200"]["content"]
    assert set(metrics) == {"text/plain"}


def test_every_error_is_a_problem_with_its_codes(document: dict[str, Any]) -> None:
    assert "Problem" in document["components"]["schemas"]
    assert "HTTPValidationError" not in document["components"]["schemas"]
    for path, method, op in _operations(document):
        label = f"{method.upper()} {path}"
        assert "422" not in op["responses"], label
        errors = {s: r for s, r in op["responses"].items() if s[0] in "45"}
        assert "400" in errors and "500" in errors, label
        for status, response in errors.items():
            assert set(response["content"]) == {PROBLEM}, f"{label} {status}"
            assert response["content"][PROBLEM]["schema"] == {"$ref": "#/components/schemas/Problem"}
            codes = CODE_LINE.findall(response["description"])
            assert codes, f"{label} {status}: no codes listed"
            for code in codes:
                spec = CATALOGUE[code]
                assert int(status) in (spec.status, *spec.other_statuses), f"{label} {status}: {code}"
        if path not in OPEN_PATHS:
            assert {"401", "403", "429", "503"} <= set(errors), label
        if method != "get":
            assert "413" in errors, label
        for status in ("429", "503"):
            if status in errors and path not in OPEN_PATHS:
                assert "Retry-After" in errors[status]["headers"], f"{label} {status}"


def test_the_headers_the_routes_read_are_declared(document: dict[str, Any]) -> None:
    def headers(path: str, method: str) -> set[str]:
        op = document["paths"][path][method]
        return {p["name"] for p in op["parameters"] if p.get("in") == "header"}

    append = headers("/v1/jobs/{job_id}/events", "post")
    assert {"Idempotency-Key", "x-expected-prev-chain-hash"} <= append
    for path, method, op in _operations(document):
        refs = [p.get("$ref") for p in op["parameters"]]
        assert "#/components/parameters/X-Request-Id" in refs, f"{method.upper()} {path}"
        # every write runs under an Idempotency-Key, but a test send (harmless to repeat: nothing is stored)
        if method != "get" and (method, path) != ("post", "/v1/destinations/{destination_id}/test"):
            assert "Idempotency-Key" in headers(path, method), f"{method.upper()} {path}"
        for status, response in op["responses"].items():
            assert "X-Request-Id" in response["headers"], f"{method.upper()} {path} {status}"
