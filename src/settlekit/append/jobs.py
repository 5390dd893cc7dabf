"""The job domain step of an append: a job append validates, reduces and posts the events, and the new state
and the ledger rows are stored in the same transaction as the events."""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from settlekit.append.appender import Appender
from settlekit.append.domain import DomainOutcome, ReadWouldBlock
from settlekit.errors import ValidationError
from settlekit.events.envelope import Event
from settlekit.jobs import (
    deserialize_state,
    process_job_events,
    require_known_event_type,
    required_signer_kind,
)
from settlekit.jobs.drafts import complete_booking_draft, complete_decision_draft, complete_forfeit_draft
from settlekit.jobs.reducer import JobState
from settlekit.jobs.server_rules import (
    STATE_KEY,
    Facts,
    facts_are_current,
    facts_from_events,
    latest_hold_id,
    load_facts,
    settlement_proof_ref,
)
from settlekit.store import ledger as ledger_rows
from settlekit.store.contracts import ContractResolver, contract_resolver
from settlekit.store.db import Database, Tx
from settlekit.store.streams import Streams

log = logging.getLogger("settlekit.ledger")

_STREAM_TYPE_BY_PREFIX = (
    ("ROBOT_", "robot"), ("MAINTENANCE_", "robot"), ("OPERATOR_REGISTERED", "operator"),
    ("OPERATOR_SHIFT_", "operator"), ("MONTH_", "month"), ("TENANT_POLICY_", "governance"),
    ("SERVER_SIGNER_KEY_", "governance"), ("INSURER_REIMBURSEMENT_", "finance"),
)


class JobStreamDomain:
    """StreamDomain for settlekit: job streams get the reducer and ledger; other streams get type and signer
    checks only. `contracts(tenant, hash)` resolves the operator contract a job pins (party ids, split plans).

    `server_rules` (default True, what the API and workers use): apply the live API's append-time domain rules
    (`settlekit.jobs.server_rules`) and the payload validation of the live path. False replays streams settld's
    *core* accepted (the transition table only, as its core), e.g. the golden scenario vectors; never use it for
    new input. `stream_events(tenant, stream)`: the stream's events, read to rebuild a stored rule history of an
    older format (`current_snapshot`)."""

    def __init__(self, contracts: ContractResolver | None = None, *, server_rules: bool = True,
                 stream_events: Callable[[str, str], list[Event]] | None = None):
        self.contracts = contracts
        self.server_rules = server_rules
        self.stream_events = stream_events  # (tenant, stream) -> its events: to rebuild an outdated rule history

    def current_snapshot(self, tenant_id: str, stream_id: str, snapshot: dict[str, Any], seq: int,
                         may_block: bool = True) -> dict[str, Any]:
        """A job state whose rule history has another format (or none) gets it rebuilt from the stream's first
        `seq` events, so that a job stored by an earlier version is judged on its whole history."""
        if (not self.server_rules or self.stream_events is None or "snapshot" not in snapshot
                or facts_are_current(snapshot)):
            return snapshot
        if not may_block:
            raise ReadWouldBlock()
        events = self.stream_events(tenant_id, stream_id)
        return {**snapshot, STATE_KEY: facts_from_events(events[:seq])}

    def stream_type(self, first_event_type: str, stream_id: str) -> str:
        require_known_event_type(first_event_type)
        if first_event_type == "JOB_CREATED":
            return "job"
        for prefix, kind in _STREAM_TYPE_BY_PREFIX:
            if first_event_type.startswith(prefix):
                return kind
        return "job"  # any other job-stream type as a first event is refused by the reducer

    def prepare_drafts(self, snapshot: dict[str, Any] | None, drafts: list[Event]) -> list[Event]:
        """Complete server drafts against the stream's state before them (`settlekit.jobs.drafts`): BOOKED gets its
        policy snapshot and hash; DECISION_RECORDED and SETTLEMENT_FORFEITED what settld's route fills in; SETTLED,
        under proof gating, the settlementProofRef settld's route gives (the fresh proof, after a forfeiture with
        it), in place of any the client sent; without gating (or without such a proof) a SETTLED draft is left as
        it is."""
        if snapshot is None:
            return drafts
        is_job = "snapshot" in snapshot
        read: list[tuple[JobState, Facts]] = []  # the stored state, read once when a draft needs it

        def job() -> tuple[JobState, Facts]:
            if not read:
                read.append((deserialize_state(snapshot), load_facts(snapshot)))
            return read[0]

        out = []
        for draft in drafts:
            payload = draft.get("payload")
            t = draft["type"]
            if t == "BOOKED" and isinstance(payload, dict):
                draft = {**draft, "payload": complete_booking_draft(payload)}
            elif is_job and t == "DECISION_RECORDED":
                state, facts = job()
                draft = {**draft, "payload": complete_decision_draft(draft, state.snapshot, latest_hold_id(facts))}
            elif is_job and t == "SETTLEMENT_FORFEITED":
                draft = {**draft, "payload": complete_forfeit_draft(draft, *job())}
            elif is_job and t == "SETTLED":
                ref = settlement_proof_ref(*job())
                if ref is not None:  # written over any the client sent, as settld's route does
                    base = payload if isinstance(payload, dict) else {}
                    draft = {**draft, "payload": {**base, "settlementProofRef": ref}}
            out.append(draft)
        return out

    def required_signer(self, event_type: str, actor_type: str) -> str | None:
        require_known_event_type(event_type)
        return required_signer_kind(event_type, actor_type)

    def process(self, tenant_id: str, stream_id: str, snapshot: dict[str, Any] | None,
                events: list[Event], first_seq: int, may_block: bool = True,
                *, recorded: bool = False) -> DomainOutcome:
        """`recorded`: settld's history, judged as its API judged it: a type outside the transition table is
        stored and counts as a revision, a JOB_CREATED after the first event restarts the job (settld's
        reducer), and only settld's own payload validators and domain rules apply (`process_job_events`)."""
        if not recorded or snapshot is None:
            for event in events if not recorded else events[:1]:
                require_known_event_type(event["type"])
        is_job = (snapshot is not None and "snapshot" in snapshot) or (snapshot is None
                                                                       and events[0]["type"] == "JOB_CREATED")
        if not is_job:
            if any(e["type"] == "JOB_CREATED" for e in events[1:]) or (
                    snapshot is None and self.stream_type(events[0]["type"], stream_id) == "job"):
                # A job-stream event with no JOB_CREATED before it: let the reducer refuse it.
                process_job_events(snapshot, events, tenant_id=tenant_id)
            return DomainOutcome()
        resolver = None
        if self.contracts is not None:
            contracts = self.contracts

            def resolver(digest: str) -> Mapping[str, Any] | None:
                if may_block:
                    return contracts(tenant_id, digest)
                cached = contracts.cached(tenant_id, digest)
                if cached is None:
                    raise ReadWouldBlock()
                return cached

        # The live path: payload validation, transitions and the API's append-time rules refuse (nothing is
        # written); a posting error does not refuse the event, it is stored without an entry and recorded.
        # Recorded history stops at a posting error instead: settld's API refused that event, so it is in none of
        # its exports, and nothing after it is either.
        result = process_job_events(snapshot, events, tenant_id=tenant_id, contract_resolver=resolver,
                                    live=self.server_rules, recorded=recorded)
        if recorded and result.ledger_errors:
            raise _posting_rejected(events, result.ledger_errors[0])
        if not result.ledger_entries and not result.ledger_errors:
            return DomainOutcome(snapshot=result.state)
        seq_by_event_id = {e["id"]: first_seq + i for i, e in enumerate(events)}
        for item in result.ledger_errors:
            log.warning("posting error recorded", extra={
                "tenantId": tenant_id, "jobId": stream_id, "eventId": item["eventId"],
                "eventType": item["eventType"], "code": item["error"]["code"], "error": item["error"]["message"],
            })

        def write(tx: Tx, positions: Sequence[int]) -> None:
            position_by_event_id = {e["id"]: position for e, position in zip(events, positions, strict=True)}
            ledger_rows.write_entries(tx, tenant_id, stream_id, result.ledger_entries, result.allocations,
                                      seq_by_event_id, position_by_event_id)
            ledger_rows.write_errors(tx, tenant_id, stream_id, result.ledger_errors, seq_by_event_id)

        return DomainOutcome(snapshot=result.state, write=write)


