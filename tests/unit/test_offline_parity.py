"""Streams settld 0.1.0 accepts that the earlier corpora never held, against settld's own offline answers
(`vectors/reference_runs/offline_parity.json.gz`, made by `tests/reference/offline_parity.py`, README there): a
JOB_CREATED again mid-stream, unknown and other streams' event types, signatures in every base64 spelling node
reads (and empty ones), "__proto__" and integer-like keys, payloads nested thousands of levels deep, `at` spellings
`Date.parse` reads, ids and envelopes the live path refuses. For each: `verify`'s verdict, the ledger entries and
posting errors, the reduced job, the outbox and every artifact, byte for byte (own "__proto__" keys included, as
settld's JSON.stringify writes them)."""

from __future__ import annotations

import functools
import gzip
import json
import re
from pathlib import Path
from typing import Any

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st
from typer.testing import CliRunner

from conftest import VECTORS, differential_corpus
from settlekit.artifacts.build import build_all, derive_outbox
from settlekit.cli import app
from settlekit.errors import VerificationError
from settlekit.events.canonical import canonical_json, parse_json
from settlekit.events.envelope import finalize, verify_chain
from settlekit.jobs import process_job_events
from support.huge_streams import corpus_stream, huge_stream, stream_digest

BUNDLE = VECTORS / "reference_runs" / "offline_parity.json.gz"
_INDEX = re.compile(r" at index (\d+)$")
runner = CliRunner()


@functools.cache
def _bundle() -> dict[str, Any]:
    value: dict[str, Any] = parse_json(gzip.decompress(BUNDLE.read_bytes()).decode("utf-8"))
    return value


def _text(value: Any) -> str:
    return canonical_json(value, keep_proto=True)


def _verdict(events: list[dict[str, Any]], keys: dict[str, str]) -> tuple[bool, int | None]:
    try:
        verify_chain(events, keys)
    except VerificationError as exc:
        return False, exc.index
    return True, None


def compare(events: list[dict[str, Any]], answer: dict[str, Any], keys: dict[str, str] | None = None,
            generated_at: str = "2026-02-01T00:00:00.000Z") -> list[str]:
    """What settlekit's offline tools answer differently from settld's answer for one stream."""
    found: list[str] = []
    reference = answer["verify"]
    index = _INDEX.search(reference.get("error") or "")
    if _verdict(events, keys if keys is not None else _bundle()["keys"]) != (
            reference["ok"], int(index.group(1)) if index else None):
        found.append(f"verify ({reference})")
    result = process_job_events(None, events)
    if _text(result.ledger_entries) != _text(answer["entries"]):
        found.append("ledger entries")
    if [(x["eventId"], x["error"]["message"]) for x in result.ledger_errors] != [
            (x["eventId"], x["message"]) for x in answer["errors"]]:
        found.append("posting errors")
    if _text(result.snapshot) != _text(answer["job"]):
        found.append("job")
    if derive_outbox(events) != answer["outbox"]:
        found.append("outbox")
    built = build_all(events, generated_at=generated_at)
    if [_text(a) for a in built] != [_text(a) for a in answer["artifacts"]]:
        found.append("artifacts")
    return found


def _runs() -> list[dict[str, Any]]:
    """The vendored runs; a long stream's events are made again (`support.huge_streams`), checked by digest."""
    runs = []
    for run in _bundle()["runs"] if BUNDLE.exists() else []:
        if "huge" in run:
            recipe = run["huge"]
            events = huge_stream(corpus_stream(differential_corpus(), recipe["base"]), recipe["extra"])
            assert stream_digest(events) == recipe["eventsSha256"], "the long stream is not the one answered for"
            run = {**run, "events": events}
        runs.append(run)
    return runs


RUNS = _runs()


