"""Streams settld 0.1.0 accepts that the earlier corpora never hold, with settld's own offline answers (a tool).

Takes differential-corpus streams (of 30 events at most, to keep the vectors small) and varies them along
dimensions of their own, each chosen at random per stream:

- `restart`: a JOB_CREATED again mid-stream (its payload the first one's, edited, or not an object), followed by a
  second lifecycle (the stream's own events again, under new ids);
- `foreign`: events of types settld's reducer does not know or that belong to other streams (NOTE_ADDED, a robot
  or an operator stream's type, a month close, "SETTLED " with a trailing space, lower case);
- `signatures`: every event signed (robot, operator or server key by its actor), then some signatures spelled as
  node still reads them (no padding, the URL-safe alphabet, line breaks, blanks, other bytes), some emptied
  (`signature: ""`, `signerKeyId: ""`) or removed, and now and then one broken;
- `keys`: "__proto__" keys (object, string and null values) and integer-like keys in payloads, the booking's credit
  policy among them (copied into the CoverageCertificate);
- `deep`: a payload value nested 1,100 to 2,000 arrays and objects deep (node's default stack hashes about 2,200);
- `at`: event times in other spellings `Date.parse` reads (no milliseconds, more digits, an offset, lower case, a
  date alone, an expanded year, RFC 1123, a blank for the `T`);
- `envelope`: event ids with white space, beyond 200 characters or non-ASCII, actors with more keys than type and
  id, fields beside the envelope's (`schemaVersion`, others).

and, with `--huge`, a few long streams (`support.huge_streams`: thousands of heartbeats and unknown notes spread
over a corpus stream, a second lifecycle in the middle), whose events the vectors do not hold (the test makes them
again and checks their digest).

Re-chains every stream, runs settld's reducer, posting rules, chain verification and artifact worker on it under
node (`offline_parity.mjs`), and compares settlekit's offline tools with those answers. With `--vendor` it writes
the streams and answers to `tests/vectors/reference_runs/offline_parity.json.gz`, which
`tests/unit/test_offline_parity.py` replays without node:

    python tests/reference/offline_parity.py SETTLD_DIR [--streams 110] [--seed 1] [--huge] [--vendor] [--keep DIR]
"""

from __future__ import annotations

import argparse
import copy
import gzip
import hashlib
import random
import subprocess
import sys
import tempfile
from collections import Counter
from datetime import datetime
from pathlib import Path
from typing import Any

from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))
sys.path.insert(0, str(HERE))

from conftest import differential_corpus  # noqa: E402
from settlekit.events.canonical import parse_json  # noqa: E402
from settlekit.events.envelope import Signer, finalize  # noqa: E402
from support.huge_streams import corpus_stream, huge_stream, stream_digest  # noqa: E402

GENERATED_AT = "2026-02-01T00:00:00.000Z"
OUT = HERE.parent / "vectors" / "reference_runs" / "offline_parity.json.gz"
DRAFT_FIELDS = ("v", "id", "at", "streamId", "type", "actor", "payload")
DIMENSIONS = ("restart", "foreign", "signatures", "keys", "deep", "at", "envelope")
FOREIGN_TYPES = ["NOTE_ADDED", "ROBOT_HEARTBEAT", "ROBOT_REGISTERED", "ROBOT_STATUS_CHANGED", "OPERATOR_SHIFT_OPENED",
                 "MONTH_CLOSED", "SERVER_SIGNER_KEY_ROTATED", "SETTLED ", "settled", "BOOKED\n", " EN_ROUTE",
                 "INSURER_REIMBURSEMENT_RECORDED", "CUSTOM_EVENT_V2"]
JUNK = [" ", "\n", "\r\n", "\t", ".", "*", "\u00e9", "\u2028"]


def _signers() -> dict[str, Signer]:
    """Three fixed Ed25519 keys (from fixed seeds: the vectors never change)."""
    seeds = {role: hashlib.sha256(f"settlekit offline parity {role}".encode()).digest()
             for role in ("server", "robot", "operator")}
    return {role: Signer.from_private_key(Ed25519PrivateKey.from_private_bytes(seed)) for role, seed in seeds.items()}


SIGNERS = _signers()


