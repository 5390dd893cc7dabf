"""Every failure settlekit raises on purpose: a stable code, an HTTP status and structured details."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final, NamedTuple


class SettlekitError(Exception):
    """Base error. `code` is stable and machine-readable; `status` is the HTTP status the API maps it to."""

    code: str = "INTERNAL"
    status: int = 500

    def __init__(self, message: str, *, code: str | None = None, status: int | None = None, **details: Any):
        super().__init__(message)
        self.message = message
        if code is not None:
            self.code = code
        if status is not None:
            self.status = status
        self.details: dict[str, Any] = details

    def to_problem(self) -> dict[str, Any]:
        """RFC 9457 problem body."""
        body: dict[str, Any] = {
            "type": f"https://settlekit.dev/problems/{self.code.lower().replace('_', '-')}",
            "title": self.code,
            "status": self.status,
            "detail": self.message,
            "code": self.code,
        }
        if self.details:
            body["details"] = self.details
        return body

    def __str__(self) -> str:
        return f"{self.code}: {self.message}"


class ValidationError(SettlekitError):
    code = "SCHEMA_INVALID"
    status = 400


class CanonicalJsonError(ValidationError):
    code = "SCHEMA_INVALID"


class ConflictError(SettlekitError):
    code = "CONFLICT"
    status = 409


class NotFoundError(SettlekitError):
    code = "NOT_FOUND"
    status = 404


class VerificationError(SettlekitError):
    """A stream or event failed verification; `index` names the first bad event."""

    code = "VERIFICATION_FAILED"
    status = 400

    def __init__(self, message: str, *, code: str, index: int | None = None, **details: Any):
        super().__init__(message, code=code, index=index, **details)
        self.index = index


class SignerPolicyError(SettlekitError):
    code = "SIGNER_POLICY_VIOLATION"
    status = 400


class ConfigurationError(SettlekitError):
    code = "CONFIGURATION_INVALID"
    status = 500


class DatabaseUnavailableError(SettlekitError):
    """The database cannot be reached right now (connection refused or lost, pool wait exhausted, SQLite file
    locked or unopenable). Retry after `retryAfterSeconds`; a write that failed this way may or may not have
    committed, so retry it with the same Idempotency-Key (or the same client-finalized event)."""

    code = "DATABASE_UNAVAILABLE"
    status = 503

    def __init__(self, message: str = "the database is not reachable", *, retry_after: int = 1, **details: Any):
        super().__init__(message, retryAfterSeconds=retry_after, **details)


class OverloadedError(SettlekitError):
    """As much work already waits for the database as this process accepts: the request was refused before
    anything was done (nothing written). Retry after `retryAfterSeconds`."""

    code = "OVERLOADED"
    status = 503

    def __init__(self, message: str, *, retry_after: int = 1, **details: Any):
        super().__init__(message, retryAfterSeconds=retry_after, **details)


class ErrorSpec(NamedTuple):
    """A catalogued code: the HTTP status the API answers it with, what it means, and any other status the same
    code carries where it is raised outside the API's usual path (`other_statuses`)."""

    status: int
    meaning: str
    other_statuses: tuple[int, ...] = ()


