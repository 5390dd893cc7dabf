"""Webhook destinations and their recovery: the use cases live in `delivery/service.py` (saving, enabling,
disabling, secrets) and `delivery/recovery.py` (test sends, statistics, auto-disable), which the delivery worker
shares; the entry points take the stored destination's type from here."""

from __future__ import annotations

from settlekit.store.deliveries import Destination

__all__ = ["Destination"]
