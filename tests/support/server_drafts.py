"""A server draft on a corpus stream prefix through settlekit's live path, as compared with settld's events route
(tests/reference/draft_xcheck.py, tests/unit/test_server_drafts_reference.py)."""

from __future__ import annotations

import functools
import json
from typing import Any

from conftest import load_differential, load_vector
from settlekit.append.jobs import JobStreamDomain
from settlekit.errors import SettlekitError
from settlekit.events.envelope import Signer, finalize
from settlekit.jobs import process_job_events

Case = dict[str, Any]
# settlekit's live payload checks refuse these where settld's route stores them (README, deliberate differences)
DELIBERATE_REFUSALS = ("payload.<root> must be an object or null",
                       "payload.settlementProofRef must be an object or null")


@functools.cache
def server_signer() -> Signer:
    key = next(s for s in load_vector("settle_completed.json")["signers"] if s["role"] == "server")
    return Signer.from_pem(key["privateKeyPem"], key["publicKeyPem"])


@functools.cache
def _prefix_state(stream: str, prefix: int, extra_json: str) -> tuple[dict[str, Any], str, str]:
    """The live state after the stream's first `prefix` events and the `extra` ones (stored events the live rules
    would refuse are taken as the offline core takes them), the job id and the head's chain hash."""
    events = load_differential(stream)["events"][:prefix] + json.loads(extra_json)
    state = None
    for event in events:
        try:
            state = process_job_events(state, [event], live=True).state
        except SettlekitError:
            state = process_job_events(state, [event]).state
    assert state is not None
    return state, events[0]["streamId"], events[-1]["chainHash"]


def settlekit_outcome(case: Case, now: str) -> dict[str, Any]:
    """`{accepted, payload, message}`: the draft's payload as settlekit completes it, and its live verdict."""
    state, job_id, head = _prefix_state(case["stream"], case["prefix"], json.dumps(case.get("extra", [])))
    draft = {"v": 1, "id": "evt_draft", "at": now, "streamId": job_id, **case["draft"]}
    (completed,) = JobStreamDomain(None).prepare_drafts(state, [draft])
    event = finalize(completed, head, server_signer())
    try:
        process_job_events(state, [event], live=True)
    except SettlekitError as exc:
        return {"accepted": False, "payload": completed["payload"], "message": exc.message}
    return {"accepted": True, "payload": completed["payload"], "message": None}


def comparable(payload: Any, draft: dict[str, Any]) -> Any:
    """A stored payload without the decisionId settld draws at random when a DECISION_RECORDED draft names none."""
    given = draft.get("payload")
    named = isinstance(given, dict) and isinstance(given.get("decisionId"), str) and given["decisionId"].strip()
    if draft["type"] == "DECISION_RECORDED" and isinstance(payload, dict) and not named:
        return {**payload, "decisionId": "<drawn>"}
    return payload
