"""The pure step the store runs inside its append transaction.

For each event: payload validation, transition check, ledger postings from the state *before* the event
(the dry run), reducer step, then allocations against the state *after* it (vectors README). Any failure
raises and the caller rolls back; the stored state passed in is never modified.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from settlekit.errors import ValidationError
from settlekit.jobs.reducer import (
    JobState,
    _step,
    check_event,
    deserialize_state,
    initial_state,
    serialize_state,
)
from settlekit.ledger.allocations import allocations_for_entry
from settlekit.ledger.postings import JOB_POSTING_RULES


@dataclass(slots=True)
class JobAppendResult:
    """`state`: the JSON-able stored form (`streams.snapshot_json`); `snapshot`: the settld-compatible job
    (= `state["snapshot"]`); `ledger_entries`: `{eventId, eventType, entry}` items in order; `allocations`:
    flat per-posting allocations in entry order."""

    state: dict[str, Any]
    snapshot: dict[str, Any]
    ledger_entries: list[dict[str, Any]] = field(default_factory=list)
    allocations: list[dict[str, Any]] = field(default_factory=list)


def process_job_events(
    prev_state: Mapping[str, Any] | None,
    events: Sequence[Mapping[str, Any]],
    *,
    tenant_id: str | None = None,
    contract_doc: Mapping[str, Any] | None = None,
    with_allocations: bool = True,
    contract_resolver: Callable[[str], Mapping[str, Any] | None] | None = None,
) -> JobAppendResult:
    """Validate, post and reduce `events` on top of `prev_state` (a `JobAppendResult.state` /
    `serialize_state` dict, or None for a new stream whose first event must be JOB_CREATED).

    `contract_doc`: the operator contract document resolved by the store from `operatorContractHash`, if any.
    `contract_resolver`: instead of a fixed document, look up the job's `operatorContractHash` (as of each
    entry) — the document's party ids apply, and its split plan is executed when `connect.enabled` is true.
    Raises SettlekitError subclasses: EVENT_TYPE_UNKNOWN (400), SCHEMA_INVALID (400), INVALID_TRANSITION
    (409), domain codes (409), LEDGER_POSTING_INVALID (409, `details.code`).
    """
    if not events:
        raise ValidationError("nothing to append", code="SCHEMA_INVALID")
    state: JobState | None = deserialize_state(prev_state) if prev_state is not None else None
    ledger_entries: list[dict[str, Any]] = []
    allocations: list[dict[str, Any]] = []
    rules = JOB_POSTING_RULES
    for event in events:
        if state is None:
            state = initial_state(event)
            continue
        to_status = check_event(state, event)
        t = event["type"]
        rule = rules.get(t)
        entries = rule(state.snapshot, state.facts, event) if rule is not None else None
        state = _step(state, event, to_status)
        if entries:
            for entry in entries:
                ledger_entries.append({"eventId": event["id"], "eventType": t, "entry": entry})
                if with_allocations:
                    doc, execute_plan = contract_doc, False
                    if contract_resolver is not None:
                        pinned = state.snapshot.get("operatorContractHash")
                        doc = contract_resolver(pinned) if isinstance(pinned, str) and pinned else None
                        execute_plan = doc is not None
                    allocations.extend(
                        allocations_for_entry(
                            entry, state.snapshot, tenant_id=tenant_id, contract_doc=doc,
                            execute_split_plan=execute_plan,
                        )
                    )
    assert state is not None
    return JobAppendResult(serialize_state(state), state.snapshot, ledger_entries, allocations)
