"""Mutation differential against the settld 0.1.0 reference (a tool, not collected by pytest).

Takes random differential-corpus streams, mutates them (payload numbers perturbed, often near 2**53; events
dropped, duplicated, swapped or copied in from other streams; times shifted; with `--shapes`, payload fields set to
another JSON kind or value or removed, keeping only payloads settld's API validators accept, as
`check_api_payload` judges them, which answers as node does), re-chains them unsigned, and runs
them through the reference under node (ledger_xcheck.mjs, artifacts_xcheck.mjs) and through settlekit's offline
core. Where both accept a stream it compares ledger entries, posting errors, outbox and artifact bytes; where
either refuses, it compares where. Streams that differ are written to OUT for a closer look (and, once fixed, for
tests/vectors/reference_runs/).

    python tests/reference/mutation_campaign.py SETTLD_DIR [--streams 500] [--seed 1] [--out /tmp/mutations]
        [--shapes 0.0..1.0: the share of streams that get payload-shape mutations instead] [--replay]
        [--names STREAM...] [--focus EVENT_TYPE...] [--spell 0.0..1.0]

With `--spell RATE`, the streams file both sides read is written as clients' JSON writers spell JSON
(`json_spellings.ClientWriter`, RATE the share of tokens spelled unusually: numbers with fractions and exponents,
escapes, white space, reordered and duplicate keys), and settlekit reads its streams from that text
(`parse_json`) as the reference does (JSON.parse).
"""

from __future__ import annotations

import argparse
import copy
import json
import random
import subprocess
import sys
import tempfile
from collections import Counter
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))
sys.path.insert(0, str(HERE))
from json_spellings import ClientWriter  # noqa: E402

from conftest import differential_corpus  # noqa: E402
from settlekit.artifacts.build import build_all, derive_outbox  # noqa: E402
from settlekit.errors import SettlekitError  # noqa: E402
from settlekit.events.canonical import canonical_json, js_int, parse_json  # noqa: E402
from settlekit.events.envelope import finalize  # noqa: E402
from settlekit.jobs import process_job_events  # noqa: E402
from settlekit.jobs.api_payloads import check_api_payload  # noqa: E402

GENERATED_AT = "2026-02-01T00:00:00.000Z"
NUMBERS = [0, 1, -1, 2, 3, 5, 7, 49, 50, 51, 99, 100, 101, 333, 999, 1000, 1001, 12345, 2**31, 10**12, 10**15,
           3 * 10**15, 2**52 + 1, 2**53 - 1, 2**53 - 1]
SHIFTS = [-86400 * 40, -3600, -1, 1, 3600, 86400 * 3, 86400 * 40]
ENVELOPE_DRAFT_FIELDS = ("v", "id", "at", "streamId", "type", "actor", "payload")
REMOVED = object()
SHAPES: list[Any] = [[], {}, "x", "", " ", 7, 0, -1, 0.5, True, False, None, {"a": {"b": [1, "x"]}}, ["x", 7],
                     [None], REMOVED, "2026-01-05T10:00:00.000Z", "USD", "PASS", "FAIL", 2**53 - 1]
# Fields settlekit's own payload checks read, worth setting where the corpus event leaves them out.
EXTRA_FIELDS: dict[str, tuple[str, ...]] = {
    "JOB_CREATED": ("customerId", "siteId", "contractId", "constraints", "templateId"),
    "QUOTE_PROPOSED": ("amountCents", "currency", "breakdown"),
    "MATCHED": ("operatorCompilerId", "operatorContractHash", "operatorPolicyHash", "robotId"),
    "SETTLED": ("settlementProofRef",),
    "SETTLEMENT_HELD": ("holdId", "exposure", "reasonCodes", "missingEvidence", "currency"),
    "SETTLEMENT_RELEASED": ("holdId", "releasedAt"),
    "SETTLEMENT_FORFEITED": ("holdId", "forfeitedAt"),
    "DISPUTE_OPENED": ("disputeId", "reason"),
    "DISPUTE_CLOSED": ("disputeId", "resolution"),
    "BOOKED": ("customerCompilerId", "requiredZonesHash", "sla", "policySnapshot", "contractVersion"),
}


