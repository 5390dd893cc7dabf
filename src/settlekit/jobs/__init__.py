"""Pure job domain: states, transitions, event types, signer policy, validation and the incremental reducer."""

from settlekit.jobs.errors import DomainRuleViolation, InvalidJobTransition, PayloadInvalid
from settlekit.jobs.pipeline import JobAppendResult, process_job_events
from settlekit.jobs.reducer import (
    JobState,
    apply,
    check_event,
    clone_state,
    deserialize_state,
    initial_state,
    reduce,
    serialize_state,
    settlement_proof_ref_for,
    signer_key_ids,
    validate_and_apply,
)
from settlekit.jobs.stream_postings import posting_records, postings_for_stream
from settlekit.jobs.types import (
    JOB_EVENT_TYPES,
    JOB_STATES,
    KNOWN_EVENT_TYPES,
    OTHER_STREAM_EVENT_TYPES,
    SIGNER_POLICY,
    TERMINAL_STATES,
    TRANSITIONS,
    is_known_event_type,
    require_known_event_type,
    required_signer_kind,
    signer_policy,
)
from settlekit.jobs.validate import validate_payload

__all__ = [
    "JOB_EVENT_TYPES",
    "JOB_STATES",
    "KNOWN_EVENT_TYPES",
    "OTHER_STREAM_EVENT_TYPES",
    "SIGNER_POLICY",
    "TERMINAL_STATES",
    "TRANSITIONS",
    "DomainRuleViolation",
    "InvalidJobTransition",
    "JobAppendResult",
    "JobState",
    "PayloadInvalid",
    "apply",
    "check_event",
    "clone_state",
    "deserialize_state",
    "initial_state",
    "is_known_event_type",
    "posting_records",
    "postings_for_stream",
    "process_job_events",
    "reduce",
    "require_known_event_type",
    "required_signer_kind",
    "serialize_state",
    "settlement_proof_ref_for",
    "signer_key_ids",
    "signer_policy",
    "validate_and_apply",
    "validate_payload",
]
