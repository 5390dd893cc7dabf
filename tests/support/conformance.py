"""Checks that an API answer is one the OpenAPI document declares: schemathesis' conformance checks (status
code, content type, body schema, required headers), and for a problem, that its `code` is one of those the
document lists for the operation and status, and that its `status` and `requestId` are the answer's."""

from __future__ import annotations

import re
from typing import Any

from schemathesis.core.failures import FailureGroup
from schemathesis.specs.openapi.checks import (
    content_type_conformance,
    response_headers_conformance,
    response_schema_conformance,
    status_code_conformance,
)

CONFORMANCE = [status_code_conformance, content_type_conformance, response_schema_conformance,
               response_headers_conformance]
_CODE_LINE = re.compile(r"^- `([A-Z0-9_]+)`: ", re.MULTILINE)


def nonconformance(case: Any, response: Any) -> str | None:
    """Why `response` (to `case`) is not as documented, or None."""
    try:
        case.validate_response(response, checks=CONFORMANCE)
    except FailureGroup as exc:
        return "; ".join(f"{getattr(e, 'title', type(e).__name__)}: {str(e)[:300]}" for e in exc.exceptions)
    if response.headers.get("content-type", [""])[0].startswith("application/problem+json"):
        declared = case.operation.definition.raw["responses"][str(response.status_code)]["description"]
        body = response.json()
        if body.get("code") not in _CODE_LINE.findall(declared):
            return f"problem code {body.get('code')} is not listed for {response.status_code}"
        if body["status"] != response.status_code or body.get("requestId") != response.headers["x-request-id"][0]:
            return "the problem's status or requestId is not the answer's"
    return None
