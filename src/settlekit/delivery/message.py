"""Pure delivery keys (spec 06 §2-3) and the prepared HTTP request of one attempt."""

from __future__ import annotations

from collections.abc import Hashable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Final

from settlekit.delivery.signing import SigningMode, delivery_headers
from settlekit.delivery.ssrf import SsrfPolicy
from settlekit.events.canonical import canonical_bytes, is_safe_int, sha256_hex
from settlekit.store.deliveries import DeliveryKeys as StoredDeliveryKeys

ARTIFACT_PRIORITIES: Final = {
    "WorkCertificate.v1": 10,
    "ProofReceipt.v1": 12,
    "CoverageCertificate.v1": 15,
    "IncidentPacket.v1": 20,
    "CreditMemo.v1": 30,
    "SettlementStatement.v1": 40,
}
DEFAULT_PRIORITY: Final = 100


def artifact_priority(artifact_type: str) -> int:
    """Lower sends earlier within one `(scope_key, order_seq)`."""
    return ARTIFACT_PRIORITIES.get(artifact_type, DEFAULT_PRIORITY)


def dedupe_key(
    tenant_id: str, destination_id: str, artifact_type: str, artifact_id: str, artifact_hash: str
) -> str:
    return f"{tenant_id}:{destination_id}:{artifact_type}:{artifact_id}:{artifact_hash}"


def message_id(dedupe: str) -> str:
    """Standard Webhooks `webhook-id`: `dlv_` + 32 hex chars of sha256(dedupe_key); stable across retries."""
    return "dlv_" + sha256_hex(dedupe)[:32]


def order_key(scope_key: str, order_seq: int, priority: int, artifact_id: str) -> str:
    return f"{scope_key}\n{order_seq}\n{priority}\n{artifact_id}"


class DeliveryKeys(StoredDeliveryKeys):
    """Every derived key of one (destination, artifact) delivery."""

    @classmethod
    def for_job_artifact(
        cls, tenant_id: str, destination_id: str, artifact: Mapping[str, Any]
    ) -> DeliveryKeys:
        """Keys for a job artifact: scope = jobId, order_seq = jobVersion (0 when not a safe int)."""
        a_type = str(artifact["artifactType"])
        a_id = str(artifact["artifactId"])
        dk = dedupe_key(tenant_id, destination_id, a_type, a_id, str(artifact["artifactHash"]))
        scope = str(artifact.get("jobId"))
        version = artifact.get("jobVersion")
        seq = version if is_safe_int(version) and version >= 0 else 0
        prio = artifact_priority(a_type)
        return cls(dk, message_id(dk), scope, seq, prio, order_key(scope, seq, prio, a_id))


@dataclass(frozen=True)
class PreparedRequest:
    """One POST ready to send.

    `tag` is opaque to the sender (e.g. the delivery row id); requests with the same `group` are sent
    sequentially in list order, distinct groups concurrently.
    """

    url: str
    headers: Mapping[str, str]
    body: bytes
    tag: Any = None
    group: Hashable | None = None
    policy: SsrfPolicy = field(default_factory=SsrfPolicy)
    timeout: float | None = None
    pool: Hashable | None = None  # the keep-alive pool it goes through (default: one per origin)


def prepare_request(
    *,
    url: str,
    artifact: Mapping[str, Any],
    tenant_id: str,
    destination_id: str,
    secrets: Sequence[str],
    signing: SigningMode = "standard",
    attempt: int = 1,
    delivery_id: str | int | None = None,
    policy: SsrfPolicy | None = None,
    now: datetime | None = None,
    tag: Any = None,
    group: Hashable | None = None,
    timeout: float | None = None,
) -> PreparedRequest:
    """Serialize the stored artifact as canonical JSON and sign exactly those bytes."""
    keys = DeliveryKeys.for_job_artifact(tenant_id, destination_id, artifact)
    body = canonical_bytes(dict(artifact))
    headers = delivery_headers(
        mode=signing,
        secrets=secrets,
        body=body,
        message_id=keys.message_id,
        dedupe_key=keys.dedupe_key,
        delivery_id=str(delivery_id) if delivery_id is not None else keys.message_id,
        artifact_type=str(artifact["artifactType"]),
        artifact_id=str(artifact["artifactId"]),
        artifact_hash=str(artifact["artifactHash"]),
        order_key=keys.order_key,
        attempt=attempt,
        now=now,
    )
    return PreparedRequest(
        url=url,
        headers=headers,
        body=body,
        tag=tag,
        group=keys.scope_key if group is None else group,
        policy=policy or SsrfPolicy(),
        timeout=timeout,
    )
