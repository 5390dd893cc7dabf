"""schemathesis' engine over the whole OpenAPI document, in-process (ASGI), on both backends, with every check it
has: no 5xx; every answer as documented (status code, content type, body schema, the event stream's messages,
headers, problem codes: support/conformance.py); schema-valid requests accepted and schema-invalid ones refused
(positive_data_acceptance, negative_data_rejection); 405 with `Allow` for undocumented methods; 401 without a key;
a missing required header refused; resources usable after creation and gone after deletion (stateful checks).

Two runs on one seeded tenant (a job with artifacts and deliveries, a destination, signer keys, a contract, a replay,
a consumer): every phase (coverage: boundary and invalid values of each parameter; fuzzing: generated requests,
valid and invalid; stateful: sequences through the document's links) with generated ids and the ids learned from
answers, then fuzzing with the seeded ids as path parameters so the handlers run past their lookups. Examples per
operation and phase are bounded (SCHEMATHESIS_MAX_EXAMPLES, default 4) and the run is derandomized
(SCHEMATHESIS_SEED): reproducible, and seconds long; raise both for a longer campaign (above 4: every undocumented
method, longer stateful sequences). The figures of the run
(operations, requests, failures per check) are printed with -s. No workers run, so destinations it creates are never
delivered to; DNS is answered by a loopback resolver."""

from __future__ import annotations

import collections
import contextlib
import logging
import os
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass, field
from typing import Any

import pytest

from settlekit.api.feed import HEARTBEAT, FeedStreams
from settlekit.application.destinations import DestinationPolicy
from settlekit.store.db import connect
from support.api import ALL_SCOPES, TENANT_A, client, key_for, make_app, seed_tenant

schemathesis = pytest.importorskip("schemathesis")
from schemathesis.config import SchemathesisConfig  # noqa: E402
from schemathesis.engine import events, from_schema  # noqa: E402

from support.conformance import install_checks  # noqa: E402

MAX_EXAMPLES = int(os.environ.get("SCHEMATHESIS_MAX_EXAMPLES", "4"))
CAMPAIGN = MAX_EXAMPLES > 4  # a longer run: every undocumented method, longer stateful sequences
SEED = int(os.environ.get("SCHEMATHESIS_SEED", "1"))
PHASES = ("examples", "coverage", "fuzzing", "stateful")


def _loopback_resolver(host: str, port: int) -> Sequence[str]:
    return ["127.0.0.1"]


def _backlog_only(feed: FeedStreams) -> None:
    """Event streams end once they have sent what is stored (at their first heartbeat) instead of never."""
    stream = feed.events
    feed.heartbeat_interval = feed.poll_interval = 0.01

    async def until_caught_up(*args: Any, **kwargs: Any) -> AsyncIterator[bytes]:
        async with contextlib.aclosing(stream(*args, **kwargs)) as chunks:
            async for chunk in chunks:
                if chunk == HEARTBEAT:
                    return
                yield chunk

    feed.events = until_caught_up  # type: ignore[method-assign]


@dataclass
class Figures:
    """What a run did: requests per phase, checks run and failed per check, the failures themselves."""

    requests: collections.Counter[str] = field(default_factory=collections.Counter)
    checks: collections.Counter[str] = field(default_factory=collections.Counter)
    failed: collections.Counter[str] = field(default_factory=collections.Counter)
    operations: set[str] = field(default_factory=set)
    failures: dict[tuple[str, str], list[str]] = field(default_factory=dict)

    def record(self, recorder: Any, phase: str) -> None:
        for case_id in recorder.cases:
            self.requests[phase] += case_id in recorder.interactions
        if phase != "stateful":
            self.operations.add(recorder.label)
        for case_id, nodes in recorder.checks.items():
            for node in nodes:
                self.checks[node.name] += 1
                if node.failure_info is None:
                    continue
                self.failed[node.name] += 1
                found = self.failures.setdefault((node.name, recorder.label), [])
                if len(found) < 3:
                    found.append(_describe(node.failure_info, recorder.interactions.get(case_id)))

    def report(self) -> str:
        lines = [f"{len(self.operations)} operations, {sum(self.requests.values())} requests "
                 f"({', '.join(f'{k} {v}' for k, v in sorted(self.requests.items()))})"]
        lines += [f"  {name}: {self.checks[name]} run, {self.failed[name]} failed" for name in sorted(self.checks)]
        return "\n".join(lines)


