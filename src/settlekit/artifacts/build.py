"""Stream-level entry points: the outbox (build tasks) of a stream, and every artifact of a stream built in ONE
fold — each task is built when the fold reaches its anchor, from the state carried forward (04-artifacts.md
§6, §11). settld re-reduced every prefix instead (O(n²))."""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from typing import Any

from settlekit.artifacts import types as T
from settlekit.artifacts.builders import BuildTask, ContractResolver, build_artifact
from settlekit.artifacts.state import FoldState
from settlekit.errors import NotFoundError, ValidationError
from settlekit.events.js import get, js_is_safe_integer, js_nonblank, truthy
from settlekit.jobs.reducer import DEFAULT_TENANT_ID

Event = Mapping[str, Any]


def stream_identity(events: Sequence[Event]) -> tuple[str, str]:
    """(tenant id, job id) of a job stream: the JOB_CREATED payload's tenantId (default tenant_default) and the
    stream id."""
    if not events:
        raise ValidationError("a job stream needs at least its JOB_CREATED event", code="ARTIFACT_SLICE_EMPTY")
    first = events[0]
    tenant: Any = get(first.get("payload"), "tenantId") or DEFAULT_TENANT_ID
    job_id: Any = first.get("streamId")
    if not js_nonblank(job_id):
        raise ValidationError("the stream has no streamId", code="SCHEMA_INVALID")
    return str(tenant), job_id


def booking_wants_coverage(payload: Any) -> bool:
    """BOOKED triggers a CoverageCertificate only for a required/paid/tiered coverage policy (§6)."""
    cp = get(get(payload, "policySnapshot"), "coveragePolicy")
    required = get(cp, "required") is True
    tier: Any = get(cp, "coverageTierId")
    has_tier = js_nonblank(tier)
    fee = get(cp, "feeCentsPerJob")
    has_fee = js_is_safe_integer(fee) and fee > 0
    return required or has_fee or has_tier


def tasks_for_event(
    event: Event, tenant_id: str, job_id: str, risk_anchor: str | None = None
) -> list[BuildTask]:
    """Build tasks triggered by one event. `risk_anchor`: for BOOKED, the chain hash of the first RISK_SCORED
    in the same append batch whose `payload.sourceEventId` is the booking's id (it re-anchors the certificate)."""
    t: Any = event.get("type")
    types = T.TRIGGERS.get(t) if type(t) is str else None
    if not types:
        return []
    if event.get("type") == "BOOKED" and not booking_wants_coverage(event.get("payload")):
        return []
    if not truthy(event.get("id")) or not truthy(event.get("chainHash")):
        return []
    anchor = risk_anchor if event.get("type") == "BOOKED" and risk_anchor else event["chainHash"]
    return [
        BuildTask(
            tenant_id=tenant_id,
            job_id=job_id,
            source_event_id=event["id"],
            source_event_type=event["type"],
            source_chain_hash=anchor,
            source_at=event.get("at"),
            artifact_type=t,
        )
        for t in types
    ]


def derive_tasks(
    events: Sequence[Event],
    *,
    tenant_id: str | None = None,
    job_id: str | None = None,
    batch_ids: Sequence[Any] | None = None,
) -> list[BuildTask]:
    """Every build task of a stream, in trigger order, deduplicated on (tenant, job, source event, type).

    `batch_ids[i]` is the append batch of `events[i]`; without it the whole list counts as one batch (as when
    settld derives the outbox of one append, and as in the golden vectors).
    """
    if tenant_id is None or job_id is None:
        t, j = stream_identity(events)
        tenant_id = tenant_id or t
        job_id = job_id or j
    if batch_ids is not None and len(batch_ids) != len(events):
        raise ValidationError("batch_ids must be parallel to events", code="SCHEMA_INVALID")
    first_risk: dict[tuple[Any, str], str] = {}
    for i, e in enumerate(events):
        if e.get("type") != "RISK_SCORED" or not truthy(e.get("chainHash")):
            continue
        source = get(e.get("payload"), "sourceEventId")
        if type(source) is str:
            first_risk.setdefault((batch_ids[i] if batch_ids is not None else None, source), e["chainHash"])
    tasks: list[BuildTask] = []
    seen: set[tuple[str, str, Any, str]] = set()
    for i, e in enumerate(events):
        if type(e.get("type")) is not str or e["type"] not in T.TRIGGERS:
            continue
        risk = None
        if e.get("type") == "BOOKED" and type(e.get("id")) is str:
            risk = first_risk.get((batch_ids[i] if batch_ids is not None else None, e["id"]))
        for task in tasks_for_event(e, tenant_id, job_id, risk):
            key = (tenant_id, job_id, task.source_event_id, task.artifact_type)
            if key not in seen:
                seen.add(key)
                tasks.append(task)
    return tasks