class Varier:
    def __init__(self, rng: random.Random, corpus: dict[str, list[dict[str, Any]]]):
        self.rng = rng
        self.corpus = corpus

    def pick(self, items: list[Any]) -> Any:
        return items[self.rng.randrange(len(items))]

    def restart(self, events: list[dict[str, Any]]) -> list[dict[str, Any]]:
        rng = self.rng
        at = rng.randrange(1, len(events) + 1)
        first = copy.deepcopy(events[0])
        payload: Any = first["payload"]
        kind = rng.randrange(6)
        if kind == 0:
            payload = {**payload, "templateId": "second_template", "customerId": "cust_second"}
        elif kind == 1:
            payload = {**payload, "constraints": {"zoneId": "zone_b", "note": "again"}, "siteId": None}
        elif kind == 2:
            payload = {"templateId": "bare"}
        elif kind == 3:
            payload = self.pick([None, {}, "restart", [1, 2]])
        elif kind == 4:
            payload = {**payload, "contractId": "ctr_2", "tenantId": self.pick(["tenant_other", None, ""])}
        restart = {**first, "id": f"{first['id']}_restart{at}", "payload": payload}
        again = [{**copy.deepcopy(e), "id": f"{e['id']}_again"} for e in events[1:rng.randrange(1, len(events) + 1)]]
        return events[:at] + [restart] + again

    def foreign(self, events: list[dict[str, Any]]) -> list[dict[str, Any]]:
        out = list(events)
        for n in range(self.rng.randrange(1, 4)):
            where = self.rng.randrange(1, len(out) + 1)
            base = out[where - 1]
            t = self.pick(FOREIGN_TYPES)
            payload: Any = self.pick([None, {}, {"note": "x", "jobId": base["streamId"]}, {"robotId": "rob_1"}, "text"])
            if t.strip().upper() == "SETTLED":
                payload = {"settlementProofRef": None}
            actor = self.pick([{"type": "system", "id": "proxy"}, {"type": "robot", "id": "rob_1"},
                               {"type": "operator", "id": "op_1"}])
            out.insert(where, {**base, "id": f"{base['id']}_foreign{n}", "type": t, "actor": actor,
                               "payload": payload})
        return out

    def keys(self, events: list[dict[str, Any]]) -> list[dict[str, Any]]:
        out = []
        for e in events:
            e = copy.deepcopy(e)
            p = e["payload"]
            if isinstance(p, dict) and (e["type"] == "BOOKED" or self.rng.random() < 0.2):
                target = p
                if e["type"] == "BOOKED" and isinstance(p.get("policySnapshot"), dict):
                    cp = p["policySnapshot"].get("creditPolicy")
                    target = cp if isinstance(cp, dict) else p
                target["__proto__"] = self.pick([{"polluted": True}, "text", None, 7, [1]])
                if self.rng.random() < 0.5:
                    target.update({"10": "ten", "9": "nine", "01": "zero-one", "b": 1})
            out.append(e)
        return out

    def deep(self, events: list[dict[str, Any]]) -> list[dict[str, Any]]:
        out = [copy.deepcopy(e) for e in events]
        depth = self.pick([1100, 1300, 1600, 2000])  # node's default stack hashes up to about 2,200 levels
        value: Any = "bottom"
        for level in range(depth):
            value = [value] if level % 2 else {"d": value}
        constraints = out[0]["payload"].get("constraints") if isinstance(out[0]["payload"], dict) else None
        if isinstance(constraints, dict) and self.rng.random() < 0.5:
            constraints["deep"] = value  # the job's constraints, which artifacts copy
            return out
        candidates = [i for i, e in enumerate(out) if isinstance(e["payload"], dict)]
        out[self.pick(candidates)]["payload"]["deep"] = value
        return out

    def envelope(self, events: list[dict[str, Any]]) -> list[dict[str, Any]]:
        out = []
        for n, e in enumerate(events):
            e = dict(e)
            roll = self.rng.random()
            if roll < 0.15:
                e["id"] = self.pick([f"evt {n} with blanks", f"evt_{n}_" + "x" * 240, f"évènement_{n}_\u2028",
                                     f"\tevt_{n}"])
            elif roll < 0.25:
                e["actor"] = {**e["actor"], "name": "Extra Actor Key", "meta": {"k": [1]}}
            elif roll < 0.35:
                e["schemaVersion"] = self.pick(["1", 1, "v1"])
                e["extraField"] = {"kept": "by the file, outside every hash"}
            out.append(e)
        return out

    def at(self, events: list[dict[str, Any]]) -> list[dict[str, Any]]:
        out = []
        for e in events:
            e = dict(e)
            text = e["at"]
            if self.rng.random() < 0.3 and text.endswith(".000Z"):
                kind = self.rng.randrange(10)
                day, time = text[:10], text[11:19]
                if kind == 0:
                    text = text[:-5] + "Z"
                elif kind == 1:
                    text = text[:-1] + "+00:00"
                elif kind == 2:
                    text = text.replace("T", "t").replace("Z", "z")
                elif kind == 3:
                    text = text[:-5] + ".5Z"
                elif kind == 4:
                    text = text[:-1] + "+01:00"
                elif kind == 5:
                    text = day  # a date alone: midnight UTC
                elif kind == 6:
                    text = "+00" + text  # the expanded year
                elif kind == 7:  # RFC 1123, as Date.prototype.toUTCString writes it
                    text = datetime.strptime(text, "%Y-%m-%dT%H:%M:%S.000Z").strftime("%a, %d %b %Y %H:%M:%S GMT")
                elif kind == 8:
                    text = f"{day} {time}Z"
                else:
                    text = text[:-5] + ".123456Z"
            e["at"] = text
            out.append(e)
        return out


