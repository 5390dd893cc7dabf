"""Offline verification of an artifact against its stream: recompute the hash and rebuild the artifact from the
events with the artifact's own generatedAt, source event and anchor, then list every field that differs."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from settlekit.artifacts.build import build_one
from settlekit.artifacts.builders import ContractResolver
from settlekit.errors import SettlekitError
from settlekit.events.canonical import canonical_hash, canonical_json

_MISSING: Any = object()


def artifact_hash_valid(artifact: Mapping[str, Any]) -> tuple[bool, str | None]:
    """(the stored artifactHash equals the recomputed one, the recomputed hash)."""
    core = {k: v for k, v in artifact.items() if k != "artifactHash"}
    try:
        computed = canonical_hash(core)
    except SettlekitError:
        return False, None
    return artifact.get("artifactHash") == computed, computed


def diff(expected: Any, actual: Any, path: str = "", out: list[dict[str, Any]] | None = None) -> list[dict[str, Any]]:
    """Leaf-level differences between two JSON values; paths look like `settlement.partyRollups[1].payoutCents`.
    Walked without recursion (an artifact may copy a payload nested thousands of levels deep)."""
    out = [] if out is None else out
    work: list[tuple[Any, Any, str]] = [(expected, actual, path)]
    while work:
        exp, act, where = work.pop()
        if type(exp) is dict and type(act) is dict:
            keys = list(exp) + [k for k in act if k not in exp]
            work.extend((exp.get(k, _MISSING), act.get(k, _MISSING), f"{where}.{k}" if where else str(k))
                        for k in reversed(keys))
            continue
        if type(exp) is list and type(act) is list:
            work.extend((exp[i] if i < len(exp) else _MISSING, act[i] if i < len(act) else _MISSING, f"{where}[{i}]")
                        for i in reversed(range(max(len(exp), len(act)))))
            continue
        if exp is _MISSING or act is _MISSING or canonical_json(exp) != canonical_json(act):
            row: dict[str, Any] = {
                "path": where or "$",
                "expected": None if exp is _MISSING else exp,
                "actual": None if act is _MISSING else act,
            }
            if exp is _MISSING:
                row["missing"] = "expected"
            elif act is _MISSING:
                row["missing"] = "actual"
            out.append(row)
    return out


def verify_artifact_against_stream(
    events: Sequence[Mapping[str, Any]],
    artifact: Any,
    *,
    contract_resolver: ContractResolver | None = None,
) -> dict[str, Any]:
    """`{ok, artifactHashValid, differences: [{path, expected, actual}], artifactId, artifactType,
    expectedArtifactHash, computedArtifactHash, error}`.

    `expected` is the value rebuilt from the stream, `actual` the artifact's. `ok` means the hash is valid and the
    rebuild is identical. A rebuild that cannot happen (unknown type, anchor not in the stream, …) gives
    `ok: false` with `error: {code, message}`.
    """
    if not isinstance(artifact, Mapping):
        return {"ok": False, "artifactHashValid": False, "differences": [],
                "error": {"code": "ARTIFACT_INVALID", "message": "the artifact must be a JSON object"}}
    hash_ok, computed = artifact_hash_valid(artifact)
    report: dict[str, Any] = {
        "ok": False,
        "artifactHashValid": hash_ok,
        "differences": [],
        "artifactId": artifact.get("artifactId"),
        "artifactType": artifact.get("artifactType"),
        "computedArtifactHash": computed,
        "expectedArtifactHash": None,
        "error": None,
    }
    try:
        rebuilt = build_one(
            list(events),
            artifact.get("artifactType"),  # type: ignore[arg-type]
            artifact.get("sourceEventId"),
            artifact.get("generatedAt"),
            at_chain_hash=artifact.get("atChainHash"),
            tenant_id=artifact.get("tenantId"),
            contract_resolver=contract_resolver,
        )
    except SettlekitError as exc:
        report["error"] = {"code": exc.code, "message": exc.message}
        return report
    report["expectedArtifactHash"] = rebuilt["artifactHash"]
    report["differences"] = diff(rebuilt, dict(artifact))
    report["ok"] = hash_ok and not report["differences"]
    return report
