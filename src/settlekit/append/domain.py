"""The seam between the append use case and a stream's business rules (`append/jobs.py` is settlekit's)."""

from __future__ import annotations

from collections.abc import Callable, Hashable, Mapping, Sequence
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


class DomainRead(Exception):  # noqa: N818 (a request, not an error: the append answers it)
    """A domain step needs a value that only a database read gives, and `known` does not hold it: the append
    runs `read()` where a read may block (Appender.append_async: on a worker thread, not the event loop), then
    runs the step again with the value in `known[key]`."""

    def __init__(self, key: Hashable, read: Callable[[], object]):
        super().__init__(f"the domain step needs a database read ({key!r})")
        self.key = key
        self.read = read


class StreamDomain(Protocol):
    """Business rules plugged into the append use case (the job domain implements this)."""

    def stream_type(self, first_event_type: str, stream_id: str) -> str: ...

    def prepare_drafts(self, snapshot: dict[str, Any] | None, drafts: list[Event]) -> list[Event]: ...

    def current_snapshot(self, tenant_id: str, stream_id: str, snapshot: dict[str, Any], seq: int,
                         known: Mapping[Hashable, Any]) -> dict[str, Any]:
        """The stored state of a stream at `seq`, brought to the domain's current format (it may ask for a read
        with DomainRead, as `process` does); the same object when it is current."""
        ...

    def required_signer(self, event_type: str, actor_type: str) -> str | None: ...

    def process(self, tenant_id: str, stream_id: str, snapshot: dict[str, Any] | None,
                events: list[Event], first_seq: int, known: Mapping[Hashable, Any] | None = None,
                *, recorded: bool = False) -> DomainOutcome:
        """The events' domain step on top of `snapshot`; raises to refuse them. `known`: the values the append
        read for this step (see DomainRead); None: read what is needed directly. `recorded`: the events are
        recorded history (AppendPolicy.recorded), judged by the rules they were recorded under."""
        ...


class PassThroughDomain:
    """No business rules: any well-formed event is accepted; signatures are checked when present."""

    def stream_type(self, first_event_type: str, stream_id: str) -> str:
        return "job" if first_event_type == "JOB_CREATED" else "generic"

    def prepare_drafts(self, snapshot: dict[str, Any] | None, drafts: list[Event]) -> list[Event]:
        return drafts

    def current_snapshot(self, tenant_id: str, stream_id: str, snapshot: dict[str, Any], seq: int,
                         known: Mapping[Hashable, Any]) -> dict[str, Any]:
        return snapshot

    def required_signer(self, event_type: str, actor_type: str) -> str | None:
        return None

    def process(self, tenant_id: str, stream_id: str, snapshot: dict[str, Any] | None,
                events: list[Event], first_seq: int, known: Mapping[Hashable, Any] | None = None,
                *, recorded: bool = False) -> DomainOutcome:
        return DomainOutcome()