def _respell(rng: random.Random, signature: str) -> str:
    kind = rng.randrange(7)
    if kind == 0:
        return signature.rstrip("=")
    if kind == 1:
        return signature.replace("+", "-").replace("/", "_")
    if kind == 2:
        return signature[:44] + "\n" + signature[44:]
    if kind == 3:
        return " ".join(signature[i:i + 8] for i in range(0, len(signature), 8))
    if kind == 4:
        i = rng.randrange(len(signature))
        return signature[:i] + rng.choice(JUNK) + signature[i:]
    if kind == 5:
        return signature + "=="
    return signature[:-2] + "\r\n" + signature[-2:]


def _role(event: dict[str, Any]) -> str:
    actor = event.get("actor")
    kind = actor.get("type") if isinstance(actor, dict) else None
    return kind if kind in ("robot", "operator") else "server"


def chain(rng: random.Random, events: list[dict[str, Any]], signed: bool) -> list[dict[str, Any]]:
    """Re-chain (and with `signed` sign, then respell, empty or break some signatures)."""
    out, prev = [], None
    for e in events:
        event = finalize({k: e[k] for k in DRAFT_FIELDS}, prev, SIGNERS[_role(e)] if signed else None)
        event.update({k: v for k, v in e.items() if k not in event})  # extra envelope fields, outside the hashes
        prev = event["chainHash"]
        if signed:
            roll = rng.random()
            if roll < 0.35:
                event["signature"] = _respell(rng, event["signature"])
            elif roll < 0.40:
                event["signature"] = ""
            elif roll < 0.43:
                event["signature"], event["signerKeyId"] = "", ""
            elif roll < 0.45:
                event["signature"], event["signerKeyId"] = None, None
            elif roll < 0.452:
                event["signature"] = event["signature"][:30] + "=" + event["signature"][30:]  # decodes short
            elif roll < 0.454:
                event["signerKeyId"] = ""
        out.append(event)
    return out


def make_streams(seed: int, count: int) -> list[dict[str, Any]]:
    rng = random.Random(seed)
    corpus = {name: parse_json(text)["events"] for name, text in sorted(differential_corpus().items())}
    names = sorted(name for name, events in corpus.items() if len(events) <= 30)  # short: compact vectors
    varier = Varier(rng, corpus)
    cases = []
    for n in range(count):
        name = rng.choice(names)
        events = copy.deepcopy(corpus[name])
        chosen = [d for d in DIMENSIONS if rng.random() < (0.2 if d in ("deep", "at") else 0.45)]
        if n < len(DIMENSIONS):
            chosen = [DIMENSIONS[n]]  # each dimension alone at least once
        if not chosen:
            chosen = [rng.choice(DIMENSIONS)]
        for d in ("restart", "foreign", "keys", "deep", "at", "envelope"):
            if d in chosen:
                events = getattr(varier, d)(events)
        stream = chain(rng, events, "signatures" in chosen)
        cases.append({"description": f"{name}: {', '.join(chosen)}", "dimensions": chosen, "events": stream})
    return cases