def derive_outbox(
    events: Sequence[Event],
    *,
    tenant_id: str | None = None,
    job_id: str | None = None,
    batch_ids: Sequence[Any] | None = None,
) -> list[dict[str, Any]]:
    """The vectors' `artifactOutbox`: one `ARTIFACT_ENQUEUE` message per (source event, artifact type)."""
    return [t.to_outbox() for t in derive_tasks(events, tenant_id=tenant_id, job_id=job_id, batch_ids=batch_ids)]


def iter_artifacts(
    events: Sequence[Event],
    tasks: Sequence[BuildTask] | None = None,
    *,
    generated_at: str | None = None,
    contract_resolver: ContractResolver | None = None,
    batch_ids: Sequence[Any] | None = None,
) -> Iterator[tuple[Event, list[tuple[BuildTask, dict[str, Any]]]]]:
    """One fold over `events`; at each event that anchors tasks, yield `(event, [(task, artifact), …])`.

    `tasks` defaults to `derive_tasks(events)`. A task with no anchor is built at the end of the stream. The
    fold stops at the last anchor. Raises ATCHAINHASH_NOT_FOUND for an anchor that is not in the stream.
    """
    if tasks is None:
        tasks = derive_tasks(events, batch_ids=batch_ids)
    pending: dict[str | None, list[BuildTask]] = {}
    for task in tasks:
        pending.setdefault(task.source_chain_hash, []).append(task)
    wanted_sources = {t.source_event_id for t in tasks if t.source_event_id is not None}
    first_index: dict[str, tuple[int, Event]] = {}
    at_end = pending.pop(None, None)
    fs = FoldState()
    last = len(events) - 1
    for i, event in enumerate(events):
        if not pending and at_end is None:
            return
        fs.step(event)
        eid = event.get("id")
        if type(eid) is str and eid in wanted_sources and eid not in first_index:
            first_index[eid] = (i, event)
        batch = pending.pop(event.get("chainHash"), None)
        if i == last and at_end is not None:
            batch = (batch or []) + at_end
            at_end = None
        if batch:
            yield event, _build_batch(fs, batch, first_index, generated_at, contract_resolver)
    if pending:
        missing = next(iter(pending))
        raise NotFoundError(f"chain hash {missing} is not in the stream", code="ATCHAINHASH_NOT_FOUND",
                            atChainHash=missing)


def _build_batch(
    fs: FoldState,
    batch: list[BuildTask],
    first_index: Mapping[str, tuple[int, Event]],
    generated_at: str | None,
    contract_resolver: ContractResolver | None,
) -> list[tuple[BuildTask, dict[str, Any]]]:
    """The artifacts of the tasks anchored at the fold's head, each with its source event if already seen."""
    built = []
    for task in batch:
        found = first_index.get(task.source_event_id) if task.source_event_id is not None else None
        source = found[1] if found is not None else None
        artifact = build_artifact(fs, task, source, generated_at=generated_at, contract_resolver=contract_resolver)
        built.append((task, artifact))
    return built


