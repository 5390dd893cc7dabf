"""Contract-document differential against the settld 0.1.0 reference (a tool, not collected by pytest).

settld takes the party ids of ledger allocations (and of the SettlementStatement's party rollups) from the
operator contract document a job pins: MATCHED's `operatorContractHash` (else the booking's
`customerContractHash`) names a stored ContractDocument.v1, and `parties[role].partyId` replaces the default
party id of that role, whatever the role (its allocation code reads any role; its contract validator stores only
platform, operator and customer). No event carries the document itself: it is stored beside the stream.

This takes random differential-corpus streams that reach MATCHED, pins a generated contract document there (party
ids of every role and of other JSON kinds, blank and white-space ids, parties that are not objects, split plans
enabled, disabled, with omitted keys or invalid; on some streams an insurer on the booking's coverage policy),
re-chains the stream unsigned, and runs it through the reference under node (contract_runs.mjs: its posting
rules, `allocateEntry` against the job after each entry's event, its artifact worker with the document served by
hash) and through settlekit's offline core (`allocations_for_entry` with the document the job pins after the
event, as the ledger projection reads it, and `build_all` with the same documents). Streams that differ are
listed, and so are documents the reference stores whose hash (`hashContractDocumentV1`) is not settlekit's
`contract_hash`; `--vendor FILE` writes the runs picked by `--pick` (all by default) with the reference's outputs.

    python tests/reference/contract_runs.py SETTLD_DIR [--streams 200] [--seed 1] [--out /tmp/contract_runs]
        [--replay] [--vendor BUNDLE.json.gz --pick 0,3,7]
"""

from __future__ import annotations

import argparse
import copy
import gzip
import json
import random
import subprocess
import sys
import tempfile
from collections import Counter
from collections.abc import Mapping
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))
sys.path.insert(0, str(HERE))
from mutation_campaign import GENERATED_AT, _chained, load_differential  # noqa: E402

from conftest import differential_corpus  # noqa: E402
from settlekit.artifacts.build import build_all, derive_outbox  # noqa: E402
from settlekit.errors import SettlekitError  # noqa: E402
from settlekit.events.canonical import canonical_hash, canonical_json, parse_json  # noqa: E402
from settlekit.jobs import process_job_events  # noqa: E402
from settlekit.ledger.allocations import allocations_for_entry  # noqa: E402
from settlekit.ledger.contracts import contract_hash  # noqa: E402

TENANT = "tenant_default"
REFERENCE = "settld 0.1.0 (commit 7fcd6f0), tests/reference/contract_runs.mjs under node"
ROLES = ("platform", "operator", "customer", "subcontractor", "insurer")
PARTY_IDS: list[Any] = ["pty_acme", "pty_ünï", " pty_padded ", "", " ", "\u3000", "\ufeff", "\x1c", "\x85",
                        "\u200b", 7, None, ["pty_list"], {"id": "pty_obj"}, True]
PLAN_RULES: list[dict[str, Any]] = [
    {"partyRole": "operator", "partyId": "pty_op_share", "share": {"type": "percentage", "valueBasisPoints": 7000},
     "appliesTo": "gross"},
    {"partyRole": "subcontractor", "share": {"type": "remainder"}},
    {"partyRole": "customer", "partyId": "pty_credits", "share": {"type": "fixed", "valueCents": 50},
     "appliesTo": "credits"},
]
# the policies settld's contract validator requires, so that the documents with valid parties and connect sections
# are ones it stores, and the run checks that settlekit's hash of them is settld's
POLICIES = {"creditPolicy": {"enabled": False, "defaultAmountCents": 0, "maxAmountCents": 0, "currency": "USD"},
            "evidencePolicy": {"retentionDays": 30}}
Contracts = dict[str, Any]


def _party(rnd: random.Random) -> Any:
    r = rnd.random()
    if r < 0.08:
        return rnd.choice([None, [], "pty_str", 3])
    entry: dict[str, Any] = {"partyId": rnd.choice(PARTY_IDS)} if r < 0.95 else {}
    entry["requiresSignature"] = rnd.random() < 0.5
    return entry


