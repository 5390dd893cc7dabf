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


class ReadWouldBlock(Exception):  # noqa: N818 (a signal to the append, not an error)
    """A domain step run with `may_block=False` (on an event loop) needs a database read that is not cached: the
    append runs the step again where a read may block (a worker thread)."""


class StreamDomain(Protocol):
    """Business rules plugged into the append use case (the job domain implements this)."""

    def stream_type(self, first_event_type: str, stream_id: str) -> str: ...

    def prepare_drafts(self, snapshot: dict[str, Any] | None, drafts: list[Event]) -> list[Event]: ...

    def current_snapshot(self, tenant_id: str, stream_id: str, snapshot: dict[str, Any], seq: int,
                         may_block: bool = True) -> dict[str, Any]:
        """The stored state of a stream at `seq`, brought to the domain's current format (the same object when it
        is current). A read it needs raises ReadWouldBlock unless `may_block`, as in `process`."""
        ...

    def required_signer(self, event_type: str, actor_type: str) -> str | None: ...

    def process(self, tenant_id: str, stream_id: str, snapshot: dict[str, Any] | None,
                events: list[Event], first_seq: int, may_block: bool = True,
                *, recorded: bool = False) -> DomainOutcome:
        """The events' domain step on top of `snapshot`; raises to refuse them. It may read what it needs (a
        contract document) unless `may_block` is False: then a read that is not cached raises ReadWouldBlock.
        `recorded`: the events are recorded history (AppendPolicy.recorded), judged by the rules they were
        recorded under."""
        ...


class PassThroughDomain:
    """No business rules: any well-formed event is accepted; signatures are checked when present."""

    def stream_type(self, first_event_type: str, stream_id: str) -> str:
        return "job" if first_event_type == "JOB_CREATED" else "generic"

    def prepare_drafts(self, snapshot: dict[str, Any] | None, drafts: list[Event]) -> list[Event]:
        return drafts

    def current_snapshot(self, tenant_id: str, stream_id: str, snapshot: dict[str, Any], seq: int,
                         may_block: bool = True) -> dict[str, Any]:
        return snapshot

    def required_signer(self, event_type: str, actor_type: str) -> str | None:
        return None

    def process(self, tenant_id: str, stream_id: str, snapshot: dict[str, Any] | None,
                events: list[Event], first_seq: int, may_block: bool = True,
                *, recorded: bool = False) -> DomainOutcome:
        return DomainOutcome()
