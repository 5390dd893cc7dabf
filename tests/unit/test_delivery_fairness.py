"""The fair deal of due deliveries between tenants and destinations (`delivery.fairness.allocate`) and the circuit
breaker's moves (`delivery.circuit.after_attempts`): invariants as properties, the dealing order by example."""

from __future__ import annotations

from collections import Counter
from datetime import UTC, datetime, timedelta

from hypothesis import given, settings
from hypothesis import strategies as st

from settlekit.delivery import circuit
from settlekit.delivery.circuit import CircuitPolicy
from settlekit.delivery.fairness import Caps, allocate, quarantined
from settlekit.store.deliveries import Circuit, DueDelivery

T0 = datetime(2026, 1, 1, tzinfo=UTC)


def due(tenant: str, destination: str, n: int, *, start: int = 0, age: float = 0.0, probing: bool = False,
        claims: int = 0) -> list[DueDelivery]:
    return [DueDelivery(tenant, destination, probing, start + i, T0 + timedelta(seconds=age + i), claims)
            for i in range(n)]


def test_tenants_and_destinations_take_turns_longest_waiting_first() -> None:
    rows = (due("a", "slow", 4, start=0, age=0) + due("a", "other", 4, start=10, age=1)
            + due("b", "d", 4, start=20, age=5))
    picks = allocate(rows, slots=6, caps=Caps(), busy_destinations={}, busy_tenants={}, quarantine_free=True)
    assert [(p.tenant_id, p.destination_id) for p in picks] == [
        ("a", "slow"), ("b", "d"), ("a", "other"), ("b", "d"), ("a", "slow"), ("b", "d")]


def test_a_destination_at_its_cap_and_a_tenant_at_its_cap_get_nothing_more() -> None:
    rows = due("a", "slow", 4) + due("a", "x", 4, start=10) + due("b", "d", 4, start=20)
    picks = allocate(rows, slots=64, caps=Caps(per_destination=4, per_tenant=6),
                     busy_destinations={("a", "slow"): 4}, busy_tenants={"a": 5}, quarantine_free=True)
    assert Counter(p.destination_id for p in picks) == {"x": 1, "d": 4}


def test_a_half_open_circuit_gets_one_probe_and_a_quarantined_delivery_goes_alone() -> None:
    rows = (due("a", "probe", 3, probing=True) + due("b", "d", 2, start=10, claims=2)
            + due("b", "d", 1, start=20, claims=1) + due("b", "d", 1, start=30))
    picks = allocate(rows, slots=64, caps=Caps(), busy_destinations={}, busy_tenants={}, quarantine_free=True)
    assert sum(p.destination_id == "probe" for p in picks) == 1
    assert sum(quarantined(p.claims) for p in picks) == 1
    assert sum(p.claims == 1 for p in picks) == 1  # claimed once before (a killed worker's): as usual
    none_quarantined = allocate(rows, slots=64, caps=Caps(), busy_destinations={}, busy_tenants={},
                                quarantine_free=False)
    assert not any(quarantined(p.claims) for p in none_quarantined) and len(none_quarantined) == 3


@st.composite
def scenes(draw: st.DrawFn) -> tuple[list[DueDelivery], Caps, dict[tuple[str, str], int], dict[str, int], int]:
    caps = Caps(in_flight=64, per_destination=draw(st.integers(1, 6)), per_tenant=draw(st.integers(1, 20)))
    rows: list[DueDelivery] = []
    busy_d: dict[tuple[str, str], int] = {}
    busy_t: Counter[str] = Counter()
    next_id = 0
    for t in range(draw(st.integers(1, 5))):
        for d in range(draw(st.integers(1, 4))):
            n = draw(st.integers(0, caps.per_destination))
            probing = draw(st.booleans())
            for _ in range(n):
                rows.append(DueDelivery(f"t{t}", f"d{d}", probing, next_id,
                                        T0 + timedelta(seconds=draw(st.integers(0, 100))),
                                        draw(st.sampled_from([0, 0, 0, 1, 2]))))
                next_id += 1
            busy = draw(st.integers(0, caps.per_destination))
            if busy:
                busy_d[(f"t{t}", f"d{d}")] = busy
                busy_t[f"t{t}"] += busy
    return rows, caps, busy_d, dict(busy_t), draw(st.integers(0, 64))


