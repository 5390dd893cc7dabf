"""Checks that an API answer is one the OpenAPI document declares: schemathesis' conformance checks (status
code, content type, body schema, required headers), and for a problem, that its `code` is one of those the
document lists for the operation and status, and that its `status` and `requestId` are the answer's.

`install_checks` readies a schema for schemathesis' engine: the problem check above as one more check, and the
refusals of schema-valid requests that no JSON Schema can state (BEYOND_SCHEMA) taken as acceptance."""

from __future__ import annotations

import functools
import math
import re
from typing import Any

import schemathesis
from schemathesis.core.failures import FailureGroup
from schemathesis.openapi.checks import RejectedPositiveData
from schemathesis.specs.openapi.checks import (
    content_type_conformance,
    response_headers_conformance,
    response_schema_conformance,
    status_code_conformance,
)

CONFORMANCE = [status_code_conformance, content_type_conformance, response_schema_conformance,
               response_headers_conformance]
_CODE_LINE = re.compile(r"^- `([A-Z0-9_]+)`: ", re.MULTILINE)

BEYOND_SCHEMA = {
    # rules between parameters or members, which a parameter's or member's schema cannot state
    "DELIVERY_WINDOW_INVALID": "`since` before `until`, and the window's longest span",
    "FINANCE_MONTH_INVALID": "the first month not after the second",
    "LEDGER_AS_OF_INVALID": "asOf and position not together (two query parameters); asOf's UTC instant in years "
                            "1 to 9999 (its offset moves it)",
    "PRECONDITION_REQUIRED": "a server draft needs x-expected-prev-chain-hash; a client-finalized event does not",
    # values only the server can judge: what it issued or stored, where a host resolves, a parse no pattern makes
    "CURSOR_INVALID": "a cursor or id is an opaque token the server issued to the tenant",
    "CURSOR_NUMERIC": "a number where a token is expected (an old cursor) is refused as such",
    "CONSUMER_RESET_INVALID": "a reset target at or below the consumer's head",
    "SECRET_NOT_FOUND": "a secretRef names a secret this tenant stored",
    "DESTINATION_URL_FORBIDDEN": "the URL's host, what it resolves to and the deployment's network policy",
    "SIGNER_KEY_INVALID": "a PEM that holds an Ed25519 public key",
    "CONTRACT_INVALID": "a ContractDocument.v1 that settld's validator accepts (docs/contracts.md)",
    "FINANCE_GL_ACCOUNT_UNMAPPED": "the tenant's stored GL mapping covers every account of the month",
    "FUTURE_TIMESTAMP": "an event's `at` at most 5 minutes after the server's clock",
}
"""Problem codes a schema-valid request may get (400, 428): each enforces a rule JSON Schema cannot state; the
document states everything else of the same input."""


def _has_negative_zero(value: Any) -> bool:
    if isinstance(value, float):
        return value == 0 and math.copysign(1.0, value) < 0
    if isinstance(value, dict):
        return any(_has_negative_zero(v) for v in value.values())
    if isinstance(value, list):
        return any(_has_negative_zero(v) for v in value)
    return False


def _client_finalized(body: Any) -> bool:
    items = body if isinstance(body, list) else [body]
    return any(isinstance(item, dict) and "chainHash" in item for item in items)


def beyond_schema(case: Any, problem: dict[str, Any]) -> str | None:
    """Why `problem`, the answer to a schema-valid request, refuses it for a rule no JSON Schema can state; None
    when the document should have stated the rule."""
    code = problem.get("code")
    details = problem.get("details") or {}
    body = case.body if isinstance(case.body, (dict, list)) else None
    if code in BEYOND_SCHEMA:
        return BEYOND_SCHEMA[code]
    if code == "WEBHOOK_SECRET_INVALID" and isinstance(body, dict) and (
            body.get("signing") is None or body.get("secret") is None):
        return "the destination's stored secret or signing mode, which the request does not give"
    if code == "SCHEMA_INVALID" and "eventType" in details and case.operation.path != "/v1/jobs":
        # POST /v1/jobs: the document states JOB_CREATED's payload
        return "the payload rules of each event type (README, HTTP API)"
    if code == "SCHEMA_INVALID" and details.get("field") == "streamId":
        return "an event's streamId is the job the path names"
    if code not in ("SCHEMA_INVALID", "INPUT_INVALID", "JSON_INVALID") and _client_finalized(body):
        return "a client-finalized event's hashes, chain and signature, checked against the stream and the keys"
    if code == "SCHEMA_INVALID" and _has_negative_zero(body):
        return "-0, refused in hashed JSON, equals 0 to JSON Schema"
    return None


def problem_nonconformance(case: Any, response: Any) -> str | None:
    """Why a problem answer's body does not match the document (its code unlisted for the status, or its status
    or requestId not the answer's), or None; None for any other answer."""
    if not response.headers.get("content-type", [""])[0].startswith("application/problem+json"):
        return None
    declared = case.operation.definition.raw["responses"].get(str(response.status_code))
    if declared is None:
        return None  # status_code_conformance reports it
    body = response.json()
    if body.get("code") not in _CODE_LINE.findall(declared["description"]):
        return f"problem code {body.get('code')} is not listed for {response.status_code}"
    if body["status"] != response.status_code or body.get("requestId") != response.headers["x-request-id"][0]:
        return "the problem's status or requestId is not the answer's"
    return None


def nonconformance(case: Any, response: Any) -> str | None:
    """Why `response` (to `case`) is not as documented, or None."""
    try:
        case.validate_response(response, checks=CONFORMANCE)
    except FailureGroup as exc:
        return "; ".join(f"{getattr(e, 'title', type(e).__name__)}: {str(e)[:300]}" for e in exc.exceptions)
    return problem_nonconformance(case, response)


def problem_conformance(ctx: Any, response: Any, case: Any) -> None:
    """schemathesis check: a problem's code is one the document lists for its operation and status."""
    found = problem_nonconformance(case, response)
    if found is not None:
        raise AssertionError(found)


@functools.cache
def _register_problem_check() -> None:
    schemathesis.check(problem_conformance)


def _beyond_schema(failure: Any, case: Any, response: Any) -> bool:
    if not isinstance(failure, RejectedPositiveData):
        return False
    if not response.headers.get("content-type", [""])[0].startswith("application/problem+json"):
        return False
    return beyond_schema(case, response.json()) is not None


def install_checks(schema: Any) -> None:
    """`problem_conformance` as a check of every engine run, and BEYOND_SCHEMA refusals not failures of
    positive_data_acceptance for this schema."""
    _register_problem_check()

    @schema.hook
    def filter_failure(context: Any, failure: Any, case: Any, response: Any) -> bool:
        return not _beyond_schema(failure, case, response)
