"""The six job artifact types, their id prefixes and the trigger table (04-artifacts.md §1, §5, §6)."""

from __future__ import annotations

from typing import Final

from settlekit.errors import ValidationError

WORK_CERTIFICATE: Final = "WorkCertificate.v1"
PROOF_RECEIPT: Final = "ProofReceipt.v1"
COVERAGE_CERTIFICATE: Final = "CoverageCertificate.v1"
INCIDENT_PACKET: Final = "IncidentPacket.v1"
CREDIT_MEMO: Final = "CreditMemo.v1"
SETTLEMENT_STATEMENT: Final = "SettlementStatement.v1"

ARTIFACT_TYPES: Final[tuple[str, ...]] = (
    WORK_CERTIFICATE,
    PROOF_RECEIPT,
    COVERAGE_CERTIFICATE,
    INCIDENT_PACKET,
    CREDIT_MEMO,
    SETTLEMENT_STATEMENT,
)

ID_PREFIX: Final[dict[str, str]] = {
    WORK_CERTIFICATE: "cert",
    PROOF_RECEIPT: "proof",
    COVERAGE_CERTIFICATE: "coverage",
    INCIDENT_PACKET: "incident",
    CREDIT_MEMO: "credit",
    SETTLEMENT_STATEMENT: "settlement",
}

# source event type -> artifact types, in build order (§6)
TRIGGERS: Final[dict[str, tuple[str, ...]]] = {
    "SETTLED": (WORK_CERTIFICATE, SETTLEMENT_STATEMENT),
    "BOOKED": (COVERAGE_CERTIFICATE,),
    "PROOF_EVALUATED": (PROOF_RECEIPT, WORK_CERTIFICATE, SETTLEMENT_STATEMENT),
    "INCIDENT_REPORTED": (INCIDENT_PACKET,),
    "INCIDENT_DETECTED": (INCIDENT_PACKET,),
    "CLAIM_OPENED": (INCIDENT_PACKET,),
    "CLAIM_TRIAGED": (INCIDENT_PACKET,),
    "CLAIM_APPROVED": (INCIDENT_PACKET, SETTLEMENT_STATEMENT),
    "CLAIM_DENIED": (INCIDENT_PACKET,),
    "CLAIM_PAID": (INCIDENT_PACKET, SETTLEMENT_STATEMENT),
    "JOB_ADJUSTED": (SETTLEMENT_STATEMENT,),
    "SLA_CREDIT_ISSUED": (CREDIT_MEMO, SETTLEMENT_STATEMENT),
}
TRIGGER_EVENT_TYPES: Final = frozenset(TRIGGERS)
# event types the artifact consumer must see: triggers plus the RISK_SCORED that can anchor a BOOKED
CONSUMER_EVENT_TYPES: Final = TRIGGER_EVENT_TYPES | {"RISK_SCORED"}


def require_artifact_type(value: object) -> str:
    """The canonical type name; accepts `WorkCertificate` as well as `WorkCertificate.v1`."""
    if isinstance(value, str):
        name = value if value.endswith(".v1") else f"{value}.v1"
        if name in ID_PREFIX:
            return name
    raise ValidationError(
        f"unknown artifact type {value!r}; expected one of {', '.join(ARTIFACT_TYPES)}",
        code="ARTIFACT_TYPE_UNKNOWN",
        artifactType=value,
    )
