"""The seam between the append use case and a stream's business rules (`append/jobs.py` is settlekit's)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from settlekit.events.envelope import Event
from settlekit.store.db import Tx


@dataclass
class DomainOutcome:
    """What a stream's domain adds to an append: the new snapshot and rows written in the same transaction."""

    snapshot: dict[str, Any] | None = None
    # (tx, the store positions of the appended events, in order)
    write: Callable[[Tx, Sequence[int]], None] | None = None


class StreamDomain(Protocol):
    """Business rules plugged into the append use case (the job domain implements this)."""

    def stream_type(self, first_event_type: str, stream_id: str) -> str: ...

    def prepare_drafts(self, snapshot: dict[str, Any] | None, drafts: list[Event]) -> list[Event]: ...

    def required_signer(self, event_type: str, actor_type: str) -> str | None: ...

    def process(self, tenant_id: str, stream_id: str, snapshot: dict[str, Any] | None,
                events: list[Event], first_seq: int) -> DomainOutcome: ...


class PassThroughDomain:
    """No business rules: any well-formed event is accepted; signatures are checked when present."""

    def stream_type(self, first_event_type: str, stream_id: str) -> str:
        return "job" if first_event_type == "JOB_CREATED" else "generic"

    def prepare_drafts(self, snapshot: dict[str, Any] | None, drafts: list[Event]) -> list[Event]:
        return drafts

    def required_signer(self, event_type: str, actor_type: str) -> str | None:
        return None

    def process(self, tenant_id: str, stream_id: str, snapshot: dict[str, Any] | None,
                events: list[Event], first_seq: int) -> DomainOutcome:
        return DomainOutcome()