# Every code settlekit raises or returns, once. `tests/test_error_catalogue.py` reads the source and fails on a
# code used but not listed here, or listed but never used; `docs/errors.md` is generated from this table.
# Framework errors without a name below answer `HTTP_<status>` (e.g. HTTP_400 from Starlette).
CATALOGUE: Final[Mapping[str, ErrorSpec]] = {
    # --- generic (the base classes above) and the HTTP layer
    "INTERNAL": ErrorSpec(500, "an unexpected error; the response carries the request id"),
    "SCHEMA_INVALID": ErrorSpec(400, "the input does not have the required shape (field, type, length, format)"),
    "INPUT_INVALID": ErrorSpec(400, "a request string holds U+0000 or a lone surrogate"),
    "JSON_INVALID": ErrorSpec(400, "the request body is not valid JSON"),
    "FILE_TOO_LARGE": ErrorSpec(413, "a file given to the CLI is over its size limit (`import_max_bytes`)"),
    "CONFLICT": ErrorSpec(409, "the request conflicts with the current state"),
    "NOT_FOUND": ErrorSpec(404, "no such resource, or no route for the method and path"),
    "METHOD_NOT_ALLOWED": ErrorSpec(405, "the route exists but not for this HTTP method"),
    "UNSUPPORTED_MEDIA_TYPE": ErrorSpec(415, "the request body has a content type the route does not take"),
    "PAYLOAD_TOO_LARGE": ErrorSpec(413, "the request body or an event payload is over its size limit"),
    "REQUEST_HEAD_TOO_LARGE": ErrorSpec(431, "the request line and headers are over the limit (`max_header_bytes`); "
                                             "the connection is closed"),
    "PRECONDITION_REQUIRED": ErrorSpec(428, "a server-draft append needs the expected previous chain hash or version"),
    "VERIFICATION_FAILED": ErrorSpec(400, "a stream or event failed verification"),
    "CONFIGURATION_INVALID": ErrorSpec(500, "the deployment's configuration is not usable"),
    "DATABASE_UNAVAILABLE": ErrorSpec(503, "the database cannot be reached now; retry after retryAfterSeconds"),
    "OVERLOADED": ErrorSpec(503, "as much work already waits for the database as the process accepts; nothing "
                                 "was done, retry after retryAfterSeconds"),
    "MIGRATIONS_PENDING": ErrorSpec(503, "the database schema is behind the code: run `settlekit migrate`"),
    # --- authentication and authorization
    "UNAUTHENTICATED": ErrorSpec(401, "no API key was given"),
    "API_KEY_INVALID": ErrorSpec(401, "the API key is unknown, malformed or revoked"),
    "API_KEY_NOT_FOUND": ErrorSpec(404, "no API key with this id"),
    "FORBIDDEN": ErrorSpec(403, "the caller may not do this"),
    "SCOPE_REQUIRED": ErrorSpec(403, "the API key lacks the scope the route needs"),
    "OPERATOR_TENANT_REQUIRED": ErrorSpec(403, "a deployment-wide operation needs a key of the operator tenant"),
    "RATE_LIMITED": ErrorSpec(429, "too many requests (or failed authentications); retry after Retry-After"),
    # --- jobs and appends
    "JOB_NOT_FOUND": ErrorSpec(404, "no job with this id for the tenant"),
    "JOB_ALREADY_EXISTS": ErrorSpec(409, "a job with this id already exists"),
    "JOB_TENANT_MISMATCH": ErrorSpec(403, "a JOB_CREATED payload names a tenant other than the API key's (or than "
                                          "`import --tenant`, without `--retenant`)"),
    "CURSOR_INVALID": ErrorSpec(400, "the cursor or id token is malformed, altered, or belongs to another listing "
                                     "or tenant"),
    "CURSOR_NUMERIC": ErrorSpec(400, "a number where the API takes an opaque token it returned (event positions, "
                                     "delivery ids): numeric cursors and ids are no longer accepted"),
    "IDEMPOTENCY_CONFLICT": ErrorSpec(409, "the Idempotency-Key was used with a different request"),
    "IDEMPOTENCY_KEY_REUSED": ErrorSpec(409, "the append's idempotency key was used with a different append"),
    "IDEMPOTENCY_IN_PROGRESS": ErrorSpec(409, "a request with this Idempotency-Key is still running"),
    "EVENT_ID_CONFLICT": ErrorSpec(409, "an event with this id already exists with different content"),
    "PREV_CHAIN_HASH_MISMATCH": ErrorSpec(409, "the stream head is not the expected previous chain hash"),
    "VERSION_CONFLICT": ErrorSpec(409, "the stream is not at the expected version"),
    "FUTURE_TIMESTAMP": ErrorSpec(400, "an event's `at` is more than five minutes in the future"),
    "EVENT_TYPE_UNKNOWN": ErrorSpec(400, "the event type is not one settlekit knows"),
    "EVENT_TYPE_NOT_ALLOWED": ErrorSpec(400, "the event type does not belong on this kind of stream"),
    "STREAM_MISMATCH": ErrorSpec(400, "the event names another stream than the one appended to"),
    "INVALID_TRANSITION": ErrorSpec(409, "the event is not allowed in the job's current status"),
    "JOB_STATE_INVALID": ErrorSpec(400, "a stored job state has an unknown format"),
    "LEDGER_POSTING_INVALID": ErrorSpec(409, "the ledger posting rules refused the event; details.code says why"),
    "LEDGER_POSTING_REJECTED": ErrorSpec(400, "`settlekit import`: a recorded event's ledger posting fails, so "
                                              "settld's API refused it (details.reason says why); the live path "
                                              "records such an error instead"),
    "ZONE_SET_INVALID": ErrorSpec(400, "a booking's requiredZones is malformed"),
    # --- envelopes, chains and signer keys
    "ENVELOPE_VERSION_UNSUPPORTED": ErrorSpec(400, "the envelope version `v` is not 1"),
    "CHAIN_BREAK": ErrorSpec(400, "prevChainHash does not link to the previous event"),
    "PAYLOAD_HASH_MISMATCH": ErrorSpec(400, "payloadHash does not match the event content"),
    "CHAIN_HASH_MISMATCH": ErrorSpec(400, "chainHash does not match prevChainHash and payloadHash"),
    "SIG_INVALID": ErrorSpec(400, "the event signature does not verify"),
    "SIGNER_KEY_ID_REQUIRED": ErrorSpec(400, "the event is signed but names no signerKeyId"),
    "SIGNER_UNKNOWN": ErrorSpec(400, "the event's signerKeyId is not a known key (append, import and `verify`)"),
    "SIGNER_KEY_NOT_ACTIVE": ErrorSpec(400, "the signer key is registered but not active"),
    "SIGNER_KEY_PURPOSE_MISMATCH": ErrorSpec(400, "the signer key's purpose does not fit the event's signer"),
    "SIGNER_POLICY_VIOLATION": ErrorSpec(400, "the event is not signed the way its type requires, or carries an "
                                              "actor its type excludes"),
    "SIGNER_KEY_INVALID": ErrorSpec(400, "a key is not a valid Ed25519 PEM"),
    "SIGNER_KEY_CONFLICT": ErrorSpec(409, "the key id is already registered with another key or purpose"),
    "SIGNER_KEY_NOT_FOUND": ErrorSpec(404, "no signer key with this id is registered"),
    "SIGNER_KEY_STATUS_CONFLICT": ErrorSpec(409, "the signer key's status does not allow this change (a revoked "
                                                 "key is never rotated)"),
    "SIGNER_KEY_ID_MISMATCH": ErrorSpec(400, "a keys file names a keyId that is not the id of its key"),
    "SIGNER_ROLE_UNKNOWN": ErrorSpec(400, "a keys file names a role other than server, robot or operator"),
    "KEYS_INVALID": ErrorSpec(400, "a keys file is malformed"),
    "STREAM_INVALID": ErrorSpec(400, "a stream file is not a JSON array of event objects"),
    "COLLATION_UNAVAILABLE": ErrorSpec(500, "the ICU collation settld's outputs depend on is not installed"),
    # --- the reference API's domain rules at append (jobs/server_rules.py), all 409
    "JOB_ID_MISMATCH": ErrorSpec(409, "payload.jobId is not the job's id"),
    "EVENT_TIME_MISMATCH": ErrorSpec(409, "a payload timestamp does not match event.at"),
    "JOB_TERMINAL": ErrorSpec(409, "the job is terminal"),
    "STATUS_NOT_ALLOWED": ErrorSpec(409, "the job's status does not allow this event now"),
    "POLICY_HASH_MISMATCH": ErrorSpec(409, "a policy hash does not match the booking's or the pinned one"),
    "ACCESS_PLAN_REQUIRED": ErrorSpec(409, "access needs an access plan first"),
    "ACCESS_PLAN_MISMATCH": ErrorSpec(409, "payload.accessPlanId is not the current access plan"),
    "ACCESS_WINDOW": ErrorSpec(409, "the access event is outside the access plan's window"),
    "ACCESS_REVOKED": ErrorSpec(409, "access is revoked or expired"),
    "ACCESS_NOT_REVOCABLE": ErrorSpec(409, "the access plan is not revocable"),
    "ACCESS_NOT_GRANTED": ErrorSpec(409, "execution cannot start without access granted"),
    "ZONE_NOT_REQUIRED": ErrorSpec(409, "payload.zoneId is not in requiredZones"),
    "ZONE_MISMATCH": ErrorSpec(409, "payload.zoneId is not the job's zone"),
    "LIVENESS_POLICY_MISMATCH": ErrorSpec(409, "payload.policy is not the liveness policy of the job's tier"),
    "HEARTBEAT_MISMATCH": ErrorSpec(409, "payload.lastHeartbeatAt is not the job's last heartbeat"),
    "STALL_NOT_DUE": ErrorSpec(409, "the last heartbeat is not past the stall threshold"),
    "RESUME_NOT_ALLOWED": ErrorSpec(409, "a server resume needs a heartbeat after the stall"),
    "ZONE_SET_MISMATCH": ErrorSpec(409, "payload.requiredZonesHash is not the booking's required zone set hash"),
    "PROOF_ALREADY_EXISTS_FOR_FACTS": ErrorSpec(409, "a proof for the same facts was already recorded"),
    "PROOF_GATE_DISABLED": ErrorSpec(409, "settlement holds need strict or holdback proof gating"),
    "PROOF_REQUIRED": ErrorSpec(409, "a proof (or completion anchor) is required first"),
    "PROOF_INSUFFICIENT": ErrorSpec(409, "the proof verdict is INSUFFICIENT_EVIDENCE"),
    "PROOF_STALE": ErrorSpec(409, "the proof does not cover the current facts"),
    "ANCHOR_MISMATCH": ErrorSpec(409, "payload.evaluatedAtChainHash is not the latest completion anchor"),
    "SETTLEMENT_HOLD_NOT_ACTIVE": ErrorSpec(409, "the settlement hold is not active"),
    "SETTLEMENT_HOLD_ALREADY_ACTIVE": ErrorSpec(409, "the settlement hold is already active on the same facts"),
    "PROOF_STATUS_MISMATCH": ErrorSpec(409, "the fresh proof's verdict does not allow this hold step (a hold or "
                                            "forfeiture needs INSUFFICIENT_EVIDENCE, a release PASS or FAIL)"),
    "FACTS_HASH_MISMATCH": ErrorSpec(409, "payload.factsHash is not the current proof facts hash or the held one"),
    "PROOF_REF_MISMATCH": ErrorSpec(409, "a hold's or release's proof reference, or a hold's missingEvidence or "
                                         "reasonCodes, do not match the fresh PROOF_EVALUATED"),
    "PRICING_ANCHOR_MISMATCH": ErrorSpec(409, "payload.pricingAnchor does not name the completion anchor, the policy "
                                              "hashes at it, or a QUOTE_PROPOSED"),
    "HOLD_ID_MISMATCH": ErrorSpec(409, "payload.holdId is not the hold identity of the anchor and customer policy"),
    "HOLD_EXPOSURE_INVALID": ErrorSpec(409, "payload.exposure.expected has amounts that are not safe integers or a "
                                            "gross amount other than the quote's"),
    "DECISION_REF_REQUIRED": ErrorSpec(409, "a forfeiture needs payload.decisionEventRef or payload.decisionRef"),
    "DECISION_REF_MISMATCH": ErrorSpec(409, "payload.decisionEventRef does not match a recorded SETTLEMENT_FORFEIT "
                                            "decision of this hold and reason"),
    "DECISION_ALREADY_RECORDED": ErrorSpec(409, "a decision with this decisionId was already recorded"),
    "PAYLOAD_REQUIRED": ErrorSpec(409, "the event needs a payload object"),
    "PAYLOAD_FIELD_INVALID": ErrorSpec(409, "a payload field the rule reads is missing or of the wrong kind"),
    "SETTLEMENT_PROOF_REF_REQUIRED": ErrorSpec(409, "settling under proof gating needs settlementProofRef"),
    "SETTLEMENT_MISSING": ErrorSpec(409, "the event needs a prior SETTLED event"),
    "SETTLED_EVENT_MISMATCH": ErrorSpec(409, "payload.settledEventId is not the last SETTLED event"),
    "ALREADY_RECORDED_FOR_SETTLEMENT": ErrorSpec(409, "this cost was already recorded for the settlement"),
    "JOB_NOT_SETTLED": ErrorSpec(409, "the event is only allowed after settlement"),
    "DISPUTE_ALREADY_OPEN": ErrorSpec(409, "a dispute is already open"),
    "DISPUTE_NOT_OPEN": ErrorSpec(409, "no dispute is open"),
    "RISK_ALREADY_SCORED": ErrorSpec(409, "risk was already scored for this source event"),
    "RISK_FEATURES_MISMATCH": ErrorSpec(409, "payload.features.templateId is not the job's template"),
    "QUOTE_MISSING": ErrorSpec(409, "the event needs a quote first"),
    "BOOKING_MISSING": ErrorSpec(409, "the event needs a booking first"),
    "SOURCE_EVENT_MISSING": ErrorSpec(409, "risk scoring needs a prior quote or booking event"),
    "SOURCE_EVENT_MISMATCH": ErrorSpec(409, "payload.sourceEventId is not the last quote or booking event"),
    "RESERVATION_MISSING": ErrorSpec(409, "the event needs a robot reservation first"),
    "RESERVATION_WINDOW": ErrorSpec(409, "the reservation window is outside the booked or reserved window"),
    "RESERVATION_MISMATCH": ErrorSpec(409, "the reservationId is not the current operator coverage reservation"),
    "ROBOT_MISMATCH": ErrorSpec(409, "the robot is not the matched or reserved robot"),
    "ACTOR_MISMATCH": ErrorSpec(409, "the payload's robot or operator is not the event's actor"),
    "OPERATOR_COVERAGE_MISSING": ErrorSpec(409, "dispatch needs the operator coverage reservation first"),
    "OPERATOR_COVERAGE_NOT_REQUIRED": ErrorSpec(409, "the job does not require operator coverage"),
    "SKILL_LICENSE_DUPLICATE": ErrorSpec(409, "the licenseId already exists on the job"),
    "SKILL_NOT_LICENSED": ErrorSpec(409, "the skill was used without a license"),
    "WINDOW_MISMATCH": ErrorSpec(409, "payload.oldWindow is not the current booking window"),
    "REQUOTE_UNSUPPORTED": ErrorSpec(409, "requiresRequote is not supported"),
    "INCIDENT_DUPLICATE": ErrorSpec(409, "the incidentId already exists on the job"),
    "INCIDENT_NOT_FOUND": ErrorSpec(409, "no incident with this incidentId on the job"),
    "REPORTED_BY_REQUIRED": ErrorSpec(409, "a server-side incident report needs payload.reportedBy"),
    "EVIDENCE_DUPLICATE": ErrorSpec(409, "the evidenceId already exists on the job"),
    "EVIDENCE_NOT_FOUND": ErrorSpec(409, "no evidence with this evidenceId on the job"),
    "EVIDENCE_REF_MISMATCH": ErrorSpec(409, "payload.evidenceRef is not the captured evidenceRef"),
    "EVIDENCE_ALREADY_EXPIRED": ErrorSpec(409, "the evidence has already expired"),
    "EVIDENCE_PRIVACY": ErrorSpec(409, "video evidence in privacyMode=minimal needs an incident of severity 4 or more"),
    "EXECUTION_NOT_STARTED": ErrorSpec(409, "the job never reached execution"),
    "CLAIM_NOT_FOUND": ErrorSpec(409, "no claim with this claimId on the job"),
    "CLAIM_DUPLICATE": ErrorSpec(409, "the claimId already exists on the job"),
    "CLAIM_TRANSITION_ILLEGAL": ErrorSpec(409, "the claim's state does not allow this step"),
    "CLAIM_APPROVAL_LIMIT": ErrorSpec(409, "the approval exceeds the policy maximum without an elevated actor"),
    "CLAIM_AMOUNTS_INVALID": ErrorSpec(409, "the claim's amounts do not add up or exceed the job amount"),
    "CLAIM_ALREADY_ADJUSTED": ErrorSpec(409, "the claim was already adjusted"),
    "CLAIM_NOT_ADJUSTED": ErrorSpec(409, "the claim must be adjusted before it is paid"),
    "SLA_POLICY_MISSING": ErrorSpec(409, "an SLA breach needs booking.sla"),
    "SLA_POLICY_MISMATCH": ErrorSpec(409, "payload.policy is not booking.sla"),
    "SLA_CREDITS_DISABLED": ErrorSpec(409, "SLA credits are disabled for the job"),
    "SLA_BREACH_REQUIRED": ErrorSpec(409, "an SLA credit needs a recorded SLA breach"),
    "SLA_CREDIT_MAX_EXCEEDED": ErrorSpec(409, "the SLA credit exceeds the configured maximum"),
    # --- contracts
    "CONTRACT_INVALID": ErrorSpec(400, "a ContractDocument.v1 or SplitPlan.v1 does not validate; details.path names"
                                  " the field, details.rule a split-plan rule settld does not have"),
    "CONTRACT_NOT_FOUND": ErrorSpec(404, "no contract document with this hash is registered for the tenant"),
    # --- finance close, the tenant log and exports
    "FINANCE_MONTH_INVALID": ErrorSpec(400, "a month is not YYYY-MM (or a proof's months are in the wrong order)"),
    "FINANCE_PERIOD_OPEN": ErrorSpec(409, "the month has not ended yet, so it cannot be closed"),
    "FINANCE_PERIOD_ORDER": ErrorSpec(409, "a later month of the tenant is already closed"),
    "FINANCE_CLOSE_NOT_FOUND": ErrorSpec(404, "the month is not closed for the tenant"),
    "FINANCE_CLOSE_MISMATCH": ErrorSpec(500, "a stored close differs from its rebuild from the ledger and the log"),
    "FINANCE_LEAF_NOT_FOUND": ErrorSpec(404, "the close of that month appended no leaf for the job"),
    "FINANCE_GL_MAPPING_INVALID": ErrorSpec(400, "a GlMapping.v1 document does not validate"),
    "FINANCE_GL_MAPPING_NOT_FOUND": ErrorSpec(404, "the tenant has no GL mapping"),
    "FINANCE_GL_ACCOUNT_UNMAPPED": ErrorSpec(400, "an account of the period has no glAccount in the tenant's mapping"),
    "FINANCE_DOCUMENT_INVALID": ErrorSpec(400, "`verify`: the document is not a MonthClose.v1"),
    "FINANCE_SIGNER_UNKNOWN": ErrorSpec(400, "`verify`: the close's signer key is not among the given keys"),
    "FINANCE_PROOF_INVALID": ErrorSpec(400, "`verify`: an inclusion or consistency proof does not verify"),
    # --- ledger reads and rebuild
    "LEDGER_AS_OF_INVALID": ErrorSpec(400, "asOf is not an ISO-8601 instant with an offset, or both asOf and position"),
    "LEDGER_ACCOUNT_NOT_FOUND": ErrorSpec(404, "the account is neither in the chart nor posted to by the tenant"),
    "LEDGER_REBUILD_STALE": ErrorSpec(409, "events were appended during a ledger rebuild; nothing was swapped"),
    "LEDGER_REBUILD_INCOMPLETE": ErrorSpec(409, "a job stream could not be replayed; the rebuild was not swapped in"),
    # --- artifacts
    "ARTIFACT_NOT_FOUND": ErrorSpec(404, "no such artifact (or no effective one of this type) for the job"),
    "ARTIFACT_TYPE_UNKNOWN": ErrorSpec(400, "the artifact type is not one of the v1 types"),
    "ARTIFACT_INVALID": ErrorSpec(400, "the artifact document is malformed"),
    "ARTIFACT_HASH_INVALID": ErrorSpec(400, "artifactHash does not match the artifact (422 from the receiver)",
                                       other_statuses=(422,)),
    "ARTIFACT_SLICE_EMPTY": ErrorSpec(400, "there are no events to build the artifact from", other_statuses=(404,)),
    "ARTIFACT_SOURCE_NOT_FOUND": ErrorSpec(404, "the stream holds no source event for the artifact",
                                           other_statuses=(400,)),
    "ARTIFACT_STATE_INVALID": ErrorSpec(500, "a stored artifact fold state is unreadable (400 offline)",
                                        other_statuses=(400,)),
    "ATCHAINHASH_NOT_FOUND": ErrorSpec(404, "the chain hash is not in the stream"),
    "ARTIFACT_CONFLICT": ErrorSpec(409, "the artifact conflicts with a stored one"),
    "ARTIFACT_HASH_MISMATCH": ErrorSpec(409, "the artifact id is stored with another hash"),
    "ARTIFACT_SOURCE_EVENT_CONFLICT": ErrorSpec(409, "another artifact is stored for the same source event and type"),
    "ARTIFACT_TYPE_CONFLICT": ErrorSpec(409, "the artifact id is stored with another type"),
    "ARTIFACT_ANCHOR_CONFLICT": ErrorSpec(409, "the artifact id is stored at another chain anchor"),
    "ARTIFACT_QUOTA_EXCEEDED": ErrorSpec(429, "the tenant's artifact quota is spent"),
    "ARTIFACT_CORRUPT": ErrorSpec(500, "a stored artifact no longer matches its hash"),
    "ARTIFACT_ROW_INVALID": ErrorSpec(500, "an artifact row the delivery sink read is unusable"),
    # --- webhook destinations, secrets and deliveries
    "DESTINATION_URL_FORBIDDEN": ErrorSpec(400, "the SSRF guard refused the destination URL or its addresses"),
    "DESTINATION_LIMIT_REACHED": ErrorSpec(409, "the tenant has as many destinations as the deployment allows "
                                                "(`max_destinations_per_tenant`); change one of them instead"),
    "TENANT_QUOTA_EXCEEDED": ErrorSpec(429, "the tenant's pending-delivery quota is spent"),
    "WEBHOOK_SECRET_INVALID": ErrorSpec(400, "a signing secret is not whsec_<base64> or is empty"),
    "SECRET_REF_INVALID": ErrorSpec(400, "the secret reference is malformed or not one this server issued"),
    "SECRET_REF_FORBIDDEN": ErrorSpec(400, "the API takes only ids of secrets the tenant stored (sec_…)"),
    "SECRET_NOT_FOUND": ErrorSpec(400, "the referenced secret does not exist or is empty"),
    "SECRET_PROVIDER_FORBIDDEN": ErrorSpec(400, "the secret provider (env:, inline:) is not enabled"),
    "SECRET_FILE_REFUSED": ErrorSpec(400, "file: secret references are no longer read; migrate them"),
    "DELIVERY_WINDOW_INVALID": ErrorSpec(400, "a replay or statistics window is empty, reversed or longer than "
                                              "allowed (statistics: 90 days; replays: `replay_max_window_hours`)"),
    "REPLAY_RUNNING": ErrorSpec(409, "a replay of the destination (or as many of the tenant's as allowed) is "
                                     "running; wait for it or cancel it"),
    "REPLAY_NOT_RUNNING": ErrorSpec(409, "the replay has ended (done or canceled), so it cannot be canceled"),
    "REPLAY_TOO_LARGE": ErrorSpec(422, "the window holds more deliveries than one replay may send "
                                       "(`replay_max_deliveries`); replay a shorter window"),
    "TEST_SEND_BUSY": ErrorSpec(429, "the tenant has as many test sends in flight as allowed; retry after "
                                     "Retry-After"),
    "DESTINATION_CHECKS_BUSY": ErrorSpec(429, "the tenant has as many destination saves in progress (each resolves "
                                              "a host name) as allowed; retry after Retry-After"),
    "DELIVERY_LEASE_TOO_SHORT": ErrorSpec(500, "the delivery lease is not longer than its renewal interval and margin"),
    # --- receiving webhooks (verify_webhook and the reference receiver)
    "WEBHOOK_HEADER_MISSING": ErrorSpec(400, "a required webhook header is missing"),
    "WEBHOOK_TIMESTAMP_OUT_OF_TOLERANCE": ErrorSpec(401, "the webhook timestamp is malformed or too far from now"),
    "WEBHOOK_SIGNATURE_INVALID": ErrorSpec(401, "no webhook signature matches the body"),
    "WEBHOOK_BODY_INVALID": ErrorSpec(400, "the webhook body is not canonical JSON of an artifact"),
    "SETTLEMENT_TOTALS_UNBALANCED": ErrorSpec(422, "a SettlementStatement's totals do not sum to zero"),
    "WEBHOOK_ID_CONFLICT": ErrorSpec(409, "the webhook-id was received before with another artifactHash"),
    # --- the event feed
    "FEED_STREAM_LIMIT": ErrorSpec(429, "the tenant has as many open event streams as allowed; retry after "
                                        "Retry-After"),
    # --- the dispatcher and its consumers
    "CONSUMER_INVALID": ErrorSpec(400, "a consumer definition is malformed"),
    "CONSUMER_NOT_FOUND": ErrorSpec(404, "no consumer with this name (and instance)"),
    "CONSUMER_NOT_DEAD": ErrorSpec(409, "the consumer is not dead, so it cannot be restarted"),
    "CONSUMER_NOT_DISABLED": ErrorSpec(409, "the consumer is not disabled, so it cannot be enabled"),
    "CONSUMER_PROCESSING": ErrorSpec(409, "the consumer is in a turn now; retry"),
    "CONSUMER_DEAD": ErrorSpec(409, "the consumer is dead; restart it"),
    "CONSUMER_RESET_INVALID": ErrorSpec(400, "the reset position is not valid for the consumer"),
    "CONSUMER_WAIT_TIMEOUT": ErrorSpec(504, "the consumer did not reach the position in time"),
    "DISPATCH_DRAIN_TIMEOUT": ErrorSpec(504, "the dispatcher did not drain in time"),
    "DISPATCH_STOP_TIMEOUT": ErrorSpec(504, "the dispatcher thread did not stop in time"),
    "DISPATCH_DUPLICATE_CONSUMER": ErrorSpec(500, "two consumers share a name"),
    "DISPATCH_INSTANCE_ID": ErrorSpec(500, "the dispatcher's instance_id is missing or reserved"),
    "DISPATCH_OPTIONS_INVALID": ErrorSpec(500, "a dispatcher option is out of range"),
    # --- the client SDK (settlekit.client): its own failures; the API's answers keep the server's code
    "API_UNREACHABLE": ErrorSpec(503, "the client got no answer from the API (refused, dropped or timed out)"),
    "SPOOL_INVALID": ErrorSpec(400, "the client's spool file is not a settlekit spool, or an event cannot be spooled"),
    "SPOOL_STREAM_NOT_BLOCKED": ErrorSpec(409, "only a blocked stream's waiting events can be discarded"),
    "SPOOL_STREAM_BLOCKED": ErrorSpec(409, "the API refused the stream's spooled events; its spool is stopped until "
                                           "they are discarded (`settlekit spool status` shows why)"),
    "SPOOL_HEAD_UNKNOWN": ErrorSpec(503, "the API is unreachable and the spool has never seen the stream, so the "
                                         "event cannot be chained"),
    # --- storage and process wiring
    "DATABASE_URL_INVALID": ErrorSpec(500, "the database URL is not postgresql://… or sqlite:///path"),
    "DATABASE_NOT_FOUND": ErrorSpec(503, "the SQLite file does not exist (create it with `settlekit migrate`)"),
    "DATABASE_CLOSED": ErrorSpec(500, "the database handle was closed"),
    "NESTED_TRANSACTION": ErrorSpec(500, "a transaction was opened inside another on one thread"),
    "SQL_CATALOGUE_INVALID": ErrorSpec(500, "the named SQL statements are inconsistent (a packaging bug)"),
    "SETTINGS_INVALID": ErrorSpec(500, "a setting (environment variable or option) has a bad value"),
    "WORKER_FAILED": ErrorSpec(500, "a background worker thread died; its error is in the message"),
}

