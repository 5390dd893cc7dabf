"""Server drafts against the settld 0.1.0 reference's own events route (a tool, not collected by pytest).

settld's events route completes some server drafts before it judges them: a SETTLED draft of a COMPLETED job under
strict or holdback proof gating gets the fresh proof's `settlementProofRef` (replacing any the client sent; after a
forfeiture, status FAIL with it), a DECISION_RECORDED draft its decision fields, a SETTLEMENT_FORFEITED draft its
hold, anchor, facts hash and the recorded decision's reference. This posts drafts on corpus stream prefixes to
settld's API in process (api_xcheck.mjs, `draft` cases) and to settlekit's live path (`JobStreamDomain
.prepare_drafts`, then the live checks), and compares the stored payload or the refusal. settlekit's refusals of
a payload that is not an object, or of a settlementProofRef that is not one, where settld stores the draft, are
the README's deliberate differences and are not counted. Cases: SETTLED drafts on every corpus settlement after a
proof (and on the proof and hold streams) before its stream's first rejection, with no payload, `{}`, a
client-supplied `settlementProofRef` (an object, null, a string), a payload that is not an object and the recorded
payload; DECISION_RECORDED and SETTLEMENT_FORFEITED drafts around every hold, decision and forfeiture, some on a
prefix ending with a stored forfeit decision that has no `holdId` (or a null one). `--vendor` writes every case
with settld's outcome (tests/vectors/reference_runs/server_drafts.json.gz).

    python tests/reference/draft_xcheck.py SETTLD_DIR [--out /tmp/draft_xcheck] [--vendor BUNDLE.json.gz]
"""

from __future__ import annotations

import argparse
import copy
import gzip
import json
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))
sys.path.insert(0, str(HERE))
from api_xcheck import NOW, corpus_signers  # noqa: E402

from conftest import differential_corpus, load_differential  # noqa: E402
from settlekit.events.canonical import canonical_json, parse_json  # noqa: E402
from settlekit.events.envelope import finalize  # noqa: E402
from support.server_drafts import DELIBERATE_REFUSALS, Case, comparable, settlekit_outcome  # noqa: E402

REFERENCE = "settld 0.1.0 (commit 7fcd6f0), its events route in process (tests/reference/api_xcheck.mjs)"
SERVER = {"type": "system", "id": "proxy"}
BOGUS_REF = {"proofEventId": "evt_client", "status": "PASS", "factsHash": "0" * 64}


def _payload_variants(recorded: Any) -> list[Any]:
    return [None, {}, {"settlementProofRef": BOGUS_REF}, {"settlementProofRef": None},
            {"settlementProofRef": "proof", "note": "kept"}, ["not an object"],
            copy.deepcopy(recorded) if isinstance(recorded, dict) else {}]


def _first_rejection(doc: dict[str, Any]) -> int:
    return min((r["index"] for r in doc["serverRejections"]), default=len(doc["events"]))


def settled_cases() -> list[Case]:
    cases = []
    for name in differential_corpus():
        doc = load_differential(name)
        events = doc["events"][:_first_rejection(doc)]
        proofs = False
        for i, event in enumerate(events):
            proofs = proofs or event["type"] == "PROOF_EVALUATED"
            if event["type"] == "SETTLED" and (proofs or "hold" in name or "proof" in name):
                for payload in _payload_variants(event["payload"]):
                    cases.append({"stream": name, "prefix": i,
                                  "draft": {"type": "SETTLED", "actor": event["actor"], "payload": payload}})
    return cases


def _decision(events: list[dict[str, Any]], hold_field: Any) -> dict[str, Any]:
    """A DECISION_RECORDED chained on `events`, stored as it is: a forfeit decision whose holdId is absent
    (`hold_field` is ...) or the given value."""
    payload = {"jobId": events[0]["streamId"], "decisionId": "dec_stored", "decidedAt": NOW,
               "kind": "SETTLEMENT_FORFEIT", "forfeitureReason": "MANUAL", "reasonCodes": [], "evidenceRefs": [],
               "policyHash": None}
    if hold_field is not ...:
        payload["holdId"] = hold_field
    draft = {"v": 1, "id": f"evt_stored_decision_{len(events)}", "at": NOW, "streamId": events[0]["streamId"],
             "type": "DECISION_RECORDED", "actor": SERVER, "payload": payload}
    return finalize(draft, events[-1]["chainHash"], corpus_signers()["server"])


