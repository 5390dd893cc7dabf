"""The shapes the API answers with, as pydantic models: a handler returns one (api.responses.TypedRoute renders
it), a write's action returns one (api.idempotency stores what it renders), and the OpenAPI document is generated
from them. A model's members are the answer's, in its key order: `X | None` where the answer can hold null, `int`
where it holds an integer, and `extra="forbid"` (no other member) unless the document is open by nature (a job
snapshot, a payload, an artifact).

Stored JSON (an event envelope, a job snapshot, an artifact or finance document) is carried `Verbatim`: not
validated again nor copied, answered exactly as it was read, and documented by the model it is stored as.
tests/api/test_api_conformance.py checks the routes' answers against the document."""

from __future__ import annotations

from typing import Annotated, Any, Generic, Literal, TypeVar

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    GetCoreSchemaHandler,
    GetJsonSchemaHandler,
    RootModel,
    TypeAdapter,
    with_config,
)
from pydantic.json_schema import JsonSchemaValue, SkipJsonSchema
from pydantic_core import CoreSchema, core_schema
from typing_extensions import TypedDict


class _Closed(BaseModel):
    model_config = ConfigDict(extra="forbid")


class _Open(BaseModel):
    model_config = ConfigDict(extra="allow")


def _no_null_defaults(schema: dict[str, Any]) -> None:
    """Members that are absent rather than null: no `default: null` in the document."""
    for member in schema.get("properties", {}).values():
        if member.get("default", 0) is None:
            del member["default"]


class Verbatim:
    """`Annotated[T, Verbatim(Shown)]`: a member holding stored JSON of type T, answered exactly as it was read (not
    validated, not copied: what is stored is the truth, whatever version wrote it), documented as `Shown`."""

    def __init__(self, shown: Any) -> None:
        self.shown = shown

    def __get_pydantic_core_schema__(self, source: Any, handler: GetCoreSchemaHandler) -> CoreSchema:
        return core_schema.any_schema()

    def __get_pydantic_json_schema__(self, schema: CoreSchema, handler: GetJsonSchemaHandler) -> JsonSchemaValue:
        return handler(TypeAdapter(self.shown).core_schema)


JobState = Annotated[dict[str, Any], Verbatim(dict[str, Any])]
"""A job's snapshot as the reducer folds it (status, booking, quote, …): an open object, as stored."""

JOB_DESCRIPTION = "The job's snapshot as the reducer folds it (status, booking, quote, …); null before any state."


# ------------------------------------------------------------------------------------------------- health


class Health(_Closed):
    status: Literal["ok"]
    pid: int = Field(description="the answering API process (`serve --workers N` runs several on one port)")


class Ready(_Closed):
    status: Literal["ready"]


# --------------------------------------------------------------------------------------------------- jobs


class Actor(_Closed):
    type: str
    id: str


class Event(_Closed):
    """A settld v1 event envelope as stored (signature and signerKeyId are null for an unsigned event)."""

    v: int
    id: str
    at: str
    streamId: str
    type: str
    actor: Actor
    payload: dict[str, Any]
    payloadHash: str
    prevChainHash: str | None
    chainHash: str
    signature: str | None
    signerKeyId: str | None


StoredEvents = Annotated[list[dict[str, Any]], Verbatim(list[Event])]
"""Event envelopes exactly as stored."""


@with_config(ConfigDict(extra="forbid"))
class Appended(TypedDict):
    """An append's answer: 201 when events were added, 200 when the same events were already there
    (`alreadyExists`); an Idempotency-Key replay returns the first answer with `Idempotent-Replayed: true`."""

    jobId: str
    events: StoredEvents
    firstSeq: int
    positions: Annotated[list[str], Field(description="each event's position as an opaque cursor of the tenant "
                                                      "(`after` of the event feed, `position` of the ledger "
                                                      "balances)")]
    headChainHash: str
    job: Annotated[JobState | None, Field(description=JOB_DESCRIPTION)]
    alreadyExists: bool


class JobSummary(_Closed):
    jobId: str
    status: str | None
    version: int
    headChainHash: str
    updatedAt: str
    job: JobState | None = Field(description=JOB_DESCRIPTION)


class JobList(_Closed):
    jobs: list[JobSummary]
    nextCursor: str | None = Field(description="Pass as `cursor` for the next page; null on the last one.")


class JobView(_Closed):
    jobId: str
    version: int
    headChainHash: str
    job: JobState | None = Field(description=JOB_DESCRIPTION)


class JobEvents(_Closed):
    jobId: str
    events: StoredEvents


