"""Server drafts completed and judged as settld's events route completes and judges them, against the reference's
own outcomes (tests/vectors/reference_runs/server_drafts.json.gz, made by tests/reference/draft_xcheck.py): the
stored payload of every draft settld accepts, and the refusal message of every draft it refuses."""

from __future__ import annotations

import gzip
from typing import Any

import pytest

from conftest import VECTORS
from settlekit.events.canonical import canonical_json, parse_json
from support.server_drafts import DELIBERATE_REFUSALS, comparable, settlekit_outcome

BUNDLE: dict[str, Any] = parse_json(
    gzip.decompress((VECTORS / "reference_runs" / "server_drafts.json.gz").read_bytes()).decode("utf-8"))
CASES: list[dict[str, Any]] = BUNDLE["cases"]


def _id(case: dict[str, Any]) -> str:
    return f"{case['stream']}@{case['prefix']}+{len(case['extra'])}-{case['draft']['type']}" if "extra" in case \
        else f"{case['stream']}@{case['prefix']}-{case['draft']['type']}"


@pytest.mark.parametrize("case", CASES, ids=[f"{i}-{_id(c)}" for i, c in enumerate(CASES)])
def test_a_server_draft_is_completed_and_judged_as_settlds_route_does(case: dict[str, Any]) -> None:
    mine = settlekit_outcome(case, BUNDLE["now"])
    theirs = case["settld"]
    if theirs["status"] != 201:
        assert not mine["accepted"] and mine["message"] == theirs["message"]
    elif not mine["accepted"]:
        assert mine["message"] in DELIBERATE_REFUSALS  # settlekit's live payload checks (README)
    else:
        assert canonical_json(comparable(mine["payload"], case["draft"])) == canonical_json(
            comparable(theirs["payload"], case["draft"]))


def _settled(gated: bool) -> list[dict[str, Any]]:
    return [c for c in CASES if c["draft"]["type"] == "SETTLED" and c["settld"]["status"] == 201
            and isinstance(c["settld"]["payload"], dict)
            and ("settlementProofRef" in c["settld"]["payload"]) is gated]


def test_under_proof_gating_the_fresh_proofs_reference_replaces_the_clients() -> None:
    """settld writes the fresh proof's reference over a client's (an object, null, a string) and over a payload
    that is not an object; the bundle holds such drafts, and settlekit stores what settld stores."""
    replaced = [c for c in _settled(gated=True)
                if isinstance(c["draft"]["payload"], dict) and "settlementProofRef" in c["draft"]["payload"]
                and c["draft"]["payload"]["settlementProofRef"] != c["settld"]["payload"]["settlementProofRef"]]
    assert len(replaced) >= 10
    for case in replaced:
        assert settlekit_outcome(case, BUNDLE["now"])["payload"] == case["settld"]["payload"]


def test_without_proof_gating_a_settled_draft_is_stored_as_it_came() -> None:
    """No reference is added (not even when a proof was evaluated), and a client's is kept as it is."""
    plain = [c for c in CASES if c["draft"]["type"] == "SETTLED" and c["settld"]["status"] == 201
             and c["settld"]["payload"] == c["draft"]["payload"]]
    assert len(plain) >= 100
    for case in plain:
        mine = settlekit_outcome(case, BUNDLE["now"])
        assert mine["payload"] == case["draft"]["payload"]


def test_the_bundle_holds_forfeit_drafts_after_a_decision_without_a_hold_id() -> None:
    """A stored forfeit decision with no holdId (or a null one) before a forfeiture draft that finds no hold:
    settld refuses the draft for its missing holdId before any decision reference matters, and so does
    settlekit."""
    cases = [c for c in CASES if c["draft"]["type"] == "SETTLEMENT_FORFEITED" and c.get("extra")
             and "holdId" not in c["extra"][0]["payload"]
             and c["settld"]["message"] == "payload.holdId must be a non-empty string"]
    assert len(cases) >= 10
    for case in cases:
        assert settlekit_outcome(case, BUNDLE["now"])["message"] == "payload.holdId must be a non-empty string"