def hold_cases() -> list[Case]:
    cases: list[Case] = []
    forfeit_payloads: list[Any] = [None, {}, {"forfeitureReason": "MANUAL"}, {"decisionId": "dec_stored"},
                                   {"reason": "EVIDENCE_NOT_PROVIDED"}, {"holdId": "hold_unknown"}]
    decision_payloads: list[Any] = [None, {}, {"forfeitureReason": "MANUAL"}, {"holdId": " ", "reason": "MANUAL"}]
    for name in differential_corpus():
        doc = load_differential(name)
        events = doc["events"][:_first_rejection(doc)]
        for i, event in enumerate(events):
            if event["type"] not in ("SETTLEMENT_HELD", "DECISION_RECORDED", "SETTLEMENT_FORFEITED"):
                continue
            for prefix in (i, i + 1):
                base = events[:prefix]
                extras: list[list[dict[str, Any]]] = [[]]
                extras += [[_decision(base, hold)] for hold in (..., None)]
                for extra in extras:
                    for payload in forfeit_payloads:
                        cases.append({"stream": name, "prefix": prefix, "extra": extra,
                                      "draft": {"type": "SETTLEMENT_FORFEITED", "actor": SERVER, "payload": payload}})
                    for payload in decision_payloads if not extra else []:
                        cases.append({"stream": name, "prefix": prefix, "extra": extra,
                                      "draft": {"type": "DECISION_RECORDED", "actor": SERVER, "payload": payload}})
    return cases


def differs(case: Case, theirs: dict[str, Any]) -> str | None:
    """What differs between settld's outcome and settlekit's, or None (also for a deliberate difference)."""
    try:
        mine = settlekit_outcome(case, NOW)
    except Exception as exc:  # a crash is a difference like any other
        return f"settlekit failed: {exc!r}"
    if theirs["status"] == 201:
        if not mine["accepted"] and mine["message"] in DELIBERATE_REFUSALS:
            return None
        if not mine["accepted"]:
            return f"settld stored it, settlekit refused: {mine['message']}"
        if canonical_json(comparable(mine["payload"], case["draft"])) != canonical_json(
                comparable(theirs["payload"], case["draft"])):
            return f"payloads differ: settld {json.dumps(theirs['payload'])[:300]} settlekit " \
                   f"{json.dumps(mine['payload'])[:300]}"
        return None
    if mine["accepted"]:
        return f"settld refused it ({theirs['message'] or theirs['error']}), settlekit stored it"
    if mine["message"] != (theirs["message"] or theirs["error"]):
        return f"refusals differ: settld {theirs['message'] or theirs['error']!r}, settlekit {mine['message']!r}"
    return None


def _reference(settld: str, cases: list[Case], work: Path) -> list[dict[str, Any]]:
    signers = corpus_signers()
    server = signers["server"]
    names = sorted({c["stream"] for c in cases})
    source, answer = work / "drafts_in.json", work / "drafts_out.json"
    source.write_text(json.dumps({
        "now": NOW,
        "signers": [{"role": r, "keyId": k.key_id, "publicKeyPem": k.public_key_pem} for r, k in signers.items()],
        "serverKeypair": {"publicKeyPem": server.public_key_pem, "privateKeyPem": server.private_key_pem()},
        "streams": {n: {"events": load_differential(n)["events"]} for n in names}, "cases": cases,
    }), encoding="utf-8")
    subprocess.run(["node", str(HERE / "api_xcheck.mjs"), settld, str(source), str(answer)], check=True,
                   capture_output=True, text=True)
    value: list[dict[str, Any]] = parse_json(answer.read_text(encoding="utf-8"))
    return value


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("settld", help="a checkout of settld 0.1.0 (commit 7fcd6f0)")
    parser.add_argument("--out", type=Path, default=Path(tempfile.gettempdir()) / "draft_xcheck")
    parser.add_argument("--vendor", type=Path, help="write every case with settld's outcome here")
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    cases = settled_cases() + hold_cases()
    answers = _reference(args.settld, cases, args.out)
    harness = [a for a in answers if a["status"] == -1]
    if harness:
        raise SystemExit(f"harness errors: {harness[0]['message']}")
    found = 0
    for n, (case, theirs) in enumerate(zip(cases, answers, strict=True)):
        why = differs(case, theirs)
        if why:
            found += 1
            print(f"case {n} {case['stream']}@{case['prefix']}+{len(case.get('extra', []))} "
                  f"{case['draft']['type']} {json.dumps(case['draft']['payload'])[:120]}: {why}")
    print(json.dumps({"cases": len(cases), "accepted by settld": sum(a["status"] == 201 for a in answers),
                      "different": found}))
    if args.vendor:
        bundle = {"reference": REFERENCE, "now": NOW, "cases": [
            {**case, "settld": {"status": a["status"], "payload": a.get("payload"),
                                "message": a["message"] or a["error"]}}
            for case, a in zip(cases, answers, strict=True)]}
        args.vendor.write_bytes(gzip.compress(json.dumps(bundle).encode("utf-8"), mtime=0))
        print(f"{len(cases)} cases -> {args.vendor}")
    return 1 if found else 0


if __name__ == "__main__":
    sys.exit(main())
