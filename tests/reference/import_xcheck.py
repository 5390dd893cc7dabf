"""Where settld's own API first refuses each offline parity stream appended event by event (a tool, not collected by
pytest): the answers `tests/contract/test_import_history.py` holds `settlekit import` to.

Each stream of `tests/vectors/reference_runs/offline_parity.json.gz` (its long ones made again) goes to settld's
`POST /jobs/:id/events` one event at a time, as written in the file, after its first event (`import_xcheck.mjs`).
An event with no signature (null, or "" which settld reads as none) is signed here first with the key of the
signer its type and actor need: settld's API refuses unsigned new input, but its stored streams hold such events,
which an import takes as recorded history; signing them leaves their chain as it is and lets settld judge the rest
of the event. The other vendored stream bundles settld's core accepts (OTHER_BUNDLES) go the same way. Writes
`{reference, now, signers, runs: [{description, eventsSha256, signedHere, firstRejection}], others: [{source,
index, description, eventsSha256, signedHere, firstRejection}]}` (`signers`: the three keys with their roles, as
KEYS.json of an import) to
`tests/vectors/reference_runs/import_parity.json.gz` (`firstRejection`: null, or settld's `{index, status, error,
code, message}`).

    python tests/reference/import_xcheck.py SETTLD_DIR [--vendor]
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
from offline_parity import SIGNERS  # noqa: E402

from conftest import VECTORS, differential_corpus  # noqa: E402
from settlekit.events.canonical import canonical_json, parse_json  # noqa: E402
from settlekit.jobs.types import KNOWN_EVENT_TYPES, required_signer_kind  # noqa: E402
from support.huge_streams import corpus_stream, huge_stream, stream_digest  # noqa: E402

NOW = "2026-12-31T00:00:00.000Z"
BUNDLE = VECTORS / "reference_runs" / "offline_parity.json.gz"
OUT = VECTORS / "reference_runs" / "import_parity.json.gz"


def parity_runs() -> list[dict[str, Any]]:
    """The offline parity runs with their events (a long one's made again and checked by its digest)."""
    bundle = parse_json(gzip.decompress(BUNDLE.read_bytes()).decode("utf-8"))
    runs = []
    for run in bundle["runs"]:
        if "huge" in run:
            recipe = run["huge"]
            events = huge_stream(corpus_stream(differential_corpus(), recipe["base"]), recipe["extra"])
            assert stream_digest(events) == recipe["eventsSha256"]
            run = {**run, "events": events}
        runs.append(run)
    return runs


# The other vendored stream bundles settld's core accepts (unsigned, re-chained): their runs' `events`.
OTHER_BUNDLES = ("reference_runs/payload_shapes.json.gz", "reference_runs/js_whitespace.json.gz",
                 "shapes/shapes.json.gz", "reference_runs/unsafe_credit_sums.json")


def bundle_streams(source: str) -> list[dict[str, Any]]:
    """The runs of a vendored bundle (a file of one stream is one run)."""
    raw = (VECTORS / source).read_bytes()
    bundle = parse_json((gzip.decompress(raw) if source.endswith(".gz") else raw).decode("utf-8"))
    runs: list[dict[str, Any]] = bundle.get("runs") or bundle.get("streams") or [bundle]
    return runs


def other_runs() -> list[dict[str, Any]]:
    """`{source, index, description, events}` of every stream of OTHER_BUNDLES, in order."""
    out = []
    for source in OTHER_BUNDLES:
        for i, run in enumerate(bundle_streams(source)):
            out.append({"source": source, "index": i, "description": run.get("description", f"seed {run.get('seed')}"),
                        "events": run["events"]})
    return out


def signer_role(event: dict[str, Any]) -> str | None:
    """The role whose key settld's API wants on this event (None: it wants none)."""
    actor = event.get("actor")
    actor_type = actor.get("type") if isinstance(actor, dict) else None
    if event.get("type") in KNOWN_EVENT_TYPES:
        return required_signer_kind(event["type"], actor_type if isinstance(actor_type, str) else "")
    return actor_type if actor_type in ("robot", "operator") else None


def signed_here(events: list[dict[str, Any]]) -> tuple[list[dict[str, Any]], int]:
    out, n = [], 0
    for event in events:
        role = signer_role(event)
        if not event.get("signature") and role is not None and isinstance(event.get("payloadHash"), str):
            signer = SIGNERS[role]
            event = {**copy.copy(event), "signature": signer.sign_payload_hash(event["payloadHash"]),
                     "signerKeyId": signer.key_id}
            n += 1
        out.append(event)
    return out, n


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("settld")
    parser.add_argument("--vendor", action="store_true")
    args = parser.parse_args()
    runs = parity_runs()
    others = other_runs()
    prepared = [signed_here(run["events"]) for run in runs + others]
    server = SIGNERS["server"]
    doc = {"now": NOW, "serverKeypair": {"publicKeyPem": server.public_key_pem,
                                         "privateKeyPem": server.private_key_pem()},
           "signers": [{"role": role, "keyId": s.key_id, "publicKeyPem": s.public_key_pem}
                       for role, s in SIGNERS.items()],
           "streams": [{"events": events} for events, _ in prepared]}
    with tempfile.TemporaryDirectory() as tmp:
        source, answer = Path(tmp) / "in.json", Path(tmp) / "out.json"
        source.write_text(canonical_json(doc, keep_proto=True), encoding="utf-8")
        subprocess.run(["node", "--stack-size=65500", str(HERE / "import_xcheck.mjs"), args.settld, str(source),
                        str(answer)], check=True)
        answers = json.loads(answer.read_text(encoding="utf-8"))
    out: list[dict[str, Any]] = []
    more: list[dict[str, Any]] = []
    for k, (run, (_, n), refusal) in enumerate(zip(runs + others, prepared, answers, strict=True)):
        assert refusal is None or refusal["index"] >= 0, refusal
        answer = {"description": run["description"], "eventsSha256": stream_digest(run["events"]),
                  "signedHere": n, "firstRejection": refusal}
        if k < len(runs):
            out.append(answer)
        else:
            more.append({"source": run["source"], "index": run["index"], **answer})
        where = "all accepted" if refusal is None else f"{refusal['index']}/{len(run['events'])}: " \
            f"{refusal['error']} {refusal['message'] or ''}"
        print(f"{run['description'][:60]:60} {where}")
    if args.vendor:
        bundle = {"reference": "settld 0.1.0 (commit 7fcd6f0), tests/reference/import_xcheck.mjs under node",
                  "now": NOW, "signers": doc["signers"], "runs": out, "others": more}
        OUT.write_bytes(gzip.compress(json.dumps(bundle, indent=None, sort_keys=True).encode("utf-8"), mtime=0))
        print(f"{len(out)} runs -> {OUT}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
