"""Job artifacts (04-artifacts.md): pure, linear-time builders of the six settld-compatible v1 artifact types,
the trigger table and outbox derivation, offline verification. No database, no I/O: the repository is
`settlekit.store.artifacts`, the dispatcher consumer and its sinks are `settlekit.projections`."""

from settlekit.artifacts.build import (
    booking_wants_coverage,
    build_all,
    build_one,
    derive_outbox,
    derive_tasks,
    iter_artifacts,
    stream_identity,
    task_for,
    tasks_for_event,
)
from settlekit.artifacts.builders import (
    BuildTask,
    ContractResolver,
    artifact_id,
    build_artifact,
    compute_artifact_hash,
    policy_hash_from_booking,
    settlement_rollup,
)
from settlekit.artifacts.proof import effective_proof
from settlekit.artifacts.state import FoldState, fold
from settlekit.artifacts.types import (
    ARTIFACT_TYPES,
    CONSUMER_EVENT_TYPES,
    COVERAGE_CERTIFICATE,
    CREDIT_MEMO,
    INCIDENT_PACKET,
    PROOF_RECEIPT,
    SETTLEMENT_STATEMENT,
    TRIGGERS,
    WORK_CERTIFICATE,
    require_artifact_type,
)
from settlekit.artifacts.verify import verify_artifact_against_stream
from settlekit.jobs.zone_coverage import zone_coverage_facts

__all__ = [
    "ARTIFACT_TYPES",
    "CONSUMER_EVENT_TYPES",
    "COVERAGE_CERTIFICATE",
    "CREDIT_MEMO",
    "INCIDENT_PACKET",
    "PROOF_RECEIPT",
    "SETTLEMENT_STATEMENT",
    "TRIGGERS",
    "WORK_CERTIFICATE",
    "BuildTask",
    "ContractResolver",
    "FoldState",
    "artifact_id",
    "booking_wants_coverage",
    "build_all",
    "build_artifact",
    "build_one",
    "compute_artifact_hash",
    "derive_outbox",
    "derive_tasks",
    "effective_proof",
    "fold",
    "iter_artifacts",
    "policy_hash_from_booking",
    "require_artifact_type",
    "settlement_rollup",
    "stream_identity",
    "task_for",
    "tasks_for_event",
    "verify_artifact_against_stream",
    "zone_coverage_facts",
]
