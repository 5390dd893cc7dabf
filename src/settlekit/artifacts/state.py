"""The artifact fold: one pass over a job stream that carries everything the six builders need.

`FoldState` wraps the job reducer's state and adds what the reducer's facts do not keep in the exact form the
v1 artifacts need:

- `entries`: every journal entry of the slice so far, each posted from the state just before its event
  (postings that raise are left out, as settld does, 04-artifacts.md §9);
- `coverage` / `excused`: ZONE_COVERAGE_REPORTED and excuse-incident facts with settld's proof-verifier
  semantics (`jobs.zone_coverage`, shared with the server rules; excuse types resolved at build time);
- `proof_match` / `proof_match_policy`: the latest PROOF_EVALUATED per `(anchor, factsHash)` and per
  `(anchor, factsHash, customerPolicyHash)`, so the effective-proof lookup (§7 step 3) is O(1).

Every step is O(1) amortized in the stream length (plus the event's own postings), so folding an n-event
slice is O(n). The state serializes to JSON so the artifact consumer can resume it (no re-reading).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final

from settlekit.errors import ValidationError
from settlekit.jobs.reducer import (
    JobState,
    deserialize_state,
    initial_state,
    serialize_state,
    validate_and_apply,
)
from settlekit.jobs.zone_coverage import observe_coverage_report, observe_excuse_incident
from settlekit.ledger.errors import LedgerError
from settlekit.ledger.postings import JOB_POSTING_RULES

FORMAT_VERSION: Final = 1
Event = Mapping[str, Any]


class FoldState:
    """Job state plus the artifact-specific accumulators; see the module docstring."""

    __slots__ = (
        "job",
        "count",
        "head",
        "entries",
        "coverage",
        "excused",
        "proof_match",
        "proof_match_policy",
    )

    def __init__(self) -> None:
        self.job: JobState | None = None
        self.count = 0
        self.head: dict[str, Any] | None = None
        self.entries: list[dict[str, Any]] = []
        self.coverage: dict[str, dict[str, Any]] = {}
        self.excused: dict[str, dict[str, bool]] = {}
        self.proof_match: dict[str, dict[str, Any]] = {}
        self.proof_match_policy: dict[str, dict[str, Any]] = {}

    @property
    def snapshot(self) -> dict[str, Any]:
        return self.require_job().snapshot

    @property
    def facts(self) -> dict[str, Any]:
        return self.require_job().facts

    def require_job(self) -> JobState:
        if self.job is None:
            raise ValidationError("the slice is empty", code="ARTIFACT_SLICE_EMPTY")
        return self.job

    # ------------------------------------------------------------------ folding

    def step(self, event: Event) -> None:
        """Fold one event (validated by the job reducer; raises on an invalid event, changing nothing)."""
        job = self.job
        if job is None:
            new_job = initial_state(event)
            entries: list[dict[str, Any]] = []
        else:
            entries = _postings(job, event)
            new_job = validate_and_apply(job, event)
        self.job = new_job
        if entries:
            self.entries.extend(entries)
        self.count += 1
        self.head = {
            "id": event.get("id"),
            "type": event.get("type"),
            "at": event.get("at"),
            "chainHash": event.get("chainHash"),
        }
        t = event.get("type")
        if t == "ZONE_COVERAGE_REPORTED":
            observe_coverage_report(self.coverage, event)
        elif t == "INCIDENT_REPORTED" or t == "INCIDENT_DETECTED":
            observe_excuse_incident(self.excused, event)
        elif t == "PROOF_EVALUATED":
            self._proof(event)

    def _proof(self, event: Event) -> None:
        p = event.get("payload")
        if type(p) is not dict:
            return
        anchor: Any = p.get("evaluatedAtChainHash")
        facts_hash: Any = p.get("factsHash")
        if type(anchor) is not str or type(facts_hash) is not str:
            return
        ref = {"id": event.get("id"), "at": event.get("at"), "payload": p}
        self.proof_match[match_key(anchor, facts_hash)] = ref
        cph: Any = p.get("customerPolicyHash")
        if type(cph) is str:
            self.proof_match_policy[match_key(anchor, facts_hash, cph)] = ref

    # ------------------------------------------------------------------ persistence

    def to_json(self) -> dict[str, Any]:
        """JSON-able form (the artifact consumer stores it per job)."""
        return {
            "v": FORMAT_VERSION,
            "job": serialize_state(self.require_job()),
            "count": self.count,
            "head": self.head,
            "entries": self.entries,
            "coverage": self.coverage,
            "excused": self.excused,
            "proofMatch": self.proof_match,
            "proofMatchPolicy": self.proof_match_policy,
        }

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> FoldState:
        if data.get("v") != FORMAT_VERSION or type(data.get("job")) is not dict:
            raise ValidationError("stored artifact fold state has an unknown format", code="ARTIFACT_STATE_INVALID")
        fs = cls()
        fs.job = deserialize_state(data["job"])
        fs.count = int(data["count"])
        fs.head = data["head"]
        fs.entries = list(data["entries"])
        fs.coverage = dict(data["coverage"])
        fs.excused = {k: dict(v) for k, v in data["excused"].items()}
        fs.proof_match = dict(data["proofMatch"])
        fs.proof_match_policy = dict(data["proofMatchPolicy"])
        return fs


def match_key(*parts: str) -> str:
    return "\x00".join(parts)


def _postings(job: JobState, event: Event) -> list[dict[str, Any]]:
    """Entries of `event` from the state before it; a posting that raises contributes nothing (§9.1)."""
    t: Any = event.get("type")
    rule = JOB_POSTING_RULES.get(t) if type(t) is str else None
    if rule is None:
        return []
    try:
        return rule(job.snapshot, job.facts, event)
    except LedgerError:
        return []  # settld's worker skips a posting that raises; `ledger postings` reports it


def fold(events: list[Event] | tuple[Event, ...]) -> FoldState:
    """Fold a whole slice."""
    fs = FoldState()
    for event in events:
        fs.step(event)
    return fs
