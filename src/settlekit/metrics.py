"""One metric set per prometheus registry, and metrics shared by the processes of `serve --workers N`.

A registry refuses a metric name twice, so each area (API, dispatcher, delivery, cleanups) builds its metric set
once per registry and shares it. `PerRegistry` keeps that cache: weak keys (a registry dropped by a test frees its
set) and a lock (two threads asking at once get the same set).

Several processes (`share_across_processes`): each keeps its values in files of one directory (prometheus_client's
multiprocess mode) and a scrape of any of them renders them all (`shared_registry`): counters and histograms
summed over the processes, gauges one series per process (label `pid`).
"""

from __future__ import annotations

import logging
import os
import re
import shutil
import threading
import weakref
from collections.abc import Callable
from typing import Generic, TypeVar

from prometheus_client import REGISTRY, CollectorRegistry, values
from prometheus_client.multiprocess import MultiProcessCollector

# prometheus_client's own setting: processes started with it keep their metrics in files of that directory
SHARED_METRICS_DIR = "PROMETHEUS_MULTIPROC_DIR"
# the shared directories `serve --workers N` makes: settlekit-metrics-<its pid>-<random>
SHARED_DIR_PREFIX = "settlekit-metrics-"
_SHARED_DIR = re.compile(re.escape(SHARED_DIR_PREFIX) + r"(\d+)-")
log = logging.getLogger("settlekit.metrics")

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


def share_across_processes(directory: str) -> None:
    """Keep the metrics this process creates from now on, and those of the processes it starts, in files under
    `directory` (an empty directory that outlives them all), so that `shared_registry` sums them. Call it before
    any metric is created: one created earlier stays in this process's memory, out of the shared figures."""
    os.environ[SHARED_METRICS_DIR] = directory
    values.ValueClass = values.MultiProcessValue()


def shared_registry() -> CollectorRegistry | None:
    """A registry that renders the metrics of every process sharing this one's directory (None when this process
    shares none). Scrape-time collectors of the process's own go in it as well."""
    directory = os.environ.get(SHARED_METRICS_DIR)
    if not directory:
        return None
    registry = CollectorRegistry()
    MultiProcessCollector(registry, path=directory)
    return registry


def shared_dir_prefix() -> str:
    """The name prefix of this process's shared metrics directory (its pid in it, for `remove_stale_shared_dirs`)."""
    return f"{SHARED_DIR_PREFIX}{os.getpid()}-"


def remove_stale_shared_dirs(parent: str) -> list[str]:
    """Remove the shared metrics directories under `parent` whose process is gone (a `serve` that was killed
    could not remove its own); returns their paths. One that cannot be removed is logged and left."""
    removed = []
    for entry in os.scandir(parent):
        match = _SHARED_DIR.match(entry.name)
        if match is None or not entry.is_dir(follow_symlinks=False) or _alive(int(match.group(1))):
            continue
        try:
            shutil.rmtree(entry.path)
        except OSError as exc:
            log.warning("could not remove the stale metrics directory %s: %s", entry.path, exc)
            continue
        removed.append(entry.path)
    return removed


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True  # another user's process
    return True