def test_every_dimension_is_there() -> None:
    assert len(RUNS) >= 100
    for dimension in ("restart", "foreign", "signatures", "keys", "deep", "at", "envelope"):
        assert sum(dimension in run["dimensions"] for run in RUNS) >= 10, dimension
    assert [len(run["events"]) for run in RUNS if run["dimensions"] == ["huge"]] >= [2500, 5000]
    assert any(not run["verify"]["ok"] for run in RUNS)  # a broken signature now and then


@pytest.mark.parametrize("run", RUNS, ids=[f"op{i}" for i in range(len(RUNS))])
def test_the_offline_tools_answer_as_settld(run: dict[str, Any]) -> None:
    assert compare(run["events"], run, generated_at=_bundle()["generatedAt"]) == []


def _cli_runs() -> list[dict[str, Any]]:
    """A few runs for the command line: one whose CoverageCertificate's credit policy holds an own "__proto__" key,
    one with a deeply nested payload, one that restarts, one with foreign types, one that fails verification."""
    def proto(run: dict[str, Any]) -> bool:
        return any(a["artifactType"] == "CoverageCertificate.v1" and "__proto__" in (
            a["coverage"]["creditPolicy"] or {}) for a in run["artifacts"])
    picks = [next(r for r in RUNS if proto(r))]
    for dimension in ("deep", "restart", "foreign"):
        picks.append(next(r for r in RUNS if r["dimensions"] == [dimension]))
    picks.append(next(r for r in RUNS if not r["verify"]["ok"]))
    return picks


@pytest.mark.parametrize("run", _cli_runs() if RUNS else [], ids=["proto", "deep", "restart", "foreign", "broken"])
def test_the_commands_print_what_settld_computes(run: dict[str, Any], tmp_path: Path) -> None:
    """`settlekit verify`, `ledger postings`, `artifacts outbox` and `artifacts build-all` on the stream file: the
    artifacts printed are settld's body (own "__proto__" keys kept), the file read at any depth node reads."""
    stream = tmp_path / "stream.json"
    stream.write_text(_text(run["events"]), encoding="utf-8")
    keys = tmp_path / "keys.json"
    keys.write_text(_text(_bundle()["keys"]), encoding="utf-8")
    verified = runner.invoke(app, ["verify", str(stream), "--keys", str(keys)])
    assert (verified.exit_code == 0) is run["verify"]["ok"], verified.output
    assert json.loads(verified.stdout)["ok"] is run["verify"]["ok"]
    built = runner.invoke(app, ["artifacts", "build-all", "--events", str(stream), "--generated-at",
                                _bundle()["generatedAt"]])
    assert built.exit_code == 0, built.output
    assert built.stdout == _text(run["artifacts"]) + "\n"
    outbox = runner.invoke(app, ["artifacts", "outbox", "--events", str(stream)])
    assert parse_json(outbox.stdout) == run["outbox"]
    if run["verify"]["ok"] and run["artifacts"]:  # settld's artifacts check against the stream, as built
        for artifact in (run["artifacts"][0], run["artifacts"][-1]):
            path = tmp_path / "artifact.json"
            path.write_text(_text(artifact), encoding="utf-8")
            checked = runner.invoke(app, ["verify", str(stream), "--keys", str(keys), "--artifact", str(path)])
            assert checked.exit_code == 0, checked.output
            assert json.loads(checked.stdout)["ok"] is True
    postings = runner.invoke(app, ["ledger", "postings", "--events", str(stream)])
    assert postings.exit_code == 0, postings.output
    lines = [parse_json(line) for line in postings.stdout.splitlines()]
    assert [(x["eventId"], x["entry"]) for x in lines if "entry" in x] == [
        (x["eventId"], x["entry"]) for x in run["entries"]]


_CORPUS_NAMES = sorted(differential_corpus())
_MOVING = ("revision", "updatedAt", "lastChainHash", "lastEventId")
_DRAFT = ("v", "id", "at", "streamId", "type", "actor", "payload")
_NOTE_TYPES = ["NOTE_ADDED", "ROBOT_HEARTBEAT", "SETTLED ", "settled", "MONTH_CLOSED"]


