"""The latest coverage report per zone and the excused zones (`jobs.zone_coverage`), shared by the artifact fold
(`artifacts.state.FoldState`) and the server rules (`jobs.server_rules.observe`) as settld shares one proof
verifier: edge cases of event ids (0, False, "", None) and of `window.endAt` (unparseable, NaN, Infinity)."""

from __future__ import annotations

from typing import Any

import pytest

from settlekit.artifacts.state import FoldState
from settlekit.errors import ValidationError
from settlekit.events.envelope import check_envelope_shape, finalize, make_draft
from settlekit.jobs import server_rules
from settlekit.jobs.zone_coverage import observe_coverage_report, observe_excuse_incident
from support.streams import ROBOT_ACTOR, StreamBuilder, lifecycle_to_executing

END = "2026-01-05T12:00:00.000Z"
SAME_END = "2026-01-05T12:00:00Z"  # the same instant spelled differently
LATER = "2026-01-05T13:00:00.000Z"
EARLIER = "2026-01-05T11:00:00.000Z"
UNPARSEABLE = ("garbage", "", "Infinity", "-Infinity", "NaN", None, 1767614400000)


def _report(event_id: Any, end: Any, zone: Any = " zone_a ", *, window: Any = None) -> dict[str, Any]:
    return {
        "id": event_id,
        "type": "ZONE_COVERAGE_REPORTED",
        "at": "2026-01-05T12:30:00.000Z",
        "chainHash": f"hash_{event_id!r}_{end!r}",
        "payload": {
            "zoneId": zone,
            "coveragePct": 97,
            "window": window if window is not None else {"startAt": "2026-01-05T10:00:00.000Z", "endAt": end},
        },
    }


def _kept(*events: dict[str, Any]) -> dict[str, dict[str, Any]]:
    coverage: dict[str, dict[str, Any]] = {}
    for event in events:
        observe_coverage_report(coverage, event)
    return coverage


# (kept id, new id, does the new report replace the kept one) for two reports with the same end.
# settld compares `String(id ?? "")`: only a missing id is empty, so 0 and False are ids ("0", "False").
TIES = [
    (None, "evt_a", True),
    ("evt_a", None, False),
    ("", "evt_a", True),
    ("evt_a", "", False),
    (None, 0, True),
    (None, False, True),
    ("", 0, True),
    ("", False, True),
    (0, "", False),
    (False, None, False),
    (0, False, True),  # "False" > "0"
    (False, 0, False),
    (None, None, False),
    ("", "", False),
    (None, "", False),
    ("evt_b", "evt_a", False),
    ("evt_a", "evt_b", True),
    ("evt_\uffff", "evt_\U0001f600", False),  # UTF-16 code units: a surrogate (0xD83D) sorts below 0xFFFF
]


@pytest.mark.parametrize(("kept_id", "new_id", "replaces"), TIES)
def test_equal_ends_break_the_tie_on_the_event_id(kept_id: Any, new_id: Any, replaces: bool) -> None:
    first, second = _report(kept_id, END), _report(new_id, END)
    kept = _kept(first, second)["zone_a"]
    assert kept["eventId"] is (new_id if replaces else kept_id)
    assert kept["chainHash"] == (second if replaces else first)["chainHash"]


@pytest.mark.parametrize(("kept_id", "new_id", "replaces"), TIES)
def test_artifact_fold_breaks_ties_like_the_shared_rule(kept_id: Any, new_id: Any, replaces: bool) -> None:
    # Through the whole fold (job reducer first): the same instant spelled two ways is a tie for the proof verifier.
    b = StreamBuilder(job_id="job_zc", prefix="evt_zc")
    lifecycle_to_executing(b)
    fs = FoldState()
    for event in b.events:
        fs.step(event)
    prev_chain = b.events[-1]["chainHash"]
    for event_id, end in ((kept_id, SAME_END), (new_id, END)):
        draft = make_draft(stream_id=b.job_id, type="ZONE_COVERAGE_REPORTED", actor=ROBOT_ACTOR,
                           payload=_report(None, end)["payload"], at=b.next_at, id="placeholder")
        event = {**finalize(draft, prev_chain), "id": event_id}
        fs.step(event)
        prev_chain = event["chainHash"]
    assert fs.coverage["zone_a"]["eventId"] is (new_id if replaces else kept_id)


@pytest.mark.parametrize(("kept_id", "new_id", "replaces"), [t for t in TIES if type(t[0]) is type(t[1]) is str])
def test_server_rules_break_ties_like_the_shared_rule(kept_id: str, new_id: str, replaces: bool) -> None:
    facts = server_rules.empty_facts()
    server_rules.observe(facts, _report(kept_id, END))
    server_rules.observe(facts, _report(new_id, END))
    assert facts["coverage"] == _kept(_report(kept_id, END), _report(new_id, END))
    assert facts["coverage"]["zone_a"]["eventId"] == (new_id if replaces else kept_id)


