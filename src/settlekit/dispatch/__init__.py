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
from settlekit.dispatch.ops import (
    ConsumerProgress,
    SkipResult,
    dead_letters,
    disable_consumer,
    enable_consumer,
    get_state,
    list_consumers,
    require_state,
    reset_consumer,
    restart_consumer,
    skip_poison,
    wait_for,
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
    "ConsumerProgress",
    "ConsumerResult",
    "ConsumerState",
    "DispatchMetrics",
    "DispatchedEvent",
    "Dispatcher",
    "DrainTimeout",
    "ErrorPolicy",
    "Gap",
    "PassResult",
    "SkipResult",
    "dead_letters",
    "disable_consumer",
    "enable_consumer",
    "get_state",
    "list_consumers",
    "metrics_for",
    "require_state",
    "reset_consumer",
    "restart_consumer",
    "skip_poison",
    "wait_for",
]
