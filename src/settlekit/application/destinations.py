"""Webhook destinations and their recovery: the use cases live in `delivery/service.py` (saving, enabling,
disabling, secrets) and `delivery/recovery.py` (test sends, statistics, auto-disable), which the delivery worker
shares; the entry points take the stored destination's type from here, and the console its lists of deliveries
(of a job's artifacts, a destination's latest)."""

from __future__ import annotations

from settlekit.store.deliveries import Destination, deliveries_of_artifacts, latest_deliveries

__all__ = ["Destination", "deliveries_of_artifacts", "latest_deliveries"]