HUGE: tuple[tuple[str, int], ...] = (("d057_holds", 2500), ("d156_unicode", 5000))


def huge_cases() -> list[dict[str, Any]]:
    corpus = differential_corpus()
    cases = []
    for name, extra in HUGE:
        events = huge_stream(corpus_stream(corpus, name), extra)
        cases.append({"description": f"{name}: huge ({len(events)} events)", "dimensions": ["huge"],
                      "huge": {"base": name, "extra": extra, "eventsSha256": stream_digest(events)},
                      "events": events})
    return cases


def keys_file() -> dict[str, str]:
    return {s.key_id: s.public_key_pem for s in SIGNERS.values()}


def _dump(value: Any) -> str:
    """JSON text of `value` (deep values included: the iterative canonical writer keeps every key)."""
    from settlekit.events.canonical import canonical_json

    return canonical_json(value, keep_proto=True)


def reference(settld: str, cases: list[dict[str, Any]], work: Path) -> list[dict[str, Any]]:
    source, answer = work / "cases.json", work / "answers.json"
    source.write_text(_dump([{"events": c["events"], "keys": keys_file()} for c in cases]), encoding="utf-8")
    subprocess.run(["node", str(HERE / "offline_parity.mjs"), settld, str(source),
                    GENERATED_AT, str(answer)], check=True, stdout=subprocess.DEVNULL)
    answers: list[dict[str, Any]] = parse_json(answer.read_text(encoding="utf-8"))
    return answers


def differences(case: dict[str, Any], answer: dict[str, Any]) -> list[str]:
    sys.path.insert(0, str(HERE.parent / "unit"))
    from test_offline_parity import compare

    return compare(case["events"], answer, keys_file())


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("settld")
    parser.add_argument("--streams", type=int, default=110)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--vendor", action="store_true")
    parser.add_argument("--keep", type=Path, help="leave the streams and answers in this directory")
    parser.add_argument("--replay", action="store_true", help="judge again the answers --keep holds (no node)")
    parser.add_argument("--huge", action="store_true", help="add the long streams of HUGE")
    args = parser.parse_args()
    cases = make_streams(args.seed, args.streams) + (huge_cases() if args.huge else [])
    with tempfile.TemporaryDirectory() as tmp:
        work = args.keep or Path(tmp)
        work.mkdir(parents=True, exist_ok=True)
        if args.replay and args.keep:
            answers = parse_json((work / "answers.json").read_text(encoding="utf-8"))
        else:
            answers = reference(args.settld, cases, work)
    tally: Counter[str] = Counter()
    accepted = 0
    for case, answer in zip(cases, answers, strict=True):
        if answer["reduceError"] is not None or answer["artifactError"] is not None:
            tally["refused by the reference"] += 1
            continue
        accepted += 1
        found = differences(case, answer)
        for item in found:
            tally[item] += 1
        if found:
            print(f"{case['description']}: {'; '.join(found)}")
    print(f"{accepted} streams the reference accepts, {len(cases) - accepted} it refuses; differences: {dict(tally)}")
    if args.vendor:
        runs = [{**case, **answer} for case, answer in zip(cases, answers, strict=True)
                if answer["reduceError"] is None and answer["artifactError"] is None]
        for run in runs:
            if "huge" in run:
                del run["events"]  # made again by the test from run["huge"]
        bundle = {"reference": "settld 0.1.0 (commit 7fcd6f0), tests/reference/offline_parity.mjs under node",
                  "seed": args.seed, "generatedAt": GENERATED_AT, "keys": keys_file(), "runs": runs}
        OUT.write_bytes(gzip.compress(_dump(bundle).encode("utf-8"), mtime=0))
        print(f"{len(runs)} runs -> {OUT}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