def _posting_rejected(events: Sequence[Event], error: Mapping[str, Any]) -> ValidationError:
    """The refusal of the recorded event whose posting failed, as settld's API refused it ("ledger posting
    rejected"); `index` is its place in the batch."""
    index = next(i for i, e in enumerate(events) if e["id"] == error["eventId"])
    reason, message = error["error"]["code"], error["error"]["message"]
    return ValidationError(f"event {index}: ledger posting rejected ({reason}): {message}",
                           code="LEDGER_POSTING_REJECTED", index=index, reason=reason)


def job_appender(db: Database, *, server_rules: bool = True, **options: Any) -> Appender:
    """An Appender wired with the job domain and the tenant's contract documents (what the API, workers and
    demo use).

    The live append path, e.g. for importing an exported settld stream event by event:
    `appender.signer_keys.register(tenant, publicKeyPem, role)` for each signer (role = purpose: server, robot
    or operator), then `appender.append(tenant, job_id, [envelope], policy=HISTORY)` per client-finalized
    envelope (recorded history: see `AppendPolicy`; without a policy, the rules for new input apply). An append
    either stores the event (with its journal entries, or with its posting error recorded in `ledger_errors`, see
    `settlekit.store.ledger.errors_for_job`) or raises a SettlekitError with a stable `code` (schema 400,
    INVALID_TRANSITION 409, signer policy, or a `server_rules.ServerRuleViolation` 409 carrying settld's message)
    and writes nothing. `server_rules=False`: see JobStreamDomain."""
    domain = JobStreamDomain(contract_resolver(db), server_rules=server_rules, stream_events=Streams(db).read_stream)
    return Appender(db, domain=domain, **options)
