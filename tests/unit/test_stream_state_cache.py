"""The stream cache (append.state_cache) keeps the state object a domain step made and gives it to the next step.
That is sound only if the job domain never changes the state it is given (an append that fails must leave the
entry as it was) and if the state object equals what a read of its stored JSON gives (types included: a read after
a restart must judge the next event alike). Both shown on the reference corpora, every event in turn, on the
live and the recorded paths. Then the cache's own rules."""

from __future__ import annotations

import copy
from typing import Any

from conftest import VECTORS, differential_corpus, load_differential, scenario_names
from settlekit.append.jobs import JobStreamDomain
from settlekit.append.state_cache import CachedStream, StreamStateCache
from settlekit.errors import SettlekitError
from settlekit.events.canonical import parse_json, storable_json
from settlekit.store.streams import StreamHead


def _same(a: Any, b: Any, path: str = "$") -> str | None:
    """Where `a` and `b` differ, types and key order included (None: nowhere)."""
    if type(a) is not type(b):
        return f"{path}: {type(a).__name__} vs {type(b).__name__}"
    if isinstance(a, dict):
        if list(a) != list(b):
            return f"{path}: keys"
        return next((d for k in a if (d := _same(a[k], b[k], f"{path}.{k}")) is not None), None)
    if isinstance(a, list):
        if len(a) != len(b):
            return f"{path}: length"
        return next((d for i, (x, y) in enumerate(zip(a, b, strict=True))
                     if (d := _same(x, y, f"{path}[{i}]")) is not None), None)
    return None if a == b or (a != a and b != b) else f"{path}: {a!r} vs {b!r}"


def _streams() -> list[tuple[str, list[dict[str, Any]]]]:
    out = [(name, load_differential(name)["events"]) for name in differential_corpus()]
    out += [(name, parse_json((VECTORS / name).read_text())["events"]) for name in scenario_names()]
    return out


def test_the_job_domain_neither_changes_its_state_nor_keeps_what_its_json_loses() -> None:
    steps = refusals = 0
    for live in (False, True):
        domain = JobStreamDomain(server_rules=live)
        for name, events in _streams():
            state: dict[str, Any] | None = None
            for seq, event in enumerate(events, start=1):
                before = copy.deepcopy(state)
                try:
                    outcome = domain.process("tenant_default", event["streamId"], state, [event], seq,
                                             recorded=not live)
                except SettlekitError:
                    refusals += 1
                    assert _same(before, state) is None, (name, seq, "changed by a refused step")
                    break
                steps += 1
                assert _same(before, state) is None, (name, seq, _same(before, state))
                if outcome.snapshot is not None:
                    stored = parse_json(storable_json(outcome.snapshot))
                    assert _same(stored, outcome.snapshot) is None, (name, seq, _same(stored, outcome.snapshot))
                    state = outcome.snapshot
    assert steps > 10_000 and refusals > 0  # both kinds of step were seen


def _entry(stream: str, seq: int, key_ids: frozenset[str] = frozenset()) -> CachedStream:
    head = StreamHead(stream, "job", seq, f"h{seq}", f"e{seq}")
    return CachedStream("t", stream, head, {"seq": seq}, {}, key_ids)


def test_the_cache_keeps_the_latest_head_of_the_streams_used_last() -> None:
    cache = StreamStateCache(2)
    cache.put(_entry("a", 2), 10)
    cache.put(_entry("a", 1), 10)  # an older head never replaces a newer one
    assert (entry := cache.get("t", "a", ())) is not None and entry.head.seq == 2
    cache.put(_entry("b", 1), 10)
    cache.get("t", "a", ())
    cache.put(_entry("c", 1), 10)  # b was used least recently
    assert cache.get("t", "b", ()) is None and len(cache) == 2
    assert cache.get("other tenant", "a", ()) is None
    cache.drop("t", "a")
    assert cache.get("t", "a", ()) is None
    assert len(StreamStateCache(0)) == 0
    off = StreamStateCache(0)
    off.put(_entry("a", 1), 10)
    assert off.get("t", "a", ()) is None


def test_an_entry_serves_only_the_signer_keys_it_looked_up() -> None:
    cache = StreamStateCache()
    cache.put(_entry("a", 1, frozenset({"k1", "k2"})), 10)
    assert cache.get("t", "a", {"k1"}) is not None
    assert cache.get("t", "a", {"k1", "k3"}) is None  # k3 was not looked up: read it


def test_the_states_held_stay_within_their_byte_budget() -> None:
    cache = StreamStateCache(100, max_bytes=1600)
    for n in range(10):
        cache.put(_entry(f"s{n}", 1), 100)
    assert len(cache) == 10 and cache.stored_bytes == 1000
    cache.put(_entry("s0", 2), 50)  # the stream's new state replaces its old one
    assert cache.stored_bytes == 950
    for n in range(10, 20):
        cache.put(_entry(f"s{n}", 1), 100)
    assert cache.stored_bytes <= 1600 and cache.get("t", "s1", ()) is None  # the least recently used went first
    cache.put(_entry("s19", 2), 101)  # more than a sixteenth of the budget: the stream is not kept at all
    assert cache.get("t", "s19", ()) is None and cache.stored_bytes <= 1600
    held = len(cache)
    cache.drop("t", "s18")
    # s0, put again, was more recent than s1..s9: it is still held, at its 50 bytes
    assert len(cache) == held - 1 and cache.stored_bytes == 50 + 100 * (held - 2)