class Mutator:
    def __init__(self, rnd: random.Random, names: list[str], focus: frozenset[str] = frozenset()):
        self.rnd = rnd
        self.names = names
        self.focus = focus  # event types the shape mutations pick (all when empty)

    def number(self, x: Any) -> Any:
        """A perturbed integer, as JavaScript would read it from the stream's JSON (a double past 2**53)."""
        if type(x) is not int:
            return x
        r = self.rnd.random()
        if r < 0.3:
            return self.rnd.choice(NUMBERS)
        if r < 0.5:
            return js_int(str(x * self.rnd.choice([2, 3, 10, -1])))
        if r < 0.7:
            return js_int(str(x + self.rnd.choice([-1, 1, -100, 100])))
        return x

    def value(self, x: Any) -> Any:
        if isinstance(x, dict):
            return {k: self.value(v) if self.rnd.random() < 0.4 else v for k, v in x.items()}
        if isinstance(x, list):
            return [self.value(v) if self.rnd.random() < 0.4 else v for v in x]
        return self.number(x)

    def stream(self, events: list[dict[str, Any]]) -> list[dict[str, Any]]:
        out = [dict(e) for e in events]
        for _ in range(self.rnd.randint(1, 3)):
            op, i = self.rnd.random(), self.rnd.randrange(1, len(out)) if len(out) > 1 else 0
            if op < 0.45:
                out[i]["payload"] = self.value(copy.deepcopy(out[i]["payload"]))
            elif op < 0.55:
                out.insert(i, self.foreign(out[0]["streamId"]))
            elif op < 0.65 and len(out) > 2:
                del out[i]
            elif op < 0.7:
                out.insert(i + 1, {**out[i], "id": out[i]["id"] + "_dup"})
            elif op < 0.8 and i + 1 < len(out):
                out[i], out[i + 1] = out[i + 1], out[i]
            else:
                delta = self.rnd.choice(SHIFTS)
                for j in range(i, len(out)):
                    out[j]["at"] = _shifted(out[j]["at"], delta)
        return _chained(out)

    def shape(self, events: list[dict[str, Any]]) -> list[dict[str, Any]]:
        """1-2 payload fields (top level or one level down) set to another JSON kind or value, or removed; each
        mutation is kept only when settld's API validator for the type (if any) accepts the payload."""
        out = [dict(e) for e in events]
        for _ in range(self.rnd.randint(1, 2)):
            picks = [j for j, e in enumerate(out) if not self.focus or e["type"] in self.focus]
            for _attempt in range(40 if picks else 0):
                i = self.rnd.choice(picks)
                payload = copy.deepcopy(out[i]["payload"])
                if self.rnd.random() < 0.08:  # the whole payload replaced
                    value = self.rnd.choice(SHAPES)
                    candidate = {**out[i], "payload": None if value is REMOVED else copy.deepcopy(value)}
                    if _api_accepts(candidate):
                        out[i] = candidate
                        break
                    continue
                if not isinstance(payload, dict):
                    continue
                target, keys = payload, list(payload) + list(EXTRA_FIELDS.get(out[i]["type"], ()))
                for _depth in range(2):  # maybe one or two levels down
                    nested = [k for k in target if isinstance(target[k], dict) and target[k]]
                    if not nested or self.rnd.random() >= 0.3:
                        break
                    target = target[self.rnd.choice(nested)]
                    keys = list(target)
                if out[i]["type"] == "JOB_CREATED" and target is payload:
                    # the reference harness takes the tenant from its store (tenant_default), settlekit's offline
                    # tools from this field: not a payload shape question
                    keys = [k for k in keys if k != "tenantId"]
                if not keys:
                    continue
                key, value = self.rnd.choice(keys), self.rnd.choice(SHAPES)
                if value is REMOVED:
                    target.pop(key, None)
                else:
                    target[key] = copy.deepcopy(value)
                candidate = {**out[i], "payload": payload}
                if _api_accepts(candidate):
                    out[i] = candidate
                    break
        return _chained(out)

    def foreign(self, stream_id: str) -> dict[str, Any]:
        """An event of another corpus stream, moved into this one."""
        event = dict(self.rnd.choice(load_differential(self.rnd.choice(self.names))["events"][1:]))
        event["streamId"], event["id"] = stream_id, event["id"] + "_ins"
        if isinstance(event.get("payload"), dict) and "jobId" in event["payload"]:
            event["payload"] = {**event["payload"], "jobId": stream_id}
        return event


