"""Property-based run of schemathesis over the whole OpenAPI document, in-process (ASGI), on both backends:
no request, valid or not, may end in a 5xx or an unhandled exception, and every answer must be one the document
declares (support/conformance.py: status code, content type, body schema, required headers, problem code).

Every operation gets valid inputs with generated path parameters, valid inputs with the ids of a seeded tenant
(a job with artifacts and deliveries, a destination, signer keys, a consumer) so the handlers run past their
lookups, and invalid inputs where the operation has something to make invalid. Examples per run are bounded
(SCHEMATHESIS_MAX_EXAMPLES, default 8) and derandomized: the run is reproducible and takes seconds.
No workers run, so destinations it creates are never delivered to; DNS is answered by a loopback resolver."""

from __future__ import annotations

import logging
import os
from collections.abc import Sequence
from typing import Any

import pytest

from settlekit.delivery.service import DestinationPolicy
from settlekit.store.db import connect
from support.api import ALL_SCOPES, TENANT_A, client, key_for, make_app, seed_tenant
from support.contracts import settld_accepted_contracts

schemathesis = pytest.importorskip("schemathesis")
from hypothesis import HealthCheck, Phase, given, settings  # noqa: E402
from hypothesis.errors import Unsatisfiable  # noqa: E402
from schemathesis import GenerationMode  # noqa: E402

from support.conformance import nonconformance  # noqa: E402

MAX_EXAMPLES = int(os.environ.get("SCHEMATHESIS_MAX_EXAMPLES", "8"))


def _loopback_resolver(host: str, port: int) -> Sequence[str]:
    return ["127.0.0.1"]


def _runs(operation: Any, seeded_ids: dict[str, str]) -> list[tuple[str, GenerationMode, dict[str, str] | None]]:
    names = {p.name for p in operation.path_parameters}
    runs: list[tuple[str, GenerationMode, dict[str, str] | None]] = [("valid", GenerationMode.POSITIVE, None)]
    if names:
        runs.append(("valid, seeded ids", GenerationMode.POSITIVE, {n: seeded_ids[n] for n in names}))
    # something to make invalid: a body, a query parameter or a typed path parameter (strings accept anything)
    if len(operation.body) or len(operation.query) or any(
            p.definition.get("schema", {}).get("type") != "string" for p in operation.path_parameters):
        runs.append(("invalid", GenerationMode.NEGATIVE, None))
    return runs


def _run(operation: Any, label: str, mode: GenerationMode, path_parameters: dict[str, str] | None, key: str,
         max_examples: int, failures: list[str]) -> int:
    """One bounded schemathesis run of one operation; returns the number of requests made."""
    calls = 0

    @settings(max_examples=max_examples, deadline=None, database=None, derandomize=True,
              phases=[Phase.explicit, Phase.generate], suppress_health_check=list(HealthCheck))
    @given(case=operation.as_strategy(generation_mode=mode, path_parameters=path_parameters))
    def check(case: Any) -> None:
        nonlocal calls
        calls += 1
        try:
            response = case.call(headers={"Authorization": f"Bearer {key}"})
        except Exception as exc:  # an exception the app did not turn into a response
            failures.append(f"{operation.label} [{label}]: {type(exc).__name__}: {exc}"[:400])
            return
        if response.status_code >= 500:
            failures.append(f"{operation.label} [{label}]: {response.status_code} "
                            f"{case.as_curl_command()} -> {response.text[:200]}"[:600])
            return
        found = nonconformance(case, response)
        if found is not None:
            failures.append(f"{operation.label} [{label}]: {response.status_code} not as documented: {found} "
                            f"{case.as_curl_command()} -> {response.text[:300]}"[:1500])

    try:
        check()
    except Unsatisfiable:  # nothing could be made invalid after all
        assert mode is GenerationMode.NEGATIVE, operation.label
    return calls


def run_schemathesis(app: Any, tenant_key: str, operator_key: str, seeded_ids: dict[str, str],
                     max_examples: int) -> tuple[int, list[str]]:
    """(requests made, failures) over every operation of the app's OpenAPI document."""
    schema = schemathesis.openapi.from_asgi("/openapi.json", app)
    failures: list[str] = []
    calls = 0
    for result in schema.get_all_operations():
        operation = result.ok()
        key = operator_key if operation.path.startswith(("/v1/ops/", "/metrics")) else tenant_key
        for label, mode, path_parameters in _runs(operation, seeded_ids):
            calls += _run(operation, label, mode, path_parameters, key, max_examples, failures)
    return calls, failures


def test_whole_api_conforms_without_5xx(db_url: str) -> None:
    db = connect(db_url)
    db.migrate()
    api_log = logging.getLogger("settlekit.api")
    api_log.setLevel(logging.CRITICAL)  # 4xx noise; 5xx are collected below
    try:
        policy = DestinationPolicy(allow_insecure_http=True, allow_loopback=True, resolver=_loopback_resolver)
        app = make_app(db, destination_policy=policy)
        app.state.settlekit.feed.close()  # an event stream then ends after its first line instead of never
        tenant_key = key_for(db, TENANT_A, ALL_SCOPES)
        seeded = seed_tenant(db, client(app, tenant_key))
        seeded_ids = {"job_id": seeded.job_id, "artifact_id": seeded.artifact_id,
                      "destination_id": seeded.destination_id, "delivery_id": str(seeded.delivery_id),
                      "key_id": seeded.key_ids[0], "name": "settlekit:artifacts", "month": "2026-01",
                      "account_id": "acct_cash"}
        registered = client(app, tenant_key).post("/v1/contracts", json=settld_accepted_contracts()[0]["document"])
        seeded_ids["contract_hash"] = registered.json()["contractHash"]
        seeded_ids["replay_id"] = seeded.replay_id
        operator_key = key_for(db, "system", ["admin"])  # deployment-wide routes need the operator tenant
        calls, failures = run_schemathesis(app, tenant_key, operator_key, seeded_ids, MAX_EXAMPLES)
    finally:
        api_log.setLevel(logging.NOTSET)
        db.close()
    assert calls >= 40 * MAX_EXAMPLES
    assert not failures, f"{len(failures)} failures:\n" + "\n".join(failures[:40])
