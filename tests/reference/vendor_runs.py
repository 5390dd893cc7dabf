"""Vendor streams of a mutation campaign run, with the reference's outputs, as regression cases (a tool).

`mutation_campaign.py` leaves in its `--out` directory the streams it made (`streams.json`) and the reference's
answers (`ledger.json`, `artifacts.json`). This picks streams by index and writes them, with those answers and a
description of each mutated payload (found by comparing with the corpus stream it came from), to a gzipped bundle
that `tests/unit/test_reference_runs.py` replays without node:

    python tests/reference/vendor_runs.py RUN_DIR:INDEX[,INDEX...] [RUN_DIR:...] --out BUNDLE.json.gz
"""

from __future__ import annotations

import argparse
import gzip
import json
import sys
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))
sys.path.insert(0, str(HERE))
from mutation_campaign import GENERATED_AT, load_differential  # noqa: E402

from conftest import differential_corpus  # noqa: E402
from settlekit.events.canonical import parse_json  # noqa: E402

REFERENCE = "settld 0.1.0 (commit 7fcd6f0), tests/reference/ledger_xcheck.mjs and artifacts_xcheck.mjs under node"
MISSING = object()


def _changes(path: str, before: Any, after: Any) -> list[str]:
    """The leaf changes from `before` to `after`, as `path = value` (or `path removed`)."""
    if before == after and type(before) is type(after):
        return []
    if type(before) is dict and type(after) is dict:
        out: list[str] = []
        for key in list(before) + [k for k in after if k not in before]:
            sub = f"{path}.{key}"
            if key not in after:
                out.append(f"{sub} removed")
            else:
                out.extend(_changes(sub, before.get(key, MISSING), after[key]))
        return out
    if before is MISSING:
        return [f"{path} = {json.dumps(after)} (added)"]
    return [f"{path} = {json.dumps(after)}"]


def describe(events: list[dict[str, Any]], originals: dict[str, dict[str, Any]]) -> str:
    changes: list[str] = []
    for event in events:
        original = originals.get(event["id"])
        if original is not None:
            changes.extend(f"{event['type']} {c}" for c in _changes("payload", original["payload"], event["payload"]))
    return "; ".join(changes) or "no payload change"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("picks", nargs="+", help="RUN_DIR:INDEX[,INDEX...]")
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args()
    corpus = differential_corpus()
    by_stream = {}
    for name in corpus:
        events = load_differential(name)["events"]
        by_stream[events[0]["streamId"]] = {e["id"]: e for e in events}
    runs = []
    for pick in args.picks:
        run_dir, _, indexes = pick.rpartition(":")
        work = Path(run_dir)
        streams = parse_json((work / "streams.json").read_text(encoding="utf-8"))
        ledgers = parse_json((work / "ledger.json").read_text(encoding="utf-8"))
        artifacts = parse_json((work / "artifacts.json").read_text(encoding="utf-8"))
        for index in map(int, indexes.split(",")):
            events, ledger, built = streams[index], ledgers[index], artifacts[index]
            if ledger["reduceError"] is not None or built["error"] is not None:
                raise SystemExit(f"{pick}: stream {index} is not accepted by the reference")
            runs.append({
                "description": describe(events, by_stream.get(events[0]["streamId"], {})),
                "events": events,
                "ledgerEntries": ledger["entries"],
                "ledgerErrors": ledger["errors"],
                "artifactOutbox": built["outbox"],
                "artifacts": built["artifacts"],
            })
    bundle = {"reference": REFERENCE, "generatedAt": GENERATED_AT, "runs": runs}
    args.out.write_bytes(gzip.compress(json.dumps(bundle).encode("utf-8"), mtime=0))
    print(f"{len(runs)} runs -> {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
