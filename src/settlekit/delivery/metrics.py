"""Prometheus metrics of webhook delivery (spec 06 §11), one set per registry.

Counters and the attempt histogram are updated by the worker; queue sizes (pending/delivered/failed rows,
the DLQ and the oldest due delivery) are read from the database at scrape time by `DeliveryQueueCollector`.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from datetime import UTC, datetime

from prometheus_client import REGISTRY, CollectorRegistry, Counter, Histogram
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector

from settlekit.metrics import PerRegistry
from settlekit.store import deliveries as store
from settlekit.store.db import Database

# attempt outcomes (label `outcome`)
DELIVERED = "delivered"
RETRIED = "retried"
FAILED = "failed"  # max attempts reached: moved to the DLQ
ALL_DESTINATIONS = "all"  # destination_id label value unless per-destination metrics are enabled
GONE = "gone"  # 410: delivery failed and destination disabled
LEASE_LOST = "lease_lost"  # another worker owns the row now; this result was discarded
HELD = "held"  # answered while its destination was already disabled: stays pending until it is enabled
OUTCOMES = (DELIVERED, RETRIED, FAILED, GONE, LEASE_LOST, HELD)
# reason label of `settlekit_destinations_disabled_total` for a disable by the API or the CLI, whatever text the
# operator gave (that text is the destination's disabledReason and in the audit log, never a label value: free
# text would make one series per call)
OPERATOR = "operator"


class DeliveryMetrics:
    def __init__(self, registry: CollectorRegistry):
        r = registry
        self.attempts = Counter(
            "settlekit_delivery_attempts",
            "Delivery attempts by destination and outcome (delivered, retried, failed, gone, held, lease_lost)",
            ["destination_id", "outcome"],
            registry=r,
        )
        self.failures = Counter(
            "settlekit_delivery_failures",
            "Failed attempts (retried or not) by spec 06 §5 reason",
            ["reason"],
            registry=r,
        )
        self.duration = Histogram(
            "settlekit_delivery_duration_seconds",
            "Duration of one delivery attempt (request sent to response read)",
            registry=r,
            buckets=(0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 15, 30),
        )
        self.dlq = Counter(
            "settlekit_delivery_dlq", "Deliveries moved to the DLQ (state failed)", registry=r
        )
        self.disabled = Counter(
            "settlekit_destinations_disabled",
            "Destinations disabled, by reason: gone, secret_file_refused, failing (by the worker), operator (by the "
            "API or the CLI, whatever reason text it gave)",
            ["reason"],
            registry=r,
        )
        self.released = Counter(
            "settlekit_delivery_leases_released",
            "Claimed deliveries handed back unsent on graceful shutdown",
            registry=r,
        )
        self.lease_renewals = Counter(
            "settlekit_delivery_lease_renewals",
            "Lease renewals of the deliveries in flight (one statement per worker and interval)",
            registry=r,
        )
        self.circuit_opened = Counter(
            "settlekit_delivery_circuit_opened",
            "Destination circuits opened after attempts in a row without an answer (timeouts, network errors)",
            registry=r,
        )
        self.worker_errors = Counter(
            "settlekit_delivery_worker_errors",
            "Worker passes aborted by an unexpected error (the loop backs off and continues)",
            ["error_class"],
            registry=r,
        )


# the metric set registered in a registry (default: the global prometheus registry), created once
metrics_for: PerRegistry[DeliveryMetrics] = PerRegistry(DeliveryMetrics)


class DeliveryQueueCollector(Collector):
    """Scrape-time gauges from the deliveries table (all tenants):

    - `settlekit_deliveries_pending{state}`: rows per state (pending, delivered, failed);
    - `settlekit_delivery_dlq_size`: failed rows (the DLQ), the same figure as state="failed";
    - `settlekit_delivery_oldest_pending_seconds`: age of the oldest pending delivery (0 when none).
    """

    def __init__(self, db: Database, *, clock: Callable[[], datetime] | None = None):
        self.db = db
        self.clock = clock or (lambda: datetime.now(UTC))

    def collect(self) -> Iterator[GaugeMetricFamily]:
        now = self.clock()
        with self.db.read() as tx:
            counts = store.pending_counts(tx)
            oldest = store.oldest_pending_created_at(tx)
        by_state = GaugeMetricFamily(
            "settlekit_deliveries_pending", "Delivery rows per state", labels=["state"]
        )
        for state in ("pending", "delivered", "failed"):
            by_state.add_metric([state], counts.get(state, 0))
        yield by_state
        yield GaugeMetricFamily(
            "settlekit_delivery_dlq_size", "Deliveries in the DLQ (failed)", value=counts.get("failed", 0)
        )
        age = 0.0 if oldest is None else max(0.0, (now - oldest).total_seconds())
        yield GaugeMetricFamily(
            "settlekit_delivery_oldest_pending_seconds", "Age of the oldest pending delivery", value=age
        )


def register_queue_collector(
    db: Database, registry: CollectorRegistry | None = None, *, clock: Callable[[], datetime] | None = None
) -> DeliveryQueueCollector:
    """Register the scrape-time queue gauges for `db`; unregister with `registry.unregister(collector)`."""
    collector = DeliveryQueueCollector(db, clock=clock)
    (REGISTRY if registry is None else registry).register(collector)
    return collector
