"""Payload cases for settld's API validators, with the reference's verdicts (a tool, not collected by pytest).

Takes real payloads of every validated job event type from the differential corpus and mutates them: each field
dropped, set to values of every JSON kind and to boundary values, unknown and array-index keys added, nested
objects and list items mutated the same way, whole payload replaced. Runs settld's own validators on every case
under node (`api_validators.mjs`, called as its append route calls them) and writes the cases with the verdicts:

    python tests/reference/api_payload_cases.py SETTLD_DIR [--per-type 260] [--seed 7] \
        [--out tests/vectors/reference_runs/api_payloads.json.gz]

`tests/unit/test_api_payloads.py` checks `settlekit.jobs.api_payloads` against the written file; with
`--compare` this tool also compares every case itself and prints the disagreements.
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
from collections import defaultdict
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))
from conftest import differential_corpus, load_differential  # noqa: E402
from settlekit.events.canonical import parse_json  # noqa: E402
from settlekit.jobs.api_payloads import ROUTES, api_payload_error  # noqa: E402
from settlekit.jobs.api_payloads._js import MISSING  # noqa: E402

DEFAULT_OUT = HERE.parent / "vectors" / "reference_runs" / "api_payloads.json.gz"
HEX = "ab" * 32
REPLACEMENTS: list[Any] = [
    None, "", "   ", "x", "USD", "EUR", 0, -0.0, -1, 1, 2, 5, 6, 1.5, 99, 100, 101, 2**53 - 1, 2**53, -(2**53), 10**20,
    True, False, [], ["x"], [""], {}, {"x": 1}, HEX, HEX.upper(), HEX[:-1], HEX + "\n",
    "2026-01-01T00:00:00.000Z", "2026-02-30T10:00:00Z", "2026-01-01", "not a date", "robot", "operator",
]
SEEDS_PER_TYPE = 6


def _paths(x: Any, prefix: tuple[Any, ...] = (), depth: int = 0) -> list[tuple[Any, ...]]:
    """Every key path into dicts and list items, down to depth 3."""
    out: list[tuple[Any, ...]] = []
    if depth >= 3:
        return out
    if isinstance(x, dict):
        for k, v in x.items():
            out.append((*prefix, k))
            out.extend(_paths(v, (*prefix, k), depth + 1))
    elif isinstance(x, list):
        for i, v in enumerate(x[:3]):
            out.append((*prefix, i))
            out.extend(_paths(v, (*prefix, i), depth + 1))
    return out


def _container(x: Any, path: tuple[Any, ...]) -> Any:
    for step in path[:-1]:
        x = x[step]
    return x


def _set(payload: Any, path: tuple[Any, ...], value: Any) -> Any:
    out = copy.deepcopy(payload)
    _container(out, path)[path[-1]] = value
    return out


def _drop(payload: Any, path: tuple[Any, ...]) -> Any:
    out = copy.deepcopy(payload)
    del _container(out, path)[path[-1]]
    return out


def _add(payload: Any, path: tuple[Any, ...], key: str) -> Any:
    out = copy.deepcopy(payload)
    target = _container(out, (*path, None)) if path else out
    if isinstance(target, dict):
        target[key] = "extra"
    return out


def _mutations(rnd: random.Random, payload: Any) -> list[Any]:
    cases: list[Any] = [MISSING, None, [], "x", 5, {}]
    dict_paths: list[tuple[Any, ...]] = [()]
    for path in _paths(payload):
        value = _container(payload, path)[path[-1]]
        if isinstance(value, dict):
            dict_paths.append(path)
        if isinstance(path[-1], str):
            cases.append(_drop(payload, path))
        for replacement in REPLACEMENTS:
            cases.append(_set(payload, path, replacement))
        if isinstance(value, str) and value:
            cases.append(_set(payload, path, " " + value))
            cases.append(_set(payload, path, value.lower() if value != value.lower() else value.upper()))
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            for delta in (-1, 1, 0.5):
                cases.append(_set(payload, path, value + delta))
    for path in dict_paths:
        cases.append(_add(payload, path, "unexpectedField"))
        cases.append(_add(payload, path, "0"))
    rnd.shuffle(cases)
    return cases


def _seeds() -> dict[str, list[Any]]:
    """Distinct corpus payloads per validated type, richest (most fields) first."""
    found: dict[str, dict[str, Any]] = defaultdict(dict)
    for name in differential_corpus():
        for event in load_differential(name)["events"]:
            if event["type"] in ROUTES:
                payload = event.get("payload")
                found[event["type"]][json.dumps(payload, sort_keys=True)] = payload
    return {
        t: sorted(payloads.values(), key=lambda p: -len(json.dumps(p)))[:SEEDS_PER_TYPE]
        for t, payloads in found.items()
    }


def build_cases(per_type: int, seed: int) -> list[dict[str, Any]]:
    rnd = random.Random(seed)
    cases: list[dict[str, Any]] = []
    for event_type, seeds in sorted(_seeds().items()):
        chosen: dict[str, dict[str, Any]] = {}
        for payload in seeds:  # every seed itself, then mutations shared out among the seeds
            case = {"type": event_type, "payload": payload}
            chosen[json.dumps(case)] = case
        pools = [_mutations(rnd, payload) for payload in seeds]
        while len(chosen) < per_type and any(pools):
            for pool in pools:
                if pool and len(chosen) < per_type:
                    payload = pool.pop()
                    case = {"type": event_type} if payload is MISSING else {"type": event_type, "payload": payload}
                    chosen[json.dumps(case)] = case
        cases.extend(chosen.values())
    return cases


def run_reference(settld_dir: str, cases: list[dict[str, Any]]) -> list[dict[str, Any]]:
    with tempfile.TemporaryDirectory() as tmp:
        cases_file, out_file = Path(tmp, "cases.json"), Path(tmp, "out.json")
        cases_file.write_text(json.dumps(cases))
        subprocess.run(["node", str(HERE / "api_validators.mjs"), settld_dir, str(cases_file), str(out_file)],
                       check=True)
        verdicts: list[dict[str, Any]] = json.loads(out_file.read_text())
    return verdicts


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("settld_dir")
    parser.add_argument("--per-type", type=int, default=260)
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--out", default=str(DEFAULT_OUT))
    parser.add_argument("--compare", action="store_true", help="also compare settlekit on every case")
    args = parser.parse_args()
    cases = build_cases(args.per_type, args.seed)
    verdicts = run_reference(args.settld_dir, cases)
    rows = [{**case, "ok": v["ok"], "message": v["message"]} for case, v in zip(cases, verdicts, strict=True)]
    text = json.dumps({"reference": "settld 0.1.0 (7fcd6f0)", "cases": rows}, separators=(",", ":"))
    with gzip.GzipFile(args.out, "wb", mtime=0) as f:
        f.write(text.encode())
    print(f"{len(rows)} cases, {sum(not r['ok'] for r in rows)} refused by the reference -> {args.out}")
    if args.compare:
        differ = 0
        for row in parse_json(text)["cases"]:
            mine = api_payload_error(row["type"], row.get("payload", MISSING))
            if mine != row["message"]:
                differ += 1
                if differ <= 40:
                    print(f"{row['type']}: reference {row['message']!r}, settlekit {mine!r}\n  {row.get('payload')}")
        print(f"{differ} of {len(rows)} differ")
    return 0


if __name__ == "__main__":
    sys.exit(main())