_CORPUS: dict[str, str] = {}


def load_differential(name: str) -> dict[str, Any]:
    if not _CORPUS:
        _CORPUS.update(differential_corpus())
    value: dict[str, Any] = parse_json(_CORPUS[name])
    return value


def _chained(events: list[dict[str, Any]]) -> list[dict[str, Any]]:
    chained, prev = [], None
    for e in events:
        event = finalize({k: e[k] for k in ENVELOPE_DRAFT_FIELDS}, prev)
        prev = event["chainHash"]
        chained.append(event)
    return chained


def _shifted(at: str, seconds: int) -> str:
    t = datetime.strptime(at, "%Y-%m-%dT%H:%M:%S.%fZ") + timedelta(seconds=seconds)
    return t.strftime("%Y-%m-%dT%H:%M:%S.") + f"{t.microsecond // 1000:03d}Z"


def _reference(settld: str, streams: list[list[dict[str, Any]]], work: Path, spelled: str | None = None
               ) -> tuple[list[Any], list[Any]]:
    source, answer = work / "streams.json", work / "artifacts.json"
    # ASCII escapes keep lone surrogates (the spelled text escapes them too)
    source.write_text(spelled if spelled is not None else json.dumps(streams), encoding="utf-8")
    ledger = subprocess.run(["node", str(HERE / "ledger_xcheck.mjs"), settld, str(source)], capture_output=True,
                            text=True, check=True)
    (work / "ledger.json").write_text(ledger.stdout, encoding="utf-8")
    subprocess.run(["node", str(HERE / "artifacts_xcheck.mjs"), settld, str(source), GENERATED_AT, str(answer)],
                   capture_output=True, text=True, check=True)
    return parse_json(ledger.stdout), parse_json(answer.read_text(encoding="utf-8"))


def _saved(work: Path) -> tuple[list[Any], list[Any], list[Any]]:
    """The streams and reference answers a previous run left in `work` (to re-judge settlekit without node)."""
    def read(name: str) -> list[Any]:
        value: list[Any] = parse_json((work / name).read_text(encoding="utf-8"))
        return value
    return read("streams.json"), read("ledger.json"), read("artifacts.json")


def _first_refusal(events: list[dict[str, Any]]) -> tuple[int | None, str | None]:
    state = None
    for i, event in enumerate(events):
        try:
            state = process_job_events(state, [event]).state
        except SettlekitError as exc:
            return i, str(exc)
    return None, None


def _api_accepts(event: dict[str, Any]) -> bool:
    try:
        check_api_payload(event)
    except SettlekitError:
        return False
    return True