def build_all_report(
    events: Sequence[Event],
    *,
    generated_at: str | None = None,
    contract_resolver: ContractResolver | None = None,
    batch_ids: Sequence[Any] | None = None,
) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """Every artifact of a stream in outbox order, plus the build requests that give no artifact (the vectors'
    `artifactFailures`), from one fold.

    As in settld's worker, an artifact id is built once: a later request for the same id (e.g. two CreditMemos
    for one `creditId`) reuses the stored artifact when its anchor is the same (`reused: true`) and fails
    otherwise (`reused: false`); neither adds an artifact.
    """
    tasks = derive_tasks(events, batch_ids=batch_ids)
    by_task: dict[int, dict[str, Any]] = {}
    index = {id(t): i for i, t in enumerate(tasks)}
    for _, built in iter_artifacts(events, tasks, generated_at=generated_at, contract_resolver=contract_resolver):
        for task, artifact in built:
            by_task[index[id(task)]] = artifact
    artifacts: list[dict[str, Any]] = []
    failures: list[dict[str, Any]] = []
    first: dict[Any, dict[str, Any]] = {}
    for i, task in enumerate(tasks):
        artifact = by_task[i]
        prior = first.get(artifact.get("artifactId"))
        if prior is None:
            first[artifact.get("artifactId")] = artifact
            artifacts.append(artifact)
            continue
        same = prior.get("artifactType") == task.artifact_type and (
            task.source_chain_hash is None or prior.get("atChainHash") == task.source_chain_hash
        )
        failures.append(
            {
                "sourceEventId": task.source_event_id,
                "sourceEventType": task.source_event_type,
                "artifactType": task.artifact_type,
                "reused": same,
            }
        )
    return artifacts, failures


def build_all(
    events: Sequence[Event],
    *,
    generated_at: str | None = None,
    contract_resolver: ContractResolver | None = None,
    batch_ids: Sequence[Any] | None = None,
) -> list[dict[str, Any]]:
    """Every artifact of a stream, in outbox order (the vectors' `artifacts`); see `build_all_report`."""
    return build_all_report(
        events, generated_at=generated_at, contract_resolver=contract_resolver, batch_ids=batch_ids
    )[0]


def task_for(
    events: Sequence[Event],
    artifact_type: str,
    source_event_id: str | None = None,
    *,
    at_chain_hash: str | None = None,
    tenant_id: str | None = None,
    batch_ids: Sequence[Any] | None = None,
) -> BuildTask:
    """The build task for one artifact: the stream's own task for (source event, type) when it has one (so a
    BOOKED keeps its RISK_SCORED anchor), else a task anchored at `at_chain_hash` or the source event.
    Without `source_event_id`: the stream's latest task of that type."""
    a_type = T.require_artifact_type(artifact_type)
    t_id, job_id = stream_identity(events)
    tenant = tenant_id or t_id
    tasks = [t for t in derive_tasks(events, tenant_id=tenant, job_id=job_id, batch_ids=batch_ids)
             if t.artifact_type == a_type]
    if source_event_id is None:
        if not tasks:
            raise NotFoundError(f"the stream triggers no {a_type}", code="ARTIFACT_SOURCE_NOT_FOUND",
                                artifactType=a_type)
        task = tasks[-1]
    else:
        own = [t for t in tasks if t.source_event_id == source_event_id]
        if own:
            task = own[0]
        else:
            source = next((e for e in events if e.get("id") == source_event_id), None)
            if source is None:
                raise NotFoundError(f"event {source_event_id} is not in the stream",
                                    code="ARTIFACT_SOURCE_NOT_FOUND", sourceEventId=source_event_id)
            task = BuildTask(tenant, job_id, source_event_id, source.get("type"), source.get("chainHash"),
                             source.get("at"), a_type)
    if at_chain_hash is not None and at_chain_hash != task.source_chain_hash:
        task = BuildTask(task.tenant_id, task.job_id, task.source_event_id, task.source_event_type, at_chain_hash,
                         task.source_at, task.artifact_type)
    return task


def build_one(
    events: Sequence[Event],
    artifact_type: str,
    source_event_id: str | None = None,
    generated_at: str | None = None,
    *,
    at_chain_hash: str | None = None,
    tenant_id: str | None = None,
    contract_resolver: ContractResolver | None = None,
    batch_ids: Sequence[Any] | None = None,
) -> dict[str, Any]:
    """One artifact, folding the stream once up to its anchor (see `task_for` for how the task is chosen)."""
    task = task_for(events, artifact_type, source_event_id, at_chain_hash=at_chain_hash, tenant_id=tenant_id,
                    batch_ids=batch_ids)
    for _, built in iter_artifacts(events, [task], generated_at=generated_at, contract_resolver=contract_resolver):
        return built[0][1]
    raise NotFoundError("the stream is empty", code="ARTIFACT_SLICE_EMPTY")  # pragma: no cover
