"""The `artifacts` dispatcher consumer (04-artifacts.md §6, §10, §11).

For each job event it derives the build tasks anchored at that event, then, inside the turn's transaction
(`ctx.tx`) and through the repository `settlekit.store.artifacts`: reuses an artifact that already exists
(re-enqueueing it to the sink), or checks the quota, builds, stores and enqueues. Build, store, sink and the
dispatcher's cursor commit together, so a crash anywhere leaves no artifact and no delivery behind and the rerun
produces exactly one of each.

Linear cost: the consumer keeps its own per-job fold (`artifact_job_state`), resumed from the last triggering
event, so a task whose slice ends at the current event only folds the events appended since the previous
trigger; non-trigger events (heartbeats, …) are filtered out by the dispatcher and cost nothing.

BOOKED / RISK_SCORED: a CoverageCertificate is anchored at the first RISK_SCORED of the booking's own append
batch that names the booking (`payload.sourceEventId`); the consumer builds it when it reaches that event. A
RISK_SCORED appended in a later batch does not re-anchor.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from typing import Any, Final, Literal, Protocol

from settlekit import failpoints
from settlekit.artifacts.build import booking_wants_coverage, tasks_for_event
from settlekit.artifacts.builders import BuildTask, artifact_id, build_artifact
from settlekit.artifacts.state import FoldState
from settlekit.artifacts.types import CONSUMER_EVENT_TYPES, TRIGGERS
from settlekit.delivery.sink import WebhookDeliverySink
from settlekit.errors import SettlekitError
from settlekit.events.canonical import iso_millis, parse_json, storable_json
from settlekit.events.js import get, truthy
from settlekit.projections.artifact_store import ArtifactConflict, ArtifactQuotaExceeded, ArtifactStore
from settlekit.projections.sinks import DeliverySink
from settlekit.store import artifacts as repo
from settlekit.store.db import Tx

log = logging.getLogger("settlekit.artifacts")

CONSUMER_NAME: Final = "settlekit:artifacts"
TxContractResolver = Callable[[Tx, str, str], Mapping[str, Any] | None]


class ArtifactStateInvalid(SettlekitError):
    code = "ARTIFACT_STATE_INVALID"
    status = 500


class _SourceEvent(Protocol):
    """What the consumer reads from a dispatched event (`settlekit.store.streams.StoredEvent`)."""

    @property
    def tenant_id(self) -> str: ...

    @property
    def stream_id(self) -> str: ...

    @property
    def stream_type(self) -> str: ...

    @property
    def seq(self) -> int: ...

    @property
    def event(self) -> Mapping[str, Any]: ...


@dataclass(frozen=True)
class TaskOutcome:
    artifact_id: str
    artifact_type: str
    source_event_id: str | None
    created: bool
    enqueued: int


class ArtifactConsumer:
    """Dispatcher handler `(event, ctx)`; `handle(tx, event)` is the same with an explicit transaction."""

    def __init__(
        self,
        store: ArtifactStore | None = None,
        sink: DeliverySink | None = None,
        *,
        generated_at: Literal["source", "wall_clock"] = "source",
        clock: Callable[[], datetime] | None = None,
        contract_resolver: TxContractResolver | None = None,
        incremental: bool = True,
    ):
        if generated_at not in ("source", "wall_clock"):
            raise ValueError("generated_at must be 'source' or 'wall_clock'")
        self.store = store or ArtifactStore()
        self.sink: DeliverySink = sink or WebhookDeliverySink()
        self.generated_at_policy = generated_at
        self.clock = clock or (lambda: datetime.now(UTC))
        self.contract_resolver = contract_resolver
        self.incremental = incremental

    def __call__(self, event: _SourceEvent, ctx: Any) -> None:
        self.handle(ctx.tx, event)

    def consumer(self, name: str = CONSUMER_NAME, **options: Any) -> Any:
        """The dispatcher `Consumer` definition (shared delivery, filtered to the relevant event types). An event
        whose artifact conflicts with a stored one (two jobs of a tenant whose ids and event ids join to the same
        artifact id) or exceeds the tenant's quota is dead-lettered instead of halting every tenant's artifacts."""
        from settlekit.dispatch.model import Consumer, ErrorPolicy

        policy = options.pop("error_policy", None) or ErrorPolicy()
        policy = replace(policy, permanent=policy.permanent or (ArtifactConflict, ArtifactQuotaExceeded))
        return Consumer(name=name, handler=self, event_types=CONSUMER_EVENT_TYPES, error_policy=policy, **options)

    # ------------------------------------------------------------------ handling

    def handle(self, tx: Tx, se: _SourceEvent) -> list[TaskOutcome]:
        event = se.event
        if se.stream_type != "job" or event.get("type") not in CONSUMER_EVENT_TYPES:
            return []
        here, earlier = self._tasks(tx, se)
        outcomes: list[TaskOutcome] = []
        fs_here: list[FoldState] = []

        def fold_here() -> FoldState:
            if not fs_here:
                fs_here.append(self._fold_through(tx, se.tenant_id, se.stream_id, se.seq))
            return fs_here[0]

        for task, source in here:
            outcomes.append(self._run(tx, task, source, fold_here))
        for task, source, anchor_seq in earlier:
            outcomes.append(self._run(tx, task, source, self._fresh(tx, se, anchor_seq)))
        return outcomes

    def _fresh(self, tx: Tx, se: _SourceEvent, seq: int) -> Callable[[], FoldState]:
        return lambda: self._fold_fresh(tx, se.tenant_id, se.stream_id, seq)

    def _tasks(
        self, tx: Tx, se: _SourceEvent
    ) -> tuple[list[tuple[BuildTask, Mapping[str, Any]]], list[tuple[BuildTask, Mapping[str, Any], int]]]:
        """Tasks anchored at this event, and (rarely) tasks of this event anchored at an earlier one."""
        event = se.event
        tenant, job = se.tenant_id, se.stream_id
        etype = event.get("type")
        here: list[tuple[BuildTask, Mapping[str, Any]]] = []
        earlier: list[tuple[BuildTask, Mapping[str, Any], int]] = []
        if etype == "BOOKED":
            if booking_wants_coverage(event.get("payload")) and truthy(event.get("id")):
                risk = self._first_risk(tx, se, str(event["id"]))
                tasks = tasks_for_event(event, tenant, job, risk[1] if risk else None)
                if risk is None:
                    here += [(t, event) for t in tasks]
                elif risk[0] < se.seq:
                    earlier += [(t, event, risk[0]) for t in tasks]
                # else: built when the consumer reaches that RISK_SCORED
        elif etype in TRIGGERS:
            here += [(t, event) for t in tasks_for_event(event, tenant, job)]
        if etype == "RISK_SCORED":
            booked = self._booking_anchored_here(tx, se)
            if booked is not None:
                here += [(t, booked) for t in tasks_for_event(booked, tenant, job, event.get("chainHash"))]
        return here, earlier

    def _batch_id(self, tx: Tx, se: _SourceEvent) -> Any:
        return repo.event_batch_id(tx, se.tenant_id, se.stream_id, se.seq)

    def _first_risk(self, tx: Tx, se: _SourceEvent, booking_id: str) -> tuple[int, str] | None:
        """(seq, chainHash) of the first RISK_SCORED in this event's append batch naming `booking_id`."""
        rows = repo.batch_risk_scored(tx, se.tenant_id, se.stream_id, self._batch_id(tx, se))
        for seq, text in rows:
            risk = parse_json(text)
            if get(risk.get("payload"), "sourceEventId") == booking_id and truthy(risk.get("chainHash")):
                return int(seq), str(risk["chainHash"])
        return None

    def _booking_anchored_here(self, tx: Tx, se: _SourceEvent) -> Mapping[str, Any] | None:
        """The BOOKED of this RISK_SCORED's batch whose certificate this event anchors, if any."""
        source = get(se.event.get("payload"), "sourceEventId")
        if type(source) is not str:
            return None
        row = repo.batch_booked(tx, se.tenant_id, se.stream_id, source, self._batch_id(tx, se))
        if row is None or int(row[0]) >= se.seq:
            return None
        first = self._first_risk(tx, se, source)
        if first is None or first[0] != se.seq:
            return None
        booked: dict[str, Any] = parse_json(row[1])
        return booked

    def _run(
        self, tx: Tx, task: BuildTask, source: Mapping[str, Any], fold: Callable[[], FoldState]
    ) -> TaskOutcome:
        tenant = task.tenant_id
        a_id = artifact_id(task.artifact_type, task.job_id, source, task.source_chain_hash)
        existing = self.store.get(tx, tenant, a_id)
        if existing is not None:
            self.store.check_reuse(existing, task.artifact_type, task.source_chain_hash)
            enqueued = self.sink.enqueue(tx, tenant, existing.artifact)
            log.info("artifact.reuse %s %s (%d enqueued)", tenant, a_id, enqueued)
            return TaskOutcome(a_id, task.artifact_type, task.source_event_id, False, enqueued)
        self.store.check_quota(tx, tenant, task.job_id, task.artifact_type)
        resolver = None
        if self.contract_resolver is not None:
            tx_resolver = self.contract_resolver

            def resolver(contract_hash: str) -> Mapping[str, Any] | None:
                return tx_resolver(tx, tenant, contract_hash)

        generated = iso_millis(self.clock()) if self.generated_at_policy == "wall_clock" else None
        artifact = build_artifact(fold(), task, source, generated_at=generated, contract_resolver=resolver)
        failpoints.hit("artifacts.after_build_before_store")
        result = self.store.put(tx, tenant, artifact)
        failpoints.hit("artifacts.after_store_before_deliveries")
        # the document built is the one stored (or reused: the same artifactHash, so the same document)
        enqueued = self.sink.enqueue(tx, tenant, artifact)
        log.info("artifact.built %s %s %s (%d enqueued)", tenant, a_id, artifact["artifactHash"], enqueued)
        return TaskOutcome(a_id, task.artifact_type, task.source_event_id, result.created, enqueued)

    # ------------------------------------------------------------------ per-job fold

    def _fold_through(self, tx: Tx, tenant: str, job: str, seq: int) -> FoldState:
        """The fold through `seq`, resumed from the saved per-job state when it is not ahead of `seq`."""
        row = repo.load_job_state(tx, tenant, job) if self.incremental else None
        if row is not None and int(row[0]) <= seq:
            fs = FoldState.from_json(parse_json(row[1]))
            if fs.count != int(row[0]):
                raise ArtifactStateInvalid(f"saved artifact state of {job} is inconsistent", jobId=job)
        else:
            fs = FoldState()
        self._advance(tx, tenant, job, fs, seq)
        if self.incremental and (row is None or seq > int(row[0])):
            self._save(tx, tenant, job, fs)
        return fs

    def _fold_fresh(self, tx: Tx, tenant: str, job: str, seq: int) -> FoldState:
        fs = FoldState()
        self._advance(tx, tenant, job, fs, seq)
        return fs

    def _advance(self, tx: Tx, tenant: str, job: str, fs: FoldState, seq: int) -> None:
        rows = repo.events_between(tx, tenant, job, fs.count, seq)
        for row_seq, text in rows:
            event = parse_json(text)
            head = fs.head
            if int(row_seq) != fs.count + 1 or (head is not None and event.get("prevChainHash") != head["chainHash"]):
                raise ArtifactStateInvalid(f"stream {job} does not continue the artifact fold at seq {row_seq}",
                                           jobId=job, seq=int(row_seq))
            fs.step(event)
        if fs.count != seq:
            raise ArtifactStateInvalid(f"stream {job} has no event at seq {seq}", jobId=job, seq=seq)

    def _save(self, tx: Tx, tenant: str, job: str, fs: FoldState) -> None:
        text = storable_json(fs.to_json())  # a lone surrogate (imported history) stored as its escape
        repo.save_job_state(tx, tenant, job, fs.count, text)


def artifacts_consumer(
    store: ArtifactStore | None = None, sink: DeliverySink | None = None, **options: Any
) -> Any:
    """A ready `Consumer` named `settlekit:artifacts` (options go to ArtifactConsumer)."""
    return ArtifactConsumer(store, sink, **options).consumer()
