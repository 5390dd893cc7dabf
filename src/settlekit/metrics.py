"""One metric set per prometheus registry.

A registry refuses a metric name twice, so each area (API, dispatcher, delivery, cleanups) builds its metric set
once per registry and shares it. `PerRegistry` keeps that cache: weak keys (a registry dropped by a test frees its
set) and a lock (two threads asking at once get the same set).
"""

from __future__ import annotations

import threading
import weakref
from collections.abc import Callable
from typing import Generic, TypeVar

from prometheus_client import REGISTRY, CollectorRegistry

MetricSet = TypeVar("MetricSet")


class PerRegistry(Generic[MetricSet]):
    """`metrics_for = PerRegistry(MyMetrics)`; `metrics_for(registry)` returns the set registered in `registry`
    (default: the global prometheus registry), built by `factory(registry)` on first use."""

    def __init__(self, factory: Callable[[CollectorRegistry], MetricSet]):
        self._factory = factory
        self._by_registry: weakref.WeakKeyDictionary[CollectorRegistry, MetricSet] = weakref.WeakKeyDictionary()
        self._lock = threading.Lock()

    def __call__(self, registry: CollectorRegistry | None = None) -> MetricSet:
        reg = REGISTRY if registry is None else registry
        with self._lock:
            found = self._by_registry.get(reg)
            if found is None:
                found = self._by_registry[reg] = self._factory(reg)
            return found
