"""Where a stored (or reused) artifact goes next, inside the same transaction.

`DeliverySink.enqueue(tx, tenant_id, artifact_row) -> int` receives the stored artifact document (with
`artifactId`, `artifactType`, `artifactHash`, `jobId`, `jobVersion`) and returns how many rows it created.
It must be idempotent: calling it again for the same artifact creates nothing (the consumer calls it on every
reuse, §10.2). The one implementation is `delivery.sink.WebhookDeliverySink`: one delivery per active
destination of the tenant that accepts the artifact's type.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Protocol, runtime_checkable

from settlekit.store.db import Tx


@runtime_checkable
class DeliverySink(Protocol):
    def enqueue(self, tx: Tx, tenant_id: str, artifact_row: Mapping[str, Any]) -> int: ...
