"""Consumer definitions, the handler context, state rows and the dispatcher's errors."""

from __future__ import annotations

import logging
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal

from settlekit.errors import ConflictError, NotFoundError, SettlekitError, ValidationError
from settlekit.events.canonical import parse_json
from settlekit.store.event_store import StoredEvent

if TYPE_CHECKING:
    from settlekit.dispatch.metrics import DispatchMetrics
    from settlekit.store.db import Tx

SHARED_INSTANCE = "__shared__"
Delivery = Literal["shared", "per_instance"]
StartFrom = Literal["beginning", "now"]
Status = Literal["idle", "processing", "dead", "disabled"]

Handler = Callable[["DispatchedEvent", "ConsumerContext"], None]
BatchHandler = Callable[[Sequence["DispatchedEvent"], "ConsumerContext"], None]


@dataclass(frozen=True)
class ErrorPolicy:
    """`max_attempts` overrides the dispatcher default; `skip_apply_errors` turns on lenient mode."""

    max_attempts: int | None = None
    skip_apply_errors: bool = False


@dataclass(frozen=True)
class Consumer:
    """A durable consumer of the global event order."""

    name: str
    handler: Handler
    batch_handler: BatchHandler | None = None
    error_policy: ErrorPolicy = field(default_factory=ErrorPolicy)
    delivery: Delivery = "shared"
    start_from: StartFrom = "beginning"
    event_types: frozenset[str] | None = None

    def __post_init__(self) -> None:
        if not self.name or len(self.name) > 200:
            raise ValidationError("consumer name must be 1..200 characters", code="CONSUMER_INVALID")
        if self.delivery not in ("shared", "per_instance"):
            raise ValidationError(
                f"delivery must be shared or per_instance, not {self.delivery!r}", code="CONSUMER_INVALID"
            )
        if self.start_from not in ("beginning", "now"):
            raise ValidationError(
                f"start_from must be beginning or now, not {self.start_from!r}", code="CONSUMER_INVALID"
            )
        if self.event_types is not None and not isinstance(self.event_types, frozenset):
            object.__setattr__(self, "event_types", frozenset(self.event_types))


class DispatchedEvent(StoredEvent):
    """A StoredEvent read by the dispatcher; the envelope JSON is parsed on first access of `event`."""

    def __init__(
        self,
        position: int,
        tenant_id: str,
        stream_id: str,
        stream_type: str,
        seq: int,
        raw: str,
        txid: int | None,
        event_id: str,
        event_type: str,
        correlation_id: str | None,
    ):
        object.__setattr__(
            self,
            "__dict__",
            {
                "position": position,
                "tenant_id": tenant_id,
                "stream_id": stream_id,
                "stream_type": stream_type,
                "seq": seq,
                "txid": txid,
                "raw_json": raw,
                "_event_id": event_id,
                "_type": event_type,
                "correlation_id": correlation_id,
                "_parsed": None,
            },
        )

    raw_json: str
    correlation_id: str | None

    @property
    def event(self) -> dict[str, Any]:
        parsed = self.__dict__["_parsed"]
        if parsed is None:
            parsed = parse_json(self.raw_json)
            object.__setattr__(self, "_parsed", parsed)
        return parsed

    @property
    def event_id(self) -> str:
        return str(self.__dict__["_event_id"])

    @property
    def type(self) -> str:
        return str(self.__dict__["_type"])


class ConsumerContext:
    """What a handler gets besides the event: the turn's transaction and the request scope.

    Valid for the duration of the handler call (the dispatcher reuses it within a turn).
    """

    __slots__ = ("tx", "consumer_name", "instance_id", "log", "metrics", "source", "_correlation_id")

    def __init__(
        self,
        tx: Tx,
        consumer_name: str,
        instance_id: str,
        log: logging.Logger,
        metrics: DispatchMetrics,
        source: DispatchedEvent,
    ):
        self.tx = tx
        self.consumer_name = consumer_name
        self.instance_id = instance_id
        self.log = log
        self.metrics = metrics
        self.bind(source)

    def bind(self, source: DispatchedEvent) -> None:
        """Point the request scope at another event (the last one of a batch)."""
        self.source = source
        self._correlation_id = source.correlation_id

    @property
    def causation_id(self) -> str:
        return self.source.event_id

    @property
    def position(self) -> int:
        return self.source.position

    @property
    def correlation_id(self) -> str:
        """From the event's metadata, or a fresh id (stable for this call)."""
        if self._correlation_id is None:
            self._correlation_id = uuid.uuid4().hex
        return self._correlation_id


@dataclass(frozen=True)
class Gap:
    """An inclusive range of positions below the cursor that were invisible when observed.

    `seen_at` (unix seconds, 0 = unknown) is when the range was first recorded; it only feeds the oldest-gap
    gauge and takes no part in equality."""

    lo: int
    hi: int
    xmax: int
    seen_at: float = field(default=0.0, compare=False)

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {"from": self.lo, "to": self.hi, "xmax": str(self.xmax)}
        if self.seen_at:
            out["at"] = round(self.seen_at, 3)
        return out

    @property
    def size(self) -> int:
        return self.hi - self.lo + 1


@dataclass
class ConsumerState:
    name: str
    instance_id: str
    status: str
    cursor: int
    attempts: int
    rearm_count: int
    pending_gaps: list[Gap]
    last_error: str | None
    skipped_count: int
    updated_at: str
    processing: bool = False

    @property
    def pending_gap_positions(self) -> int:
        return sum(g.size for g in self.pending_gaps)

    def to_json(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "instanceId": self.instance_id,
            "status": "processing" if self.processing else self.status,
            "storedStatus": self.status,
            "processing": self.processing,
            "lastProcessedPosition": self.cursor,
            "attempts": self.attempts,
            "rearmCount": self.rearm_count,
            "pendingGaps": [g.to_json() for g in self.pending_gaps],
            "lastError": self.last_error,
            "skippedCount": self.skipped_count,
            "updatedAt": self.updated_at,
        }


class ConsumerNotFound(NotFoundError):
    code = "CONSUMER_NOT_FOUND"


class ConsumerNotDead(ConflictError):
    code = "CONSUMER_NOT_DEAD"


class ConsumerNotDisabled(ConflictError):
    code = "CONSUMER_NOT_DISABLED"


class ConsumerProcessing(ConflictError):
    code = "CONSUMER_PROCESSING"


class ConsumerDead(ConflictError):
    code = "CONSUMER_DEAD"


class DrainTimeout(SettlekitError):
    code = "DISPATCH_DRAIN_TIMEOUT"
    status = 504