@settings(max_examples=300, deadline=None)
@given(scenes(), st.booleans())
def test_the_deal_keeps_every_cap(scene: tuple[list[DueDelivery], Caps, dict[tuple[str, str], int],
                                               dict[str, int], int], quarantine_free: bool) -> None:
    rows, caps, busy_d, busy_t, slots = scene
    picks = allocate(rows, slots=slots, caps=caps, busy_destinations=busy_d, busy_tenants=busy_t,
                     quarantine_free=quarantine_free)
    assert len(picks) <= slots and len({p.id for p in picks}) == len(picks)
    assert sum(quarantined(p.claims) for p in picks) <= (1 if quarantine_free else 0)
    per_dest = Counter((p.tenant_id, p.destination_id) for p in picks)
    for key, n in per_dest.items():
        cap = 1 if any(r.probing for r in rows if (r.tenant_id, r.destination_id) == key) else caps.per_destination
        assert n + busy_d.get(key, 0) <= max(cap, busy_d.get(key, 0))
    for tenant, n in Counter(p.tenant_id for p in picks).items():
        assert n + busy_t.get(tenant, 0) <= max(caps.per_tenant, busy_t.get(tenant, 0))
    # work-conserving: a slot is left free only when no eligible delivery was left out
    if len(picks) < slots:
        left = [r for r in rows if r not in picks and (not quarantined(r.claims) or (quarantine_free and not any(
            quarantined(p.claims) for p in picks)))]
        for r in left:
            key = (r.tenant_id, r.destination_id)
            cap = 1 if r.probing else caps.per_destination
            assert (per_dest[key] + busy_d.get(key, 0) >= cap
                    or sum(p.tenant_id == r.tenant_id for p in picks) + busy_t.get(r.tenant_id, 0) >= caps.per_tenant)


def test_the_circuit_opens_after_the_threshold_probes_and_doubles() -> None:
    policy = CircuitPolicy(threshold=3, probe=timedelta(seconds=30), probe_max=timedelta(seconds=100))
    c = circuit.after_attempts(Circuit(), [False, False], policy, T0)
    assert c == Circuit(2, 0, None) and circuit.state(c, T0) == "closed"
    c = circuit.after_attempts(c, [False, False], policy, T0)  # the 3rd opens it; the 4th (in flight) counts
    assert c == Circuit(4, 1, T0 + timedelta(seconds=30)) and circuit.state(c, T0) == "open"
    later = T0 + timedelta(seconds=31)
    assert circuit.state(c, later) == "half_open"
    c = circuit.after_attempts(c, [False], policy, later)  # the probe failed: twice as long
    assert c == Circuit(5, 2, later + timedelta(seconds=60))
    c = circuit.after_attempts(c, [False], policy, later + timedelta(seconds=61))  # capped
    assert c.open_until == later + timedelta(seconds=161) and c.opens == 3
    assert circuit.after_attempts(c, [True], policy, later) == Circuit()  # any answer closes it
    assert circuit.after_attempts(Circuit(), [False] * 10, CircuitPolicy(threshold=0), T0).open_until is None


@given(st.lists(st.booleans(), max_size=40))
def test_a_circuit_is_closed_exactly_when_the_last_attempt_was_answered(answers: list[bool]) -> None:
    c = circuit.after_attempts(Circuit(), answers, CircuitPolicy(threshold=2), T0)
    if answers and answers[-1]:
        assert c == Circuit()
    assert c.failures == len(answers) - (max(i for i, a in enumerate(answers) if a) + 1 if any(answers) else 0)