def _differences(events: list[dict[str, Any]], ledger: Any, artifacts: Any) -> list[str]:
    mine = process_job_events(None, events)
    found = []
    if canonical_json(mine.ledger_entries) != canonical_json(ledger["entries"]):
        found.append("ledger entries")
    if [(x["eventId"], x["error"]["message"]) for x in mine.ledger_errors] != [
            (x["eventId"], x["message"]) for x in ledger["errors"]]:
        found.append("posting errors")
    if artifacts["error"] is not None:
        return found + [f"reference artifact worker failed: {artifacts['error']}"]
    if derive_outbox(events) != artifacts["outbox"]:
        found.append("outbox")
    try:
        built = build_all(events, generated_at=GENERATED_AT)
    except SettlekitError as exc:
        return found + [f"settlekit could not build the artifacts: {exc}"]
    if [canonical_json(a) for a in built] != [canonical_json(a) for a in artifacts["artifacts"]]:
        found.append("artifact bytes")
    return found


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("settld", help="a checkout of settld 0.1.0 (commit 7fcd6f0)")
    parser.add_argument("--streams", type=int, default=500)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--out", type=Path, default=Path(tempfile.gettempdir()) / "mutations")
    parser.add_argument("--shapes", type=float, default=0.0, help="share of streams with payload-shape mutations")
    parser.add_argument("--replay", action="store_true",
                        help="judge settlekit again on the streams and reference answers a run left in --out")
    parser.add_argument("--names", nargs="*", default=[], help="these corpus streams only")
    parser.add_argument("--focus", nargs="*", default=[], help="event types the shape mutations pick")
    parser.add_argument("--spell", type=float, default=0.0,
                        help="write the streams as client JSON writers spell them, this share of tokens unusually")
    args = parser.parse_args()
    rnd = random.Random(args.seed)
    names = args.names or list(differential_corpus())
    mutator = Mutator(rnd, names, frozenset(args.focus))
    args.out.mkdir(parents=True, exist_ok=True)
    if args.replay:
        streams, ledgers, artifacts = _saved(args.out)
    else:
        streams = []
        for _ in range(args.streams):
            events = load_differential(rnd.choice(names))["events"]
            streams.append(mutator.shape(events) if rnd.random() < args.shapes else mutator.stream(events))
        spelled = None
        if args.spell:
            spelled = ClientWriter(random.Random(args.seed), args.spell).write(streams)
            streams = parse_json(spelled)  # settlekit reads what the reference reads
        ledgers, artifacts = _reference(args.settld, streams, args.out, spelled)
    tally: Counter[str] = Counter()
    for n, (events, ledger, built) in enumerate(zip(streams, ledgers, artifacts, strict=True)):
        theirs = ledger["reduceError"]["index"] if ledger["reduceError"] else None
        try:
            mine, why = _first_refusal(events)
        except Exception as exc:  # a crash is a difference like any other
            mine, why = -1, f"settlekit crashed: {exc!r}"
        api_ok = all(_api_accepts(e) for e in events)
        found: list[str] = []
        if theirs is None and mine is None:
            try:
                found = _differences(events, ledger, built)
            except Exception as exc:
                found = [f"settlekit crashed: {exc!r}"]
            tally["compared"] += 1
            if not found:
                tally["both agree"] += 1
        elif theirs == mine:
            tally["both refused the same event"] += 1
        elif mine == -1:
            found = [why or "settlekit crashed"]
        elif mine is not None and (theirs is None or mine < theirs) and api_ok:
            # every payload passes settld's validators and its reducer went on: settlekit must too
            found = [f"settlekit refused event {mine} ({why}), the reference accepts it"]
        elif mine is not None and (theirs is None or mine < theirs):
            tally["settlekit refused earlier, at a payload settld's API refuses"] += 1
        else:
            found = [f"the reference refused event {theirs} ({ledger['reduceError']['message']}), settlekit did not"]
        if found:
            tally["REFUSED, the reference accepts" if found[0].startswith("settlekit refused") else "DIFFERENT"] += 1
            path = args.out / f"stream_{args.seed}_{n}.json"
            path.write_text(json.dumps(events), encoding="utf-8")
            print(f"stream {n}: {'; '.join(found)} -> {path}")
    print(json.dumps(dict(sorted(tally.items()))))
    return 1 if tally["DIFFERENT"] or tally["REFUSED, the reference accepts"] else 0


if __name__ == "__main__":
    sys.exit(main())