@pytest.mark.parametrize("event_id", [0, False, "", None])
def test_server_rule_facts_only_ever_see_nonempty_string_ids(event_id: Any) -> None:
    # The server rules' facts are kept only on the store's append path, where a draft without a usable id gets a
    # generated one and a client-finalized envelope must carry a string id: an id that is falsy but not missing
    # (the one case where `str(id or "")` and settld's `String(id ?? "")` differ) never reaches them.
    draft = make_draft(stream_id="job_x", type="ZONE_COVERAGE_REPORTED", actor=ROBOT_ACTOR, payload={},
                       id=event_id)
    assert type(draft["id"]) is str and draft["id"]
    finalized = {**finalize(draft, None), "id": event_id}
    with pytest.raises(ValidationError, match="id must be"):
        check_envelope_shape(finalized)


@pytest.mark.parametrize("unparseable", UNPARSEABLE)
def test_an_unparseable_end_never_replaces_a_parseable_one(unparseable: Any) -> None:
    # Date.parse gives NaN for all of these (an "Infinity" endAt included: the parsed end is never infinite).
    kept = _kept(_report("evt_a", END), _report("evt_z", unparseable))["zone_a"]
    assert kept["eventId"] == "evt_a"


@pytest.mark.parametrize("unparseable", UNPARSEABLE)
def test_a_parseable_end_replaces_an_unparseable_one(unparseable: Any) -> None:
    kept = _kept(_report("evt_z", unparseable), _report("evt_a", EARLIER))["zone_a"]
    assert kept["eventId"] == "evt_a"


@pytest.mark.parametrize("unparseable", UNPARSEABLE)
def test_two_unparseable_ends_keep_the_first_report(unparseable: Any) -> None:
    # NaN equals nothing, so the event id is never consulted.
    kept = _kept(_report("evt_a", "garbage"), _report("evt_z", unparseable))["zone_a"]
    assert kept["eventId"] == "evt_a"


@pytest.mark.parametrize("window", ["2026-01-05T13:00:00.000Z", ["x"], {"startAt": END}])
def test_a_window_without_an_end_is_unparseable(window: Any) -> None:
    kept = _kept(_report("evt_a", END), _report("evt_z", None, window=window))["zone_a"]
    assert kept["eventId"] == "evt_a"


def test_the_later_end_wins_whatever_the_ids() -> None:
    assert _kept(_report("evt_z", END), _report("evt_a", LATER))["zone_a"]["eventId"] == "evt_a"
    assert _kept(_report("evt_a", END), _report("evt_z", EARLIER))["zone_a"]["eventId"] == "evt_a"
    assert _kept(_report(None, END), _report(0, LATER))["zone_a"]["eventId"] == 0


def test_the_report_is_kept_under_the_trimmed_zone_id() -> None:
    event = _report("evt_a", END, zone="  zone_b\t")
    assert _kept(event) == {
        "zone_b": {
            "eventId": "evt_a",
            "chainHash": event["chainHash"],
            "at": event["at"],
            "coveragePct": 97,
            "window": event["payload"]["window"],
        }
    }


@pytest.mark.parametrize("zone", [None, "", "   ", 7, ["zone_a"]])
def test_a_report_without_a_zone_id_is_ignored(zone: Any) -> None:
    assert _kept(_report("evt_a", END, zone=zone)) == {}


@pytest.mark.parametrize("payload", [None, [], "zone_a"])
def test_a_report_without_a_payload_object_is_ignored(payload: Any) -> None:
    event = {**_report("evt_a", END), "payload": payload}
    assert _kept(event) == {}
    facts = server_rules.empty_facts()
    server_rules.observe(facts, event)
    assert facts["coverage"] == {}


def _incident(payload: Any) -> dict[str, Any]:
    return {"id": "evt_i", "type": "INCIDENT_REPORTED", "at": END, "payload": payload}


def test_excuse_incidents_collect_trimmed_zones_per_type() -> None:
    excused: dict[str, dict[str, bool]] = {}
    for payload in (
        {"type": "BLOCKED_ZONE", "zoneId": " zone_a "},
        {"type": "BLOCKED_ZONE", "zoneId": "zone_b"},
        {"type": "SPILL", "zoneId": "zone_a"},
        {"type": "", "zoneId": "zone_c"},
        {"type": 1, "zoneId": "zone_c"},
        {"type": "BLOCKED_ZONE", "zoneId": "  "},
        {"type": "BLOCKED_ZONE"},
    ):
        observe_excuse_incident(excused, _incident(payload))
    observe_excuse_incident(excused, _incident(None))
    assert excused == {"BLOCKED_ZONE": {"zone_a": True, "zone_b": True}, "SPILL": {"zone_a": True}}


def test_server_rules_collect_excused_zones_with_the_shared_rule() -> None:
    facts = server_rules.empty_facts()
    server_rules.observe(facts, _incident({"incidentId": "inc_1", "type": "BLOCKED_ZONE", "zoneId": " zone_a "}))
    server_rules.observe(facts, _incident({"incidentId": "inc_2", "type": "", "zoneId": "zone_b"}))
    assert facts["excused"] == {"BLOCKED_ZONE": {"zone_a": True}}
    assert set(facts["incidents"]) == {"inc_1", "inc_2"}