def contract_document(rnd: random.Random, n: int) -> dict[str, Any]:
    """A ContractDocument.v1 with random parties and connect section (not always one settld would store)."""
    doc: dict[str, Any] = {"type": "ContractDocument.v1", "v": 1, "contractId": f"ctr_{n}", "contractVersion": 1,
                           "name": f"contract {n}", "policies": copy.deepcopy(POLICIES)}
    r = rnd.random()
    if r < 0.06:
        doc["parties"] = rnd.choice([None, [], "parties"])
    elif r < 0.97:
        doc["parties"] = {role: _party(rnd) for role in ROLES if rnd.random() < 0.7}
    c = rnd.random()
    if c < 0.25:
        doc["connect"] = {"enabled": False}
    elif c < 0.45:
        doc["connect"] = {"enabled": True, "splitPlan": {"type": "SplitPlan.v1", "v": 1, "currency": "USD",
                                                         "rules": copy.deepcopy(PLAN_RULES[:rnd.randint(1, 3)])}}
    elif c < 0.5:
        doc["connect"] = {"enabled": True, "splitPlan": {"type": "SplitPlan.v2"}}
    return doc


def _document_hash(doc: dict[str, Any], n: int) -> str:
    try:
        return contract_hash(doc)
    except SettlekitError:  # a document settlekit would not store: any 64-hex name serves the lookup
        return canonical_hash({"unstorable": n})


def pinned_stream(rnd: random.Random, events: list[dict[str, Any]], digest: str) -> list[dict[str, Any]]:
    """The stream with its MATCHED pinning `digest` (sometimes through the booking's customerContractHash
    instead) and, now and then, an insurer on the booking's coverage policy."""
    out = copy.deepcopy(events)
    via_booking = rnd.random() < 0.2
    for event in out:
        payload = event.get("payload")
        if not isinstance(payload, dict):
            continue
        if event["type"] == "MATCHED":
            if via_booking:
                payload.pop("operatorContractHash", None)
            else:
                payload["operatorContractHash"] = digest
                payload.setdefault("operatorPolicyHash", canonical_hash({"policy": digest}))
        elif event["type"] == "BOOKED":
            if via_booking:
                payload["customerContractHash"] = digest
            snapshot = payload.get("policySnapshot")
            coverage = snapshot.get("coveragePolicy") if isinstance(snapshot, dict) else None
            if isinstance(coverage, dict) and rnd.random() < 0.3:
                coverage["insurerId"] = rnd.choice(["ins_acme", " ", "ins_ünï"])
    return _chained(out)


def settlekit_outputs(events: list[dict[str, Any]], contracts: Contracts) -> dict[str, Any]:
    """Ledger entries, posting errors and allocations (each entry against the job after its event and the
    document that job pins, split plans not executed), outbox and artifacts."""
    def resolve(digest: Any) -> Mapping[str, Any] | None:
        value: Mapping[str, Any] | None = contracts.get(digest) if isinstance(digest, str) else None
        return value

    state = None
    entries: list[Any] = []
    errors: list[Any] = []
    allocations: list[Any] = []
    for event in events:
        result = process_job_events(state, [event], tenant_id=TENANT, with_allocations=False)
        state = result.state
        entries.extend(result.ledger_entries)
        errors.extend(result.ledger_errors)
        doc = resolve(result.snapshot.get("operatorContractHash"))
        for item in result.ledger_entries:
            allocations.extend(allocations_for_entry(item["entry"], result.snapshot, tenant_id=TENANT,
                                                     contract_doc=doc))
    built = build_all(events, generated_at=GENERATED_AT, contract_resolver=resolve)
    return {"entries": entries, "errors": errors, "allocations": allocations, "outbox": derive_outbox(events),
            "artifacts": built}