# Ledger posting reasons: `details.code` of LEDGER_POSTING_INVALID and `error.code` of a recorded posting error
# (the reference's ledgerErrors). Several share a name with a domain-rule code above; these are the ledger's.
POSTING_REASONS: Final[Mapping[str, str]] = {
    "LEDGER_ERROR": "a posting rule failed (no more specific reason)",
    "UNBALANCED_ENTRY": "a journal entry does not sum to zero",
    "SPLITS_INVALID": "the amount, coverage fee and royalties do not split",
    "ALLOCATION_INVALID": "a posting cannot be allocated to parties",
    "QUOTE_MISSING": "the job has no quote to post from",
    "AMOUNT_INVALID": "an amount is not a safe integer in range",
    "JOB_NOT_SETTLED": "the posting needs a settled job",
    "JOB_NOT_TERMINAL": "settling needs a COMPLETED or ABORTED job",
    "CLAIM_ID_REQUIRED": "payload.claimId is missing",
    "CLAIM_NOT_FOUND": "no claim with this claimId on the job",
    "CLAIM_NOT_APPROVED": "the claim is not approved",
    "CLAIM_AMOUNTS_INVALID": "the claim's amounts are not safe integers or do not add up",
    "REFUND_NOT_ALLOWED": "refund adjustments need a settled, completed job",
    "PROOF_REQUIRED": "settling under proof gating needs a proof",
    "PROOF_INSUFFICIENT": "the proof verdict does not allow settlement",
}