class EventExport(RootModel[StoredEvents]):
    """The stream as a JSON array of envelopes (the offline verifier's input), as an attachment."""


# ----------------------------------------------------------------------------------------------- artifacts


class ArtifactSummary(_Closed):
    artifactId: str
    artifactType: str
    artifactHash: str
    jobId: str
    jobVersion: int
    sourceEventId: str
    sourceChainHash: str
    generatedAt: str


class ArtifactList(_Closed):
    jobId: str
    artifacts: list[ArtifactSummary]
    nextCursor: str | None = Field(description="Pass as `cursor` for the next page; null on the last one.")


class ArtifactMembers(_Open):
    """An artifact document (WorkCertificate.v1, SettlementStatement.v1, …) exactly as stored; the members
    below are common to every type, the others depend on `artifactType`."""

    model_config = ConfigDict(extra="allow", title="Artifact")
    artifactType: str
    artifactId: str
    artifactHash: str
    tenantId: str
    jobId: str
    sourceEventId: str
    atChainHash: str
    generatedAt: str


class Artifact(RootModel[Annotated[dict[str, Any], Verbatim(ArtifactMembers)]]):
    """An artifact document as stored (its members in their stored order), documented as ArtifactMembers."""


# -------------------------------------------------------------------------------------------------- ledger


class Balances(_Closed):
    tenantId: str
    balances: dict[str, int] = Field(description="Balance in cents per account id.")
    totalCents: int


class LedgerEntry(_Closed):
    eventId: str
    eventType: str
    entry: dict[str, Any] = Field(description="The journal entry: id, memo, postings (accountId, amountCents).")


class LedgerEntries(_Closed):
    jobId: str
    entries: list[LedgerEntry]


class Allocation(_Closed):
    tenantId: str
    entryId: str
    postingId: str
    accountId: str
    partyId: str
    partyRole: str
    currency: str
    amountCents: int


class Allocations(_Closed):
    jobId: str
    allocations: list[Allocation]


# ---------------------------------------------------------------------------------------------- destinations


class Circuit(_Closed):
    """The destination's circuit breaker: after `delivery_circuit_threshold` attempts in a row without an answer
    (timeouts, network errors) it opens and the deliveries wait until `openUntil`; then it is half-open and one
    request at a time probes; an answer closes it, another failure opens it for twice as long."""

    state: Literal["closed", "open", "half_open"]
    consecutiveTimeouts: int = Field(description="attempts in a row without an answer")
    opens: int = Field(description="times in a row the circuit opened (the probe interval doubles with each)")
    openUntil: str | None = Field(description="until when it is (or was) open; null when closed")


class Destination(_Closed):
    """A webhook destination; secret values are never returned, only the id of a stored secret."""

    destinationId: str
    kind: Literal["webhook"]
    url: str
    signing: Literal["standard", "settld_legacy", "both"]
    artifactTypes: list[str] | None
    ordering: Literal["best_effort", "strict_scope"]
    allowPrivateNetwork: bool
    status: Literal["active", "disabled"]
    disabledReason: str | None
    secretRef: str | None
    previousSecretRef: str | None = Field(description="The rotated-out secret still signing, during its grace.")
    previousSecretExpiresAt: str | None
    circuit: Circuit


class Destinations(_Closed):
    destinations: list[Destination]


class Backfill(_Closed):
    since: str | None = Field(description="When the destination was disabled (null if it was active).")
    missing: int
    created: int
    requeued: int


class EnabledDestination(Destination):
    backfill: Backfill


class DestinationRequeued(_Closed):
    destinationId: str
    requeued: int


# ------------------------------------------------------------------------------------------------ deliveries


class Delivery(_Closed):
    """A delivery row (member names as stored; timestamps ISO-8601 UTC with milliseconds)."""

    id: str = Field(description="the delivery's id: an opaque token of the tenant (also the legacy "
                                "`x-proxy-delivery-id` header)", pattern=r"^[A-Za-z0-9_-]{1,200}$")
    tenant_id: str
    destination_id: str
    artifact_type: str
    artifact_id: str
    artifact_hash: str
    dedupe_key: str
    message_id: str
    scope_key: str
    order_seq: int
    priority: int
    order_key: str
    state: Literal["pending", "delivered", "failed"]
    attempts: int
    next_attempt_at: str | None
    leased: bool = Field(description="a worker holds the delivery (sending it) until `lease_expires_at`")
    lease_expires_at: str | None
    last_status: int | None
    last_error: str | None
    delivered_at: str | None
    created_at: str | None
    updated_at: str | None
    claims: int