def differences(events: list[dict[str, Any]], contracts: Contracts, theirs: dict[str, Any]) -> list[str]:
    try:
        mine = settlekit_outputs(events, contracts)
    except Exception as exc:  # a crash is a difference like any other
        return [f"settlekit failed: {exc!r}"]
    found = []
    if theirs.get("hashMismatches"):
        found.append(f"contract hash (settld's: {theirs['hashMismatches'][0]['settlds']})")
    if canonical_json(mine["entries"]) != canonical_json(theirs["entries"]):
        found.append("ledger entries")
    if [(x["eventId"], x["error"]["message"]) for x in mine["errors"]] != [
            (x["eventId"], x["message"]) for x in theirs["errors"]]:
        found.append("posting errors")
    if theirs["allocationErrors"]:
        found.append(f"reference allocation errors: {theirs['allocationErrors'][:2]}")
    if canonical_json(mine["allocations"]) != canonical_json(theirs["allocations"]):
        found.append("allocations")
    if theirs["artifactError"] is not None:
        return found + [f"reference artifact worker failed: {theirs['artifactError']}"]
    if mine["outbox"] != theirs["outbox"]:
        found.append("outbox")
    if [canonical_json(a) for a in mine["artifacts"]] != [canonical_json(a) for a in theirs["artifacts"]]:
        found.append("artifact bytes")
    return found


def _reference(settld: str, runs: list[dict[str, Any]], work: Path) -> list[dict[str, Any]]:
    source, answer = work / "runs.json", work / "reference.json"
    source.write_text(json.dumps(runs), encoding="utf-8")
    subprocess.run(["node", str(HERE / "contract_runs.mjs"), settld, str(source), GENERATED_AT, str(answer)],
                   capture_output=True, text=True, check=True)
    value: list[dict[str, Any]] = parse_json(answer.read_text(encoding="utf-8"))
    return value


def make_runs(rnd: random.Random, count: int) -> list[dict[str, Any]]:
    names = [n for n in differential_corpus()
             if any(e["type"] == "MATCHED" for e in load_differential(n)["events"])]
    runs = []
    for n in range(count):
        doc = contract_document(rnd, n)
        digest = _document_hash(doc, n)
        events = pinned_stream(rnd, load_differential(rnd.choice(names))["events"], digest)
        runs.append({"events": events, "contracts": {digest: doc}})
    return runs


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("settld", help="a checkout of settld 0.1.0 (commit 7fcd6f0)")
    parser.add_argument("--streams", type=int, default=200)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--out", type=Path, default=Path(tempfile.gettempdir()) / "contract_runs")
    parser.add_argument("--replay", action="store_true", help="judge settlekit again on the runs left in --out")
    parser.add_argument("--vendor", type=Path, help="write the picked runs with the reference's outputs here")
    parser.add_argument("--pick", default="", help="run indexes to vendor (comma-separated; all by default)")
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    if args.replay or args.vendor:
        runs = parse_json((args.out / "runs.json").read_text(encoding="utf-8"))
        answers = parse_json((args.out / "reference.json").read_text(encoding="utf-8"))
    else:
        runs = make_runs(random.Random(args.seed), args.streams)
        answers = _reference(args.settld, runs, args.out)
    if args.vendor:
        return vendor(runs, answers, args.pick, args.vendor)
    tally: Counter[str] = Counter()
    for n, (run, theirs) in enumerate(zip(runs, answers, strict=True)):
        if theirs["reduceError"] is not None:
            tally["the reference refused the stream"] += 1
            continue
        found = differences(run["events"], run["contracts"], theirs)
        tally["DIFFERENT" if found else "both agree"] += 1
        if found:
            print(f"run {n}: {'; '.join(found)}")
    print(json.dumps(dict(sorted(tally.items()))))
    return 1 if tally["DIFFERENT"] else 0


def vendor(runs: list[dict[str, Any]], answers: list[dict[str, Any]], pick: str, out: Path) -> int:
    indexes = [int(i) for i in pick.split(",")] if pick else range(len(runs))
    picked = []
    for i in indexes:
        run, theirs = runs[i], answers[i]
        if theirs["reduceError"] is not None or theirs["artifactError"] is not None or theirs["allocationErrors"]:
            raise SystemExit(f"run {i} is not one the reference accepts whole")
        picked.append({"contracts": run["contracts"], "events": run["events"], "ledgerEntries": theirs["entries"],
                       "ledgerErrors": theirs["errors"], "allocations": theirs["allocations"],
                       "artifactOutbox": theirs["outbox"], "artifacts": theirs["artifacts"]})
    bundle = {"reference": REFERENCE, "tenantId": TENANT, "generatedAt": GENERATED_AT, "runs": picked}
    out.write_bytes(gzip.compress(json.dumps(bundle).encode("utf-8"), mtime=0))
    print(f"{len(picked)} runs -> {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