def _describe(info: Any, interaction: Any) -> str:
    answer = ""
    if interaction is not None and interaction.response is not None:
        answer = f" -> {interaction.response.status_code} {interaction.response.content[:300]!r}"
    return f"{info.failure.title}: {str(info.failure.message)[:300]}\n    {info.code_sample[:700]}{answer}"


def run_engine(app: Any, config: dict[str, Any], figures: Figures, errors: list[str]) -> None:
    schema = schemathesis.openapi.from_asgi("/openapi.json", app, config=SchemathesisConfig.from_dict(config))
    install_checks(schema)
    for event in from_schema(schema).execute():
        if isinstance(event, events.ScenarioFinished):
            figures.record(event.recorder, event.phase.value)
        elif isinstance(event, events.NonFatalError):
            errors.append(f"{event.label}: {event.info.title}: {str(event.value)[:500]}")
        elif isinstance(event, events.FatalError):
            raise event.exception


def _config(tenant_key: str, operator_key: str, phases: Sequence[str], **extra: Any) -> dict[str, Any]:
    return {
        "seed": SEED,
        "continue-on-failure": True,
        "cache": {"enabled": False},  # no failures replayed from an earlier run: each run is its own
        "headers": {"Authorization": f"Bearer {tenant_key}"},
        # deployment-wide routes need a key of the operator tenant
        "operations": [{"include-path-regex": "^/(v1/ops/|metrics)",
                        "headers": {"Authorization": f"Bearer {operator_key}"}},
                       # the append's body (drafts, envelopes, lists of either) has the most boundary cases of all
                       # (a quarter of the coverage phase): fuzzed in every run, covered in a campaign
                       *([] if CAMPAIGN else [{"include-name": "POST /v1/jobs/{job_id}/events",
                                               "phases": {"coverage": {"enabled": False}}}])],
        "generation": {"mode": "all", "max-examples": MAX_EXAMPLES, "deterministic": True, "no-shrink": True,
                       "database": "none"},
        "checks": {"enabled": True},
        "phases": {name: {"enabled": name in phases} for name in PHASES} | {
            # 405 with Allow for an undocumented method (test_api_hardening tries each one on every path)
            "coverage": {"enabled": "coverage" in phases,
                         **({} if CAMPAIGN else {"unexpected-methods": ["OPTIONS"]})},
            "stateful": {"enabled": "stateful" in phases, "max-steps": 2 * MAX_EXAMPLES,
                         "generation": {"max-examples": MAX_EXAMPLES if CAMPAIGN else 2}}},
        **extra,
    }


def test_whole_api_conforms(db_url: str) -> None:
    db = connect(db_url)
    db.migrate()
    api_log = logging.getLogger("settlekit.api")
    api_log.setLevel(logging.CRITICAL)  # 4xx noise; the answers are checked below
    figures, errors = Figures(), []
    try:
        policy = DestinationPolicy(allow_insecure_http=True, allow_loopback=True, resolver=_loopback_resolver)
        app = make_app(db, destination_policy=policy)
        _backlog_only(app.state.settlekit.feed)
        tenant_key = key_for(db, TENANT_A, ALL_SCOPES)
        seeded = seed_tenant(db, client(app, tenant_key))
        operator_key = key_for(db, "system", ["admin"])
        run_engine(app, _config(tenant_key, operator_key, PHASES), figures, errors)
        seeded_ids = {"job_id": seeded.job_id, "artifact_id": seeded.artifact_id,
                      "destination_id": seeded.destination_id, "delivery_id": seeded.delivery_id,
                      "key_id": seeded.key_ids[0], "name": "settlekit:artifacts", "month": "2026-01",
                      "account_id": "acct_cash", "contract_hash": seeded.contract_hash, "replay_id": seeded.replay_id}
        run_engine(app, _config(tenant_key, operator_key, ["fuzzing"], parameters=seeded_ids), figures, errors)
    finally:
        api_log.setLevel(logging.NOTSET)
        db.close()
    print(f"\nschemathesis on {db_url.partition(':')[0]}: {figures.report()}")
    assert len(figures.operations) >= 57, sorted(figures.operations)
    assert sum(figures.requests.values()) >= 57 * MAX_EXAMPLES
    failures = [f"{check} on {operation}:\n  " + "\n  ".join(found)
                for (check, operation), found in sorted(figures.failures.items())]
    assert not errors and not failures, "\n".join(errors + failures)
