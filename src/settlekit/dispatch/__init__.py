"""Durable, gap-safe event dispatch: consumers, the dispatcher and the operator surface (05-dispatcher.md)."""

from settlekit.dispatch.dispatcher import ConsumerResult, Dispatcher, PassResult
from settlekit.dispatch.metrics import DispatchMetrics, metrics_for
from settlekit.dispatch.model import (
    SHARED_INSTANCE,
    Consumer,
    ConsumerContext,
    ConsumerDead,
    ConsumerNotDead,
    ConsumerNotDisabled,
    ConsumerNotFound,
    ConsumerProcessing,
    DrainTimeout,
    ErrorPolicy,
)
from settlekit.store.consumers import ConsumerState, DispatchedEvent, Gap

__all__ = [
    "SHARED_INSTANCE",
    "Consumer",
    "ConsumerContext",
    "ConsumerDead",
    "ConsumerNotDead",
    "ConsumerNotDisabled",
    "ConsumerNotFound",
    "ConsumerProcessing",
    "ConsumerResult",
    "ConsumerState",
    "DispatchMetrics",
    "DispatchedEvent",
    "Dispatcher",
    "DrainTimeout",
    "ErrorPolicy",
    "Gap",
    "PassResult",
    "metrics_for",
]
