"""settld's API payload validators (`settlekit.jobs.api_payloads`) against the reference's own verdicts.

`tests/vectors/reference_runs/api_payloads.json.gz` holds payload cases of every validated job event type (corpus
payloads and their mutations, made by `tests/reference/api_payload_cases.py`) with what settld 0.1.0's validators
answer when its append route calls them: accepted, or refused with a message. settlekit must give the same answer
and the same message on every case."""

from __future__ import annotations

import gzip
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from settlekit.errors import ValidationError
from settlekit.events.canonical import parse_json
from settlekit.jobs import process_job_events
from settlekit.jobs.api_payloads import ROUTES, ApiPayloadRejected, api_payload_error, check_api_payload
from settlekit.jobs.api_payloads._js import MISSING

VECTORS = Path(__file__).resolve().parents[1] / "vectors" / "reference_runs" / "api_payloads.json.gz"
CASES: list[dict[str, Any]] = parse_json(gzip.decompress(VECTORS.read_bytes()))["cases"]


def test_the_cases_cover_every_validated_type_both_ways() -> None:
    accepted = Counter(c["type"] for c in CASES if c["ok"])
    refused = Counter(c["type"] for c in CASES if not c["ok"])
    assert set(accepted) == set(ROUTES) == set(refused)
    assert len({c["message"] for c in CASES if not c["ok"]}) > 300


@pytest.mark.parametrize("event_type", sorted(ROUTES))
def test_settlekit_answers_every_case_as_the_reference(event_type: str) -> None:
    cases = [c for c in CASES if c["type"] == event_type]
    differ = []
    for case in cases:
        mine = api_payload_error(event_type, case.get("payload", MISSING))
        if mine != case["message"]:
            differ.append((case.get("payload", "<none>"), case["message"], mine))
    assert not differ, f"{len(differ)} of {len(cases)} differ, first: {differ[:3]}"


def test_unvalidated_types_pass() -> None:
    assert api_payload_error("JOB_CREATED", {"anything": 1}) is None
    assert api_payload_error("NOT_A_TYPE", None) is None


def test_check_raises_a_400_with_the_reference_message() -> None:
    event = {"type": "ZONE_COVERAGE_REPORTED", "payload": {"jobId": "j", "zoneId": "z", "coveragePct": 50.5}}
    with pytest.raises(ApiPayloadRejected) as exc:
        check_api_payload(event)
    assert isinstance(exc.value, ValidationError)
    assert (exc.value.status, exc.value.code) == (400, "SCHEMA_INVALID")
    assert exc.value.message == "payload.coveragePct must be an integer in range 0..100"
    assert exc.value.details["eventType"] == "ZONE_COVERAGE_REPORTED"


def test_only_the_live_path_applies_them() -> None:
    """Offline tools reproduce what settld's core accepts; its core does not run the API's validators."""
    created = {"v": 1, "id": "e1", "at": "2026-01-01T00:00:00.000Z", "streamId": "job_1", "type": "JOB_CREATED",
               "actor": {"type": "system", "id": "s"}, "payload": {"templateId": "t"}}
    state = process_job_events(None, [created]).state
    cancelled = {**created, "id": "e2", "type": "JOB_CANCELLED", "payload": {"jobId": "job_1", "extra": 1}}
    assert api_payload_error("JOB_CANCELLED", cancelled["payload"]) is not None
    process_job_events(state, [cancelled])
    with pytest.raises(ApiPayloadRejected):
        process_job_events(state, [cancelled], live=True)