def _renamed(value: Any, names: dict[str, str]) -> Any:
    """`value` with every string that is a key of `names` replaced by its value (the corpus's payloads are shallow)."""
    if isinstance(value, str):
        return names.get(value, value)
    if isinstance(value, list):
        return [_renamed(v, names) for v in value]
    if isinstance(value, dict):
        return {k: _renamed(v, names) for k, v in value.items()}
    return value


def _rechained(events: list[dict[str, Any]], reanchor: bool = True) -> list[dict[str, Any]]:
    """The events chained again in their order. With `reanchor`, as settld's server would have written them: a
    payload that names an earlier event by its chainHash or payloadHash (a proof's evaluatedAtChainHash, a
    settlementProofRef's proofEventChainHash, a forfeit's decisionEventPayloadHash...) names it as chained again.
    An event without hashes (a draft) names nothing and is named by nothing."""
    out: list[dict[str, Any]] = []
    prev: str | None = None
    names: dict[str, str] = {}
    for e in events:
        draft = {k: e[k] for k in _DRAFT}
        if reanchor:
            draft["payload"] = _renamed(draft["payload"], names)
        out.append(finalize(draft, prev))
        prev = out[-1]["chainHash"]
        if reanchor and "chainHash" in e:
            names[e["chainHash"]], names[e["payloadHash"]] = out[-1]["chainHash"], out[-1]["payloadHash"]
    return out


def _with_notes(events: list[dict[str, Any]], notes: list[tuple[float, str]]) -> list[dict[str, Any]]:
    """`events` with one draft of type t inserted for each (where, t), at `where` of the stream after the
    JOB_CREATED, with the actor and time of the event before it."""
    out = list(events)
    for n, (where, t) in enumerate(notes):
        i = 1 + int(where * (len(out) - 1))
        out.insert(i, {**{k: out[i - 1][k] for k in ("v", "at", "streamId", "actor")},
                       "id": f"evt_note_{n}", "type": t, "payload": {"note": n}})
    return out


@settings(max_examples=100, deadline=None, database=None, derandomize=True)
@given(st.sampled_from(_CORPUS_NAMES), st.lists(st.tuples(st.floats(0, 1), st.sampled_from(_NOTE_TYPES)),
                                                min_size=1, max_size=6))
@example("d048_proof", [(0.78, "NOTE_ADDED")])  # before the completion: INSUFFICIENT_EVIDENCE, still
@example("d056_holds", [(0.66, "MONTH_CLOSED")])  # before the completion: still the no-charge SETTLED entry
@example("d059_holds", [(0.1, "settled"), (0.5, "SETTLED "), (0.9, "ROBOT_HEARTBEAT")])  # hold, forfeit
def test_an_unknown_type_anywhere_changes_nothing_but_the_revision(name: str, notes: list[tuple[float, str]]) -> None:
    """settld's reducer counts an event outside its transition table as a revision and nothing else: inserted
    anywhere after the JOB_CREATED, such events leave the ledger, the posting errors, the outbox's sources and the
    job (but its revision and head) as they were, once the stream is written as settld's server would have
    written it with them in place.

    That last part is settld's, not the test's convenience: settld names events by hash in later payloads (a
    PROOF_EVALUATED's evaluatedAtChainHash is the latest completion's chainHash; a hold's or a SETTLED's
    settlementProofRef names the proof and the forfeit by chainHash and payloadHash), and its posting rules count
    a proof only for the latest completion's chainHash. An event inserted before a completion moves that hash, so
    a payload kept as it was names a hash no event has: the proof is stale, and SETTLED meets "requires
    settlementProofRef (or PROOF_EVALUATED)" instead of its proof's verdict (see the next test). So each payload
    here names the events it named as chained again, and the job is compared with their hashes named back."""
    base = _rechained(parse_json(differential_corpus()[name])["events"])
    events = _rechained(_with_notes(base, notes))
    old = {e["id"]: e for e in base}
    back = {}
    for e in events:
        if e["id"] in old:
            back[e["chainHash"]], back[e["payloadHash"]] = old[e["id"]]["chainHash"], old[e["id"]]["payloadHash"]
    before, after = process_job_events(None, base), process_job_events(None, events)
    assert _renamed([(x["eventId"], x["entry"]) for x in after.ledger_entries], back) == [
        (x["eventId"], x["entry"]) for x in before.ledger_entries]
    assert _renamed(after.ledger_errors, back) == before.ledger_errors
    assert _renamed({k: v for k, v in after.snapshot.items() if k not in _MOVING}, back) == {
        k: v for k, v in before.snapshot.items() if k not in _MOVING}
    assert after.snapshot["revision"] == before.snapshot["revision"] + len(notes)
    sources = [(m["sourceEventId"], m["artifactTypes"]) for m in derive_outbox(base)]
    assert [(m["sourceEventId"], m["artifactTypes"]) for m in derive_outbox(events)] == sources


