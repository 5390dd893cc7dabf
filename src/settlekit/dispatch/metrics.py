"""Prometheus metrics of the dispatcher (05-dispatcher.md §11), one set per registry."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

from settlekit.metrics import PerRegistry

_KEY = ["consumer", "instance_id"]


class DispatchMetrics:
    def __init__(self, registry: CollectorRegistry):
        self._add_consumer_metrics(registry)
        self._add_gap_metrics(registry)
        self._add_loop_metrics(registry)

    def _add_consumer_metrics(self, r: CollectorRegistry) -> None:
        """Lag, delivery outcomes and the dead/re-arm lifecycle, per consumer shard."""
        self.lag_events = Gauge(
            "settlekit_consumer_lag_events",
            "Events between the cursor and the high-water mark",
            _KEY,
            registry=r,
        )
        self.lag_seconds = Gauge(
            "settlekit_consumer_lag_seconds", "Age of the oldest undelivered visible event", _KEY, registry=r
        )
        self.processed = Counter("settlekit_consumer_events_processed_total", "Events delivered", _KEY, registry=r)
        self.failed = Counter(
            "settlekit_consumer_events_failed_total", "Handler failures", [*_KEY, "error_class"], registry=r
        )
        self.skipped = Counter(
            "settlekit_consumer_events_skipped_total",
            "Events skipped into dead letters",
            [*_KEY, "reason"],
            registry=r,
        )
        self.dead = Counter("settlekit_consumer_dead_total", "Consumers marked dead", _KEY, registry=r)
        self.rearm = Counter("settlekit_consumer_rearm_total", "Automatic dead→idle revivals", _KEY, registry=r)
        self.rearm_exhausted = Counter(
            "settlekit_consumer_rearm_exhausted_total",
            "Dead consumers whose re-arm budget is spent",
            _KEY,
            registry=r,
        )

    def _add_gap_metrics(self, r: CollectorRegistry) -> None:
        """The pending-gap list: its size, age, and how gaps leave it."""
        self.pending_gaps = Gauge("settlekit_consumer_pending_gaps", "Positions held in pending gaps", _KEY, registry=r)
        self.oldest_gap_age = Gauge(
            "settlekit_consumer_oldest_gap_age_seconds",
            "Age of the oldest pending gap range (since it was first recorded), 0 when none",
            _KEY,
            registry=r,
        )
        self.blocked_turns = Counter(
            "settlekit_consumer_blocked_turns_total",
            "Turns that stopped short because the pending-gap list is full",
            _KEY,
            registry=r,
        )
        self.gaps_resolved = Counter(
            "settlekit_consumer_gaps_resolved_total", "Gap positions delivered late", _KEY, registry=r
        )
        self.gaps_retired = Counter(
            "settlekit_consumer_gaps_retired_total", "Gap positions proven never to commit", _KEY, registry=r
        )

    def _add_loop_metrics(self, r: CollectorRegistry) -> None:
        """Passes and turns of the dispatcher loop, and its LISTEN connection."""
        self.pass_duration = Histogram(
            "settlekit_dispatcher_pass_duration_seconds", "Duration of a pass", ["instance_id"], registry=r
        )
        self.turn_duration = Histogram(
            "settlekit_dispatcher_turn_duration_seconds",
            "Duration of a turn",
            ["consumer"],
            registry=r,
            buckets=(0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 10),
        )
        self.turn_errors = Counter(
            "settlekit_dispatcher_turn_errors_total",
            "Turns rolled back by an error",
            ["consumer"],
            registry=r,
        )
        self.listen_connected = Gauge(
            "settlekit_dispatcher_listen_connected", "LISTEN connection is up", ["instance_id"], registry=r
        )


# the metric set registered in a registry (default: the global prometheus registry), created once
metrics_for: PerRegistry[DispatchMetrics] = PerRegistry(DispatchMetrics)