class Deliveries(_Closed):
    deliveries: list[Delivery]
    nextAfterId: str | None = Field(description="Pass as `afterId` for the next page; null on the last one.")


class Attempt(_Closed):
    attempt: int
    httpStatus: int | None
    error: str | None


class DeliveryDetail(Delivery):
    attemptLog: list[Attempt]


class DeliveriesBackfilled(_Closed):
    destinationId: str | None
    since: str
    missing: int
    created: int
    requeued: int


class DeliveryRequeued(_Closed):
    deliveryId: str
    requeued: int


# ----------------------------------------------------------------------------------------------- signer keys


class SignerKey(_Closed):
    keyId: str
    purpose: Literal["robot", "operator", "server"]
    status: Literal["active", "rotated", "revoked"]
    entityId: str | None
    publicKeyPem: str


class SignerKeys(_Closed):
    keys: list[SignerKey]


class Rotated(_Closed):
    rotated: SignerKey
    successor: SignerKey | None


# ------------------------------------------------------------------------------------------------- contracts


class ContractRegistered(_Closed):
    tenantId: str
    contractHash: str = Field(description="settld's hash of the document: the operatorContractHash jobs pin")
    policyHash: str = Field(description="the hash of the document's ContractPolicyTemplate.v1")
    compilerId: str
    splitPlanHash: str | None = Field(description="the enabled split plan's hash (null without one)")


class ContractDocument(_Closed):
    tenantId: str
    contractHash: str
    document: dict[str, Any] = Field(description="the ContractDocument.v1 as registered")


# ------------------------------------------------------------------------------------------------- consumers


class Gap(_Closed):
    """Positions below the cursor that were invisible when observed (`xmax`: the snapshot's xmax, as text)."""

    model_config = ConfigDict(extra="forbid", populate_by_name=True, json_schema_extra=_no_null_defaults)
    from_: int = Field(alias="from")
    to: int
    xmax: str
    at: float | SkipJsonSchema[None] = Field(default=None, exclude_if=lambda at: at is None,
                                             description="Unix seconds it was first seen; absent when unknown.")


StoredStatus = TypeVar("StoredStatus", bound=str)
Status = TypeVar("Status", bound=str)


class _Consumer(_Closed, Generic[Status, StoredStatus]):
    name: str
    instanceId: str
    status: Status = Field(description="`processing` while in a turn, else the stored status.")
    storedStatus: StoredStatus
    processing: bool
    lastProcessedPosition: int
    attempts: int
    rearmCount: int
    pendingGaps: list[Gap]
    lastError: str | None
    skippedCount: int
    updatedAt: str


class ConsumerState(_Consumer[Literal["idle", "dead", "disabled", "processing"], Literal["idle", "dead", "disabled"]]):
    pass


class ConsumerProgress(_Consumer[Literal["idle", "dead", "disabled", "processing", "never-run"],
                                 Literal["idle", "dead", "disabled", "never-run"]]):
    """A consumer's state with its progress; a consumer this process runs that has no state yet is `never-run`."""

    highWaterMark: int
    lag: int
    lagSeconds: float
    pendingGapPositions: int
    registered: bool | None = Field(description="Whether this process runs the consumer; null when unknown.")


class Consumers(_Closed):
    consumers: list[ConsumerProgress]


class Skipped(_Closed):
    consumer: ConsumerState
    skippedPosition: int | None


class DeadLetter(_Closed):
    id: int
    position: int
    eventId: str | None
    eventType: str | None
    reason: Literal["skip_apply_error", "skip_permanent_error", "operator_skip"]
    errorClass: str | None
    errorMessage: str | None
    createdAt: str


class DeadLetters(_Closed):
    consumer: str
    instanceId: str
    deadLetters: list[DeadLetter]


# -------------------------------------------------------------------------------------------------- problems


class Problem(_Open):
    """An RFC 9457 problem: `code` is stable and listed per status in each operation (all codes: docs/errors.md);
    `details` holds the code's structured members (field, jobId, retryAfterSeconds, errors, …)."""

    model_config = ConfigDict(extra="allow", json_schema_extra=_no_null_defaults)

    type: str = Field(description="https://settlekit.dev/problems/<code in kebab case>")
    title: str
    status: int
    detail: str
    code: str
    requestId: str | SkipJsonSchema[None] = Field(default=None,
                                                  description="The request's id (its X-Request-Id answer header).")
    details: dict[str, Any] | SkipJsonSchema[None] = None
