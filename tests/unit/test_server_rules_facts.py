"""The rule history is shared, not copied, by a batch that folds nothing into it (`load_facts(read_only=True)`):
that holds only if `observe` changes it for the types `folds_into_facts` names and no others, and the rule checks
only read it. Both checked on every event of the differential corpus and the scenario vectors, with the history
each event meets in its stream."""

from __future__ import annotations

import ast
import contextlib
import copy
import inspect
from collections.abc import Iterator
from typing import Any

from conftest import differential_corpus, load_differential, load_vector, scenario_names
from settlekit.errors import SettlekitError
from settlekit.jobs import deserialize_state, process_job_events
from settlekit.jobs import server_rules as rules


def _streams() -> Iterator[tuple[str, list[dict[str, Any]]]]:
    for name in differential_corpus():
        yield name, load_differential(name)["events"]
    for name in scenario_names():
        yield name, load_vector(name)["events"]


def test_observe_changes_the_history_only_for_the_types_that_fold_into_it() -> None:
    checked = folded = 0
    for name, events in _streams():
        facts = rules.empty_facts()
        for event in events:
            before = copy.deepcopy(facts)
            rules.observe(facts, event)
            checked += 1
            if facts != before:
                folded += 1
                assert rules.folds_into_facts(event), (name, event["type"])
    assert checked > 5_000 and folded > 500  # the corpus exercises both kinds


def test_the_folding_types_are_the_ones_observe_names() -> None:
    """Every type `observe` compares the event's type with (a literal or a named set) is one `folds_into_facts`
    names, and no other: the two lists cannot drift apart, whatever the corpus exercises."""
    named: set[str] = set()
    for node in ast.walk(ast.parse(inspect.getsource(rules.observe))):
        if isinstance(node, ast.Compare) and isinstance(node.left, ast.Name) and node.left.id == "t":
            for compared in node.comparators:
                if isinstance(compared, ast.Name):
                    named |= getattr(rules, compared.id)
                named |= {c.value for c in ast.walk(compared)
                          if isinstance(c, ast.Constant) and isinstance(c.value, str)}
    assert named == rules._OBSERVED_TYPES
    assert all(rules.folds_into_facts({"type": t}) for t in named)
    assert not rules.folds_into_facts({"type": "JOB_HEARTBEAT"}) and rules.folds_into_facts({"type": ["SETTLED"]})


def test_the_rule_checks_only_read_the_history() -> None:
    checked = 0
    for name, events in _streams():
        stored: dict[str, Any] | None = None
        for event in events:
            if stored is not None:
                state, facts = deserialize_state(stored), rules.load_facts(stored)
                before = copy.deepcopy(facts)
                with contextlib.suppress(SettlekitError):  # a refusal too must leave the history as it was
                    rules.check(state, facts, event)
                assert facts == before, (name, event["type"])
                checked += 1
            try:
                stored = process_job_events(stored, [event]).state
            except SettlekitError:
                break  # the core refused it: the stream ends there for this check
    assert checked > 5_000


def test_a_batch_that_folds_nothing_leaves_the_stored_history_as_it_was() -> None:
    events = load_vector("settle_completed.json")["events"]
    stored = process_job_events(None, events[:9]).state
    kept = copy.deepcopy(stored)
    heartbeat = next(e for e in events if e["type"] == "JOB_HEARTBEAT")
    assert not rules.folds_into_facts(heartbeat)
    after = process_job_events(stored, [heartbeat]).state
    assert stored == kept and after[rules.STATE_KEY] == kept[rules.STATE_KEY]