_PROOF_REQUIRED = "SETTLED requires settlementProofRef (or PROOF_EVALUATED) in strict/holdback mode"
_PROOF_INSUFFICIENT = "SETTLED cannot proceed with INSUFFICIENT_EVIDENCE in strict/holdback mode"


@pytest.mark.parametrize(("name", "where", "before_settled", "after_settled"), [
    # INSUFFICIENT_EVIDENCE before; an unknown event before the completion leaves the proof naming a hash no
    # event has: no proof for the latest completion
    ("d048_proof", 14, _PROOF_INSUFFICIENT, _PROOF_REQUIRED),
    ("d048_proof", 1, _PROOF_INSUFFICIENT, _PROOF_REQUIRED),
    # FAIL before (the no-charge entry, escrow back to cash); then no entry, no proof
    ("d056_holds", 12, "job:job_d056_holds SETTLED (no-charge)", _PROOF_REQUIRED),
    ("d045_proof", 5, "job:job_d045_proof SETTLED (no-charge)", _PROOF_REQUIRED),
    # PASS before; then no entry, no proof
    ("d050_proof", 8, "job:job_d050_proof SETTLED", _PROOF_REQUIRED),
    # after the completion: its chainHash stays, and so does the proof's verdict
    ("d048_proof", 15, _PROOF_INSUFFICIENT, _PROOF_INSUFFICIENT),
    ("d056_holds", 13, "job:job_d056_holds SETTLED (no-charge)", "job:job_d056_holds SETTLED (no-charge)"),
])
def test_a_proof_is_stale_once_an_event_before_its_completion_moves_the_anchor(
        name: str, where: int, before_settled: str, after_settled: str) -> None:
    """An unknown event inserted with the later payloads kept as they were (not re-anchored): what SETTLED posts
    or meets, before and after, as settld 0.1.0's posting rules answer for the same streams
    (tests/reference/offline_parity.mjs): the proof counts only while the completion keeps its chainHash."""
    base = parse_json(differential_corpus()[name])["events"]
    events = list(base)
    events.insert(where, {**{k: base[where - 1][k] for k in ("v", "at", "streamId", "actor")},
                          "id": "evt_note_0", "type": "NOTE_ADDED", "payload": {"note": 0}})

    def settled(stream: list[dict[str, Any]]) -> str:
        result = process_job_events(None, _rechained(stream, reanchor=False))
        found = [x["entry"]["memo"] for x in result.ledger_entries if x["eventType"] == "SETTLED"]
        found += [x["error"]["message"] for x in result.ledger_errors if x["eventType"] == "SETTLED"]
        assert len(found) == 1, found
        return found[0]

    assert (settled(base), settled(events)) == (before_settled, after_settled)
