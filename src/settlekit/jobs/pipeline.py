"""The pure step the offline tools and the store's append transaction run.

For each event, in layers (as settld 0.1.0): (a) the transition check, which raises (payloads are not judged: settld's
core reads any value); on the live path (`live=True`) settld's API comes first, in its order: its payload validators
(`api_payloads`), settlekit's payload validation (`validate`) and its append-time domain rules (`server_rules`),
then the transition check, all of which raise;
then (b) the ledger postings from the state *before* the event: a posting rule that raises is *recorded* in
`ledger_errors` and the event goes on without an entry (settld's core records the error and goes on; its API
refuses the event, a deliberate difference, see the README); then the reducer step and the allocations against
the state *after* it. A raise leaves `prev_state` untouched.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from functools import partial
from typing import Any

from settlekit.errors import ValidationError
from settlekit.jobs import server_rules
from settlekit.jobs.api_payloads import check_api_payload
from settlekit.jobs.reducer import (
    JobState,
    _step,
    check_event,
    check_transition,
    deserialize_state,
    initial_state,
    serialize_state,
)
from settlekit.jobs.validate import check_genesis_payload, check_matched_as_settld, validate_payload
from settlekit.ledger.allocations import allocations_for_entry
from settlekit.ledger.errors import LedgerError
from settlekit.ledger.postings import JOB_POSTING_RULES, PostingRule


@dataclass(slots=True)
class JobAppendResult:
    """`state`: the JSON-able stored form (`streams.snapshot_json`); `snapshot`: the settld-compatible job
    (= `state["snapshot"]`); `ledger_entries`: `{eventId, eventType, entry}` items in order; `allocations`:
    flat per-posting allocations in entry order; `ledger_errors`: `{eventId, eventType, error: {code,
    message}}` per event whose posting rule raised (settld's message text), in event order."""

    state: dict[str, Any]
    snapshot: dict[str, Any]
    ledger_entries: list[dict[str, Any]] = field(default_factory=list)
    allocations: list[dict[str, Any]] = field(default_factory=list)
    ledger_errors: list[dict[str, Any]] = field(default_factory=list)


def posting_error(event: Mapping[str, Any], exc: LedgerError) -> dict[str, Any]:
    """The recorded form of a posting error."""
    return {
        "eventId": event.get("id"),
        "eventType": event.get("type"),
        "error": {"code": exc.reason, "message": exc.message},
    }


def _post_event(
    rule: PostingRule, state: JobState, event: Mapping[str, Any], ledger_errors: list[dict[str, Any]]
) -> list[dict[str, Any]] | None:
    """The entries of `rule` against the state before `event`; a posting error is recorded, not raised."""
    try:
        return rule(state.snapshot, state.facts, event)
    except LedgerError as exc:
        ledger_errors.append(posting_error(event, exc))
        return None


ContractResolver = Callable[[str], Mapping[str, Any] | None]
EntryAllocator = Callable[[Mapping[str, Any], Mapping[str, Any]], list[dict[str, Any]]]


def _allocate_entry(
    tenant_id: str | None,
    contract_doc: Mapping[str, Any] | None,
    contract_resolver: ContractResolver | None,
    entry: Mapping[str, Any],
    snapshot: Mapping[str, Any],
) -> list[dict[str, Any]]:
    """Allocations of one entry: with a resolver, the job's pinned operator contract (as of `snapshot`)
    replaces `contract_doc` and its split plan is executed."""
    doc, execute_plan = contract_doc, False
    if contract_resolver is not None:
        pinned = snapshot.get("operatorContractHash")
        doc = contract_resolver(pinned) if isinstance(pinned, str) and pinned else None
        execute_plan = doc is not None
    return allocations_for_entry(
        entry, snapshot, tenant_id=tenant_id, contract_doc=doc, execute_split_plan=execute_plan
    )


def _record_entries(
    event: Mapping[str, Any],
    entries: list[dict[str, Any]],
    snapshot: Mapping[str, Any],
    ledger_entries: list[dict[str, Any]],
    allocations: list[dict[str, Any]],
    allocate: EntryAllocator | None,
) -> None:
    """Append the event's entries (and, with `allocate`, their allocations against `snapshot`) in order."""
    t = event["type"]
    for entry in entries:
        ledger_entries.append({"eventId": event["id"], "eventType": t, "entry": entry})
        if allocate is not None:
            allocations.extend(allocate(entry, snapshot))


def _append_result(
    state: JobState,
    rule_facts: server_rules.Facts,
    ledger_entries: list[dict[str, Any]],
    allocations: list[dict[str, Any]],
    ledger_errors: list[dict[str, Any]],
) -> JobAppendResult:
    stored = serialize_state(state)
    stored[server_rules.STATE_KEY] = rule_facts
    return JobAppendResult(stored, state.snapshot, ledger_entries, allocations, ledger_errors)


def process_job_events(
    prev_state: Mapping[str, Any] | None,
    events: Sequence[Mapping[str, Any]],
    *,
    tenant_id: str | None = None,
    contract_doc: Mapping[str, Any] | None = None,
    with_allocations: bool = True,
    contract_resolver: ContractResolver | None = None,
    live: bool = False,
    recorded: bool = False,
) -> JobAppendResult:
    """Validate, post and reduce `events` on top of `prev_state` (a `JobAppendResult.state` /
    `serialize_state` dict, or None for a new stream whose first event must be JOB_CREATED).

    `contract_doc`: the operator contract document resolved by the store from `operatorContractHash`, if any.
    `contract_resolver`: instead of a fixed document, look up the job's `operatorContractHash` (as of each
    entry) — the document's party ids apply, and its split plan is executed when `connect.enabled` is true.
    `live`: also apply settld's API payload validators (`api_payloads`), settlekit's payload validation
    (`validate`) and the API's append-time domain rules (`server_rules.check`), for the store's append path;
    offline tools leave it False and, as settld's core, take any payload.
    Raises SettlekitError subclasses: EVENT_TYPE_UNKNOWN (400), SCHEMA_INVALID (400), INVALID_TRANSITION
    (409), and with `live` the server rule codes (`server_rules.ServerRuleViolation`). Posting errors never
    raise: they are returned in `ledger_errors`.
    `recorded` (with `live`): events settld's API stored, judged as it judged them: its payload validators and
    domain rules, then its core's transition table (`check_event`: a type outside it is a revision, a
    JOB_CREATED restarts the job), without settlekit's own payload schema checks (`validate`), which are
    rules for new input.
    """
    if not events:
        raise ValidationError("nothing to append", code="SCHEMA_INVALID")
    state: JobState | None = deserialize_state(prev_state) if prev_state is not None else None
    # a batch that folds nothing into the rule history (heartbeats, say) reads the stored one without a copy
    rule_facts = server_rules.load_facts(
        prev_state, read_only=not any(server_rules.folds_into_facts(e) for e in events))
    ledger_entries: list[dict[str, Any]] = []
    allocations: list[dict[str, Any]] = []
    ledger_errors: list[dict[str, Any]] = []
    rules = JOB_POSTING_RULES
    allocate = partial(_allocate_entry, tenant_id, contract_doc, contract_resolver) if with_allocations else None
    for event in events:
        if live:
            check_api_payload(server_rules.with_implied_fields(event))
        if state is None:
            if live and not recorded and event.get("type") == "JOB_CREATED":
                check_genesis_payload(event)
            state = initial_state(event)
            server_rules.observe(rule_facts, event)
            continue
        if live:  # settld's API judges payload and domain rules before the transition
            server_rules.check_payload_present(event)
            if not recorded:
                validate_payload(event, state.snapshot, state.facts)
            elif event.get("type") == "MATCHED":
                check_matched_as_settld(event)
            server_rules.check(state, rule_facts, event)
            to_status = check_event(state, event) if recorded else check_transition(state, event)
        else:
            to_status = check_event(state, event)
        rule = rules.get(event["type"]) if type(event["type"]) is str else None
        entries = _post_event(rule, state, event, ledger_errors) if rule is not None else None
        state = _step(state, event, to_status)
        server_rules.observe(rule_facts, event)
        if entries:
            _record_entries(event, entries, state.snapshot, ledger_entries, allocations, allocate)
    assert state is not None
    return _append_result(state, rule_facts, ledger_entries, allocations, ledger_errors)
