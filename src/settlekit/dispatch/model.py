"""Consumer definitions, the handler context and the dispatcher's errors (the state rows and the dispatched
event are the store's: settlekit.store.consumers)."""

from __future__ import annotations

import logging
import re
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Literal

from settlekit.errors import ConflictError, NotFoundError, SettlekitError, ValidationError
from settlekit.store.consumers import DispatchedEvent

if TYPE_CHECKING:
    from settlekit.dispatch.metrics import DispatchMetrics
    from settlekit.store.db import Tx

SHARED_INSTANCE = "__shared__"
Delivery = Literal["shared", "per_instance"]
StartFrom = Literal["beginning", "now"]
Status = Literal["idle", "processing", "dead", "disabled"]

Handler = Callable[[DispatchedEvent, "ConsumerContext"], None]
BatchHandler = Callable[[Sequence[DispatchedEvent], "ConsumerContext"], None]


_FAILED_AT = re.compile(r" \(position ([0-9]+)\)\Z")


def failure_text(error_class: str, message: str, position: int) -> str:
    """A consumer's `last_error` for a handler failure on the event at `position` (`failed_position` reads it)."""
    return f"{error_class}: {message} (position {position})"


def failed_position(last_error: str | None) -> int | None:
    """The position of the event a consumer's last handler failure was on, from its `last_error`; None if none."""
    found = _FAILED_AT.search(last_error) if last_error else None
    return int(found.group(1)) if found else None


@dataclass(frozen=True)
class ErrorPolicy:
    """`max_attempts` overrides the dispatcher default; `skip_apply_errors` turns on lenient mode. `permanent`:
    failures that no retry can change (a conflict with data already stored): such an event is skipped into a dead
    letter at once (reason `skip_permanent_error`), so one tenant's data never halts a shared consumer."""

    max_attempts: int | None = None
    skip_apply_errors: bool = False
    permanent: tuple[type[Exception], ...] = ()


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
