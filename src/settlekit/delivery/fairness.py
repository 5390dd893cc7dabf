"""Which due deliveries a worker claims next: fair between tenants and between destinations, within caps.

A worker process has `in_flight` request slots. One destination holds at most `per_destination` of them and one
tenant at most `per_tenant`, so a slow or dead endpoint (or a tenant with many) can only ever hold its share; the
other slots keep serving everyone else. Free slots are dealt round-robin: each tenant in turn (the one whose
oldest due delivery has waited longest first) gets one delivery of its next destination in turn (again longest
waiting first), until the slots, the caps or the due deliveries run out. A destination whose circuit is
half-open gets one request at a time (the probe). A delivery claimed `ISOLATE_AFTER` times without an outcome (its
worker died each time) is quarantined: a worker sends at most one such at a time, so a delivery that kills its
worker cannot take many others down with it again and again. (Once is every delivery in flight when a worker is
killed: those go out again as usual.)
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime

from settlekit.store.deliveries import DueDelivery

DestinationKey = tuple[str, str]
ISOLATE_AFTER = 2  # claims without a recorded outcome after which a delivery is sent alone


def quarantined(claims: int) -> bool:
    """Whether a delivery claimed `claims` times without an outcome goes out alone."""
    return claims >= ISOLATE_AFTER


@dataclass(frozen=True)
class Caps:
    """`in_flight`: requests in flight per worker process. `per_destination`: of those, to one destination (a
    receiver is never flooded, and a slow one holds at most this many slots). `per_tenant`: to all destinations
    of one tenant (a tenant's slow endpoints hold at most this share of the slots)."""

    in_flight: int = 64
    per_destination: int = 4
    per_tenant: int = 16

    def __post_init__(self) -> None:
        if min(self.in_flight, self.per_destination, self.per_tenant) < 1:
            raise ValueError("delivery concurrency caps must be at least 1")


def allocate(
    due: Sequence[DueDelivery],
    *,
    slots: int,
    caps: Caps,
    busy_destinations: Mapping[DestinationKey, int],
    busy_tenants: Mapping[str, int],
    quarantine_free: bool,
) -> list[DueDelivery]:
    """The deliveries to claim, in the order they were dealt. `due` lists each destination's due deliveries in
    claim order (as `store.deliveries.due_per_destination` returns them); the busy maps count this worker's
    deliveries in flight."""
    queues: dict[DestinationKey, list[DueDelivery]] = {}
    for d in due:
        queues.setdefault((d.tenant_id, d.destination_id), []).append(d)
    allowance: dict[DestinationKey, int] = {}
    oldest: dict[DestinationKey, datetime] = {}
    for key, rows in queues.items():
        cap = 1 if rows[0].probing else caps.per_destination
        allowance[key] = max(0, cap - busy_destinations.get(key, 0))
        oldest[key] = min(r.next_attempt_at for r in rows)
    by_tenant: dict[str, list[DestinationKey]] = {}
    for key in sorted(queues, key=lambda k: (oldest[k], k)):
        if allowance[key] > 0:
            by_tenant.setdefault(key[0], []).append(key)
    tenant_room = Counter({t: caps.per_tenant - busy_tenants.get(t, 0) for t in by_tenant})
    order = sorted(by_tenant, key=lambda t: (oldest[by_tenant[t][0]], t))
    picks: list[DueDelivery] = []
    quarantine = quarantine_free
    while slots > 0 and order:
        still: list[str] = []
        for tenant in order:
            if slots <= 0:
                break
            picked = _next_of_tenant(by_tenant[tenant], queues, allowance, quarantine) if tenant_room[tenant] > 0 \
                else None
            if picked is None:
                continue
            if quarantined(picked.claims):
                quarantine = False
            picks.append(picked)
            slots -= 1
            tenant_room[tenant] -= 1
            if tenant_room[tenant] > 0 and by_tenant[tenant]:
                still.append(tenant)
        order = still
    return picks


def _next_of_tenant(keys: list[DestinationKey], queues: dict[DestinationKey, list[DueDelivery]],
                    allowance: dict[DestinationKey, int], quarantine_free: bool) -> DueDelivery | None:
    """One delivery of the tenant's next destination in turn (the destination then goes to the back), or None
    when none of its destinations has one left within its cap."""
    while keys:
        key = keys.pop(0)
        rows = queues[key]
        for i, row in enumerate(rows):
            if quarantined(row.claims) and not quarantine_free:
                continue
            del rows[i]
            allowance[key] -= 1
            if allowance[key] > 0 and any(not quarantined(r.claims) or quarantine_free for r in rows):
                keys.append(key)
            return row
    return None
