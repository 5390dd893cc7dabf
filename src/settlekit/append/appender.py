"""The append use case, written once for both backends.

Append = validate (envelope, size, time, signers) → check idempotency → domain step (reducer, ledger dry run) →
one `CommitBatch` that the recorder writes in ONE transaction: compare-and-swap the stream head, insert the
events, the snapshot, the domain's rows and the idempotency record. A failure anywhere leaves nothing stored.
"""

from __future__ import annotations

import asyncio
import functools
from collections.abc import Callable, Coroutine, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, Protocol, TypedDict, TypeVar, Unpack

from settlekit.append import idempotency as idempotent
from settlekit.append.domain import DomainOutcome, PassThroughDomain, ReadWouldBlock, StreamDomain
from settlekit.append.idempotency import Idempotency
from settlekit.append.policy import (
    HISTORY,
    LIVE,
    AppendPolicy,
    check_not_in_future,
    check_server_draft_actor,
    check_server_draft_type,
    check_signed_actor,
    check_signer,
)
from settlekit.append.result import AppendResult
from settlekit.append.state_cache import CachedStream, CachedStreamStale, StreamStateCache
from settlekit.errors import ConflictError, SettlekitError, ValidationError
from settlekit.events.canonical import (
    canonical_json,
    find_lone_surrogate,
    require_well_formed,
    storable_json,
    storable_size,
)
from settlekit.events.envelope import (
    Event,
    Signer,
    check_envelope_shape,
    compute_payload_hash,
    finalize_with_text,
    is_event_id,
    load_public_key,
    make_draft,
    now_iso,
    verify_link,
)
from settlekit.events.js import js_nonblank
from settlekit.events.randomness import random_uuid
from settlekit.events.recorded import check_nesting, recorded_envelope
from settlekit.store.db import Database, Tx
from settlekit.store.events import (
    GROUP_WINDOW,
    MAX_QUEUED_APPENDS,
    AfterCommit,
    CommitBatch,
    CommitOutcome,
    Committed,
    DuplicateKey,
    EventRecorder,
    HeadMismatch,
    KeyInactive,
)
from settlekit.store.signer_keys import SignerKey, SignerKeys
from settlekit.store.streams import StreamHead, StreamRead, Streams

_MISSING: Any = object()
_FINALIZED_FIELDS = frozenset(("payloadHash", "chainHash", "signature", "signerKeyId", "prevChainHash"))
_DRAFT_FIELDS = frozenset(("type", "actor", "payload", "id", "at"))
DEFAULT_MAX_PAYLOAD_BYTES = 256 * 1024
# At most this many signer key ids are read with the stream head before the events are checked.
_PREFETCHED_KEYS = 16

_T = TypeVar("_T")

# A rule about the stream, checked on its head (None: no stream yet) before anything else: it raises to refuse.
StreamPrecondition = Callable[[StreamHead | None], None]


class _Database(Protocol):
    """How one append reaches the database: `read` runs a blocking read, `commit` hands the batch to the recorder,
    `domain_step` runs the domain's step (`step(may_block)`), whose rare reads may block. Two ways: on the
    calling thread (Appender.append) and on an event loop (Appender.append_async)."""

    async def read(self, fn: Callable[..., _T], *args: Any) -> _T: ...

    async def commit(self, batch: CommitBatch, after: AfterCommit | None) -> CommitOutcome: ...

    async def domain_step(self, step: Callable[[bool], _T]) -> _T: ...


class _OnThisThread:
    """Everything on the calling thread: nothing is awaited that suspends, so the append runs to its end at once."""

    __slots__ = ("recorder",)

    def __init__(self, recorder: EventRecorder):
        self.recorder = recorder

    async def read(self, fn: Callable[..., _T], *args: Any) -> _T:
        return fn(*args)

    async def commit(self, batch: CommitBatch, after: AfterCommit | None) -> CommitOutcome:
        return self.recorder.commit(batch, after)

    async def domain_step(self, step: Callable[[bool], _T]) -> _T:
        return step(True)


class _OnTheLoop:
    """On an event loop: the commit waits for the group commit writer without holding a thread; a read runs on a
    worker thread; the domain step runs on the loop, and again on a worker thread in the rare case it needs a read
    that is not cached (ReadWouldBlock)."""

    __slots__ = ("recorder",)

    def __init__(self, recorder: EventRecorder):
        self.recorder = recorder

    async def read(self, fn: Callable[..., _T], *args: Any) -> _T:
        return await asyncio.to_thread(fn, *args)

    async def commit(self, batch: CommitBatch, after: AfterCommit | None) -> CommitOutcome:
        return await self.recorder.commit_async(batch, after)

    async def domain_step(self, step: Callable[[bool], _T]) -> _T:
        try:
            return step(False)
        except ReadWouldBlock:
            return await asyncio.to_thread(step, True)


def _run_to_end(append: Coroutine[Any, Any, AppendResult]) -> AppendResult:
    """Run an append on `_OnThisThread`: its awaits never suspend, so one step runs it whole."""
    try:
        append.send(None)
    except StopIteration as done:
        result: AppendResult = done.value
        return result
    append.close()
    raise RuntimeError("an append on the calling thread waited for an event loop")


class AppendOptions(TypedDict, total=False):
    """The options of an append (Appender.append documents them); an absent expected_prev_chain_hash is not
    the same as None (the stream must be empty)."""

    expected_prev_chain_hash: str | None
    expected_version: int | None
    idempotency: Idempotency | None
    correlation_id: str | None
    causation_id: str | None
    policy: AppendPolicy
    precondition: StreamPrecondition | None
    prefetched: StreamRead | CachedStream | None
    active_api_key: str | None


@dataclass(frozen=True, slots=True)
class _Request:
    """Who appends where, and what goes with the append whichever path it takes."""

    tenant_id: str
    stream_id: str
    database: _Database
    idempotency: Idempotency | None
    correlation_id: str | None
    causation_id: str | None
    recorded: bool = False  # recorded history (AppendPolicy.recorded): settld's own rules for what it stored
    active_api_key: str | None = None  # the commit checks that this API key is still active
    from_cache: bool = False  # the stream's state came from the stream cache


@dataclass(frozen=True, slots=True)
class _StreamState:
    """The stream head and stored state, and the registered signer keys among `key_ids`, read in one statement."""

    head: StreamHead | None
    snapshot: dict[str, Any] | None
    keys: dict[str, SignerKey]
    key_ids: frozenset[str]


class Appender:
    """Appends to tenant-scoped hash-chained streams on one Database. `streams` and `signer_keys` are the
    repositories it reads (and that callers use for reads and for the key registry). `group_commit`: concurrent
    appends of this process are committed together (store.events.GroupCommitter; the API uses it), at most
    `max_queued` waiting at once (one more is OverloadedError)."""

    def __init__(self, db: Database, *, server_signer: Signer | None = None,
                 domain: StreamDomain | None = None, max_payload_bytes: int = DEFAULT_MAX_PAYLOAD_BYTES,
                 clock: Callable[[], datetime] | None = None, group_commit: bool = False,
                 max_queued: int = MAX_QUEUED_APPENDS, cached_streams: int = 0,
                 group_window: float = GROUP_WINDOW):
        self.db = db
        self.server_signer = server_signer
        self.domain: StreamDomain = domain or PassThroughDomain()
        self.max_payload_bytes = max_payload_bytes
        self.clock = clock or (lambda: datetime.now(UTC))
        self.recorder = EventRecorder(db, group_commit=group_commit, max_queued=max_queued, group_window=group_window)
        self.streams = Streams(db)
        self.signer_keys = SignerKeys(db)
        self.stream_cache = StreamStateCache(cached_streams)

    def close(self) -> None:
        """Stop the group commit writer, if any (the appends already queued are written first)."""
        self.recorder.close()

    def append(self, tenant_id: str, stream_id: str, items: Sequence[Mapping[str, Any]],
               **options: Unpack[AppendOptions]) -> AppendResult:
        """Append drafts (`{type, actor, payload}`) or client-finalized envelopes to one stream, atomically.

        Give the expected head as `expected_prev_chain_hash` (None = the stream must be empty) or
        `expected_version` (0 = empty). Client-finalized events carry their own prevChainHash; an expected head
        given with them must match too. `policy`: see
        AppendPolicy (`HISTORY` takes client-finalized envelopes only). `precondition` is checked on the stream
        head before anything else; that read (with the signer keys the items name) then serves the append.
        `prefetched`: the same read made by the caller just before (Streams.api_key_and_stream), used instead,
        or the stream's entry in `stream_cache` (a CachedStream: an append from it that does not go through
        raises CachedStreamStale, to be done again from a fresh read). `active_api_key`: the commit writes
        nothing unless this API key is still active (CachedStreamStale with a CachedStream).
        `idempotency`, `correlation_id`, `causation_id`: stored with the append. With `cached_streams` > 0
        every live append that commits keeps the stream's new head and state in `stream_cache`.
        """
        return _run_to_end(self._append(_OnThisThread(self.recorder), tenant_id, stream_id, items, **options))

    async def append_async(self, tenant_id: str, stream_id: str, items: Sequence[Mapping[str, Any]],
                           **options: Unpack[AppendOptions]) -> AppendResult:
        """`append` on an event loop: the checks and the domain step run on the loop; the commit waits for the
        group commit writer without holding a thread, and the rarer reads (idempotency, conflicts) run on one."""
        return await self._append(_OnTheLoop(self.recorder), tenant_id, stream_id, items, **options)

    async def _append(
        self,
        database: _Database,
        tenant_id: str,
        stream_id: str,
        items: Sequence[Mapping[str, Any]],
        *,
        expected_prev_chain_hash: str | None = _MISSING,
        expected_version: int | None = None,
        idempotency: Idempotency | None = None,
        correlation_id: str | None = None,
        causation_id: str | None = None,
        policy: AppendPolicy = LIVE,
        precondition: StreamPrecondition | None = None,
        prefetched: StreamRead | CachedStream | None = None,
        active_api_key: str | None = None,
    ) -> AppendResult:
        """The append, top to bottom: the stream read (when a precondition or a prefetch asks for it first),
        the items' checks, an idempotent replay, then drafts or finalized events up to their commit."""
        state = None
        if prefetched is not None and (prefetched.tenant_id, prefetched.stream_id) == (tenant_id, stream_id):
            head, snapshot = prefetched.head_and_snapshot()
            state = _StreamState(head, snapshot, prefetched.keys, prefetched.key_ids)
        request = _Request(tenant_id, stream_id, database, idempotency, correlation_id, causation_id, policy.recorded,
                           active_api_key, isinstance(prefetched, CachedStream) and state is not None)
        try:
            return await self._append_read(request, items, state, expected_prev_chain_hash, expected_version,
                                           policy, precondition)
        except (_CachedCommitRefused, SettlekitError) as exc:
            if not request.from_cache or (isinstance(exc, SettlekitError) and exc.status >= 500):
                raise  # not a guess; or the database or this process failed, which a fresh read would not mend
            self.stream_cache.drop(tenant_id, stream_id)
            raise CachedStreamStale() from exc

    async def _append_read(self, request: _Request, items: Sequence[Mapping[str, Any]], state: _StreamState | None,
                           expected_prev_chain_hash: str | None, expected_version: int | None, policy: AppendPolicy,
                           precondition: StreamPrecondition | None) -> AppendResult:
        """`_append` once the stream's state is at hand (`state`), or to be read here."""
        database, tenant_id, stream_id = request.database, request.tenant_id, request.stream_id
        idempotency = request.idempotency
        if precondition is not None:
            if state is None:
                state = await self._read_state(database, tenant_id, stream_id, named_key_ids(items))
            precondition(state.head)
        client_finalized = _check_items(tenant_id, stream_id, items, policy)
        if idempotency is not None:
            # finalized events carry their head in the body: a header beside them is not part of the request's
            # identity (a retry with or without it is the same request)
            if client_finalized:
                self._accept_earlier_hash(idempotency, stream_id, items, expected_prev_chain_hash, expected_version)
            replay = await self._prepared_replay(
                request, idempotency, items, _MISSING if client_finalized else expected_prev_chain_hash,
                expected_version)
            if replay is not None:
                return replay
        try:
            if client_finalized:
                result = await self._append_finalized(request, items, policy, state,
                                                      expected_prev_chain_hash, expected_version)
            else:
                result = await self._append_drafts(request, items, expected_prev_chain_hash, expected_version,
                                                   state)
        except _IdempotencyRace:
            return await self._answer_after_race(request)
        except SettlekitError:
            # A concurrent request with the same key may have committed first (its events moved the head, so
            # this attempt conflicted): its stored answer is the answer.
            replay = await self._stored_answer(request)
            if replay is None:
                raise
            return replay
        if result.already_exists:
            replay = await self._stored_answer(request)
            if replay is not None:
                return replay
        return result

    async def _prepared_replay(self, request: _Request, idempotency: Idempotency,
                               items: Sequence[Mapping[str, Any]], expected_prev_chain_hash: str | None,
                               expected_version: int | None) -> AppendResult | None:
        """Fix the request's idempotency hash (the expected head is part of it); its stored answer, if any."""
        idempotent.prepare(idempotency, request.stream_id,
                           None if expected_prev_chain_hash is _MISSING else expected_prev_chain_hash,
                           expected_version, items)
        return await self._stored_answer(request)

    @staticmethod
    def _accept_earlier_hash(idempotency: Idempotency, stream_id: str, items: Sequence[Mapping[str, Any]],
                             expected_prev_chain_hash: Any, expected_version: int | None) -> None:
        """Keys stored while an expected head given with finalized events was part of their hash still replay."""
        if expected_prev_chain_hash is _MISSING or idempotency.request_hash is not None:
            return
        idempotency.earlier_hashes = (idempotent.append_request_hash(
            idempotency, stream_id, expected_prev_chain_hash, expected_version, items),)

    async def _stored_answer(self, request: _Request) -> AppendResult | None:
        """The answer recorded under the request's idempotency key, if it has one and it is recorded."""
        if request.idempotency is None:
            return None
        return await request.database.read(idempotent.replay, self.db, request.tenant_id, request.idempotency)

    async def _answer_after_race(self, request: _Request) -> AppendResult:
        """A concurrent request with the same idempotency key recorded its answer first: that is the answer."""
        assert request.idempotency is not None
        replay = await self._stored_answer(request)
        if replay is None:
            raise ConflictError("idempotency record vanished during a concurrent append",
                                code="IDEMPOTENCY_CONFLICT") from None
        return replay

    async def _read_state(self, database: _Database, tenant_id: str, stream_id: str,
                          key_ids: frozenset[str]) -> _StreamState:
        head, snapshot, keys = await database.read(self.streams.head_snapshot_and_keys, tenant_id, stream_id,
                                                   key_ids)
        return _StreamState(head, snapshot, keys, key_ids)

    async def _append_drafts(self, request: _Request, items: Sequence[Mapping[str, Any]],
                             expected_prev_chain_hash: Any, expected_version: int | None,
                             state: _StreamState | None) -> AppendResult:
        """Server drafts: the server fills id, at and the chain link, then hashes and signs them. `state`: the
        stream as already read, if it was."""
        tenant_id, stream_id = request.tenant_id, request.stream_id
        if expected_prev_chain_hash is _MISSING and expected_version is None:
            raise SettlekitError("server-draft append needs expected_prev_chain_hash or expected_version",
                                 code="PRECONDITION_REQUIRED", status=428)
        at = now_iso()
        drafts = [self._draft_from(stream_id, item, i, at) for i, item in enumerate(items)]
        for i, draft in enumerate(drafts):
            check_server_draft_actor(draft, i)
            check_server_draft_type(draft, i, self.domain.required_signer(draft["type"], draft["actor"]["type"]))
        head = None
        snapshot: dict[str, Any] | None = None
        if state is not None or expected_prev_chain_hash is _MISSING or self._domain_has_state():
            if state is not None:
                head, snapshot = state.head, state.snapshot
            else:
                head, snapshot = await request.database.read(self.streams.head_and_snapshot, tenant_id, stream_id)
            if expected_version is not None and (head.seq if head else 0) != expected_version:
                raise _version_conflict(expected_version, head)
            if expected_prev_chain_hash is not _MISSING:
                current = head.chain_hash if head else None
                if current != expected_prev_chain_hash:
                    raise _hash_conflict(expected_prev_chain_hash, current)
            prev = head.chain_hash if head else None
        else:
            prev = expected_prev_chain_hash
        snapshot = await self._current_snapshot(request, head, snapshot)
        drafts = self.domain.prepare_drafts(snapshot, drafts)
        events: list[Event] = []
        jsons: list[str] = []
        link = prev
        for i, draft in enumerate(drafts):
            event, text, size = finalize_with_text(draft, link, self.server_signer)
            if size > self.max_payload_bytes:
                raise self._too_large(i, size)
            events.append(event)
            jsons.append(text)
            link = event["chainHash"]
        return await self._commit(request, events, jsons, prev=prev, expected_version=expected_version,
                                  head=head, snapshot=snapshot, keys_read=state)

    async def _append_finalized(self, request: _Request, items: Sequence[Mapping[str, Any]],
                                policy: AppendPolicy, state: _StreamState | None,
                                expected_prev_chain_hash: Any = _MISSING,
                                expected_version: int | None = None) -> AppendResult:
        """Client-finalized envelopes: shapes, time, chain links, signatures and the signer policy checked.
        `state`: the stream as already read, if it was (else it is read here, with the signer keys). An expected
        head given besides the events' own prevChainHash must be the head too (a replay of stored events is
        still answered as one)."""
        tenant_id, stream_id = request.tenant_id, request.stream_id
        events: list[Event] = []
        now = self.clock()
        for i, item in enumerate(items):
            if policy.recorded:
                event = recorded_envelope(item, i)
                check_nesting(event, i)
            else:
                event = dict(item)
                versions = [event.pop(name) for name in ("schemaVersion", "schema_version") if name in event]
                if any(isinstance(v, bool) or v != 1 for v in versions):  # True == 1 in Python, not in JSON
                    raise ValidationError(f"event {i}: schemaVersion must be 1", code="SCHEMA_INVALID", index=i)
                check_envelope_shape(event, i)
            if event["streamId"] != stream_id:
                raise ValidationError(f"event {i}: streamId {event['streamId']!r} is not {stream_id!r}",
                                      code="SCHEMA_INVALID", index=i, field="streamId")
            self._check_size(event, i)
            check_not_in_future(event["at"], now, i, recorded=policy.recorded)
            events.append(event)
        prev = events[0]["prevChainHash"]
        if state is None or not _signer_key_ids(events) <= state.key_ids:
            state = await self._read_state(request.database, tenant_id, stream_id, _signer_key_ids(events))
        head, snapshot = state.head, state.snapshot
        current = head.chain_hash if head else None
        if prev != current:
            existing = await self._find_existing(request, events)
            if existing is not None:
                return existing
            raise _hash_conflict(prev, current)
        if expected_prev_chain_hash is not _MISSING and expected_prev_chain_hash != current:
            raise _hash_conflict(expected_prev_chain_hash, current)
        if expected_version is not None and (head.seq if head else 0) != expected_version:
            raise _version_conflict(expected_version, head)
        keys = self._signer_keys_of(tenant_id, events, state)
        snapshot = await self._current_snapshot(request, head, snapshot)
        link = prev
        unsigned = 0
        recorded = policy.recorded
        for i, event in enumerate(events):
            verify_link(event, link, i, lambda kid: _public_key(keys, kid), node_base64=recorded)
            required = self._required_signer(event["type"], event["actor"]["type"], recorded)
            either = {self._required_signer(event["type"], kind, recorded) for kind in ("robot", "operator")}
            check_signed_actor(event, i, required, robot_or_operator=either == {"robot", "operator"})
            unsigned += not check_signer(event, i, keys, required, policy)
            link = event["chainHash"]
        result = await self._commit(request, events, None, prev=prev, expected_version=expected_version,
                                    head=head, snapshot=snapshot, client_finalized=True, keys_read=state)
        if not policy.is_live and not result.already_exists:
            result.unsigned = unsigned
            result.lone_surrogates = sum(find_lone_surrogate(e["payload"]) is not None for e in events)
        return result

    def _required_signer(self, event_type: str, actor_type: str, recorded: bool) -> str | None:
        """The signer the event's type needs (the domain's table). Recorded history: a type outside the table
        needs none of its own (the actor's key, if it signed, as settld's policy for such types)."""
        if recorded:
            try:
                return self.domain.required_signer(event_type, actor_type)
            except SettlekitError as exc:
                if exc.code != "EVENT_TYPE_UNKNOWN":
                    raise
                return None
        return self.domain.required_signer(event_type, actor_type)

    def verify_history(self, tenant_id: str, events: Sequence[Mapping[str, Any]], *,
                       policy: AppendPolicy | None = None) -> None:
        """Check a whole exported file before anything of it is written: each stream's hash chain in file order
        (the first event of a stream links to whatever it names; the append checks that against the stored
        head), and every signature present, against the tenant's registered keys (SIGNER_UNKNOWN, SIG_INVALID).
        Raises the first failure with `index` = the position in `events` (the importer appends the events
        before it in history mode, and refuses the file otherwise). Whether the key's role (purpose) and
        status fit the event is the signer policy, checked by the append of that event, as for any append.

        With a `recorded` policy (history mode, the default) an envelope is read as settld stored it
        (`events.recorded`) and its signature as node decodes it; an envelope settld's rules refuse is not
        this check's failure but the append's, at its event, after the ones before it are written. Otherwise
        (the rules for new input) each envelope's shape is checked here too (SCHEMA_INVALID)."""
        recorded = (policy or HISTORY).recorded
        checked: list[Event] = []
        for i, item in enumerate(events):
            if recorded:
                try:
                    event = recorded_envelope(item, i)
                    check_nesting(event, i)
                    checked.append(event)
                except ValidationError:
                    break  # its append refuses it: the import stops there, so the check does too
            else:
                event = {k: v for k, v in item.items() if k not in ("schemaVersion", "schema_version")}
                check_envelope_shape(event, i)
                checked.append(event)
        keys = self._signer_keys_of(tenant_id, checked)
        links: dict[str, str | None] = {}
        for i, event in enumerate(checked):
            stream_id = event["streamId"]
            link = links.get(stream_id, event["prevChainHash"])
            verify_link(event, link, i, lambda kid: _public_key(keys, kid), node_base64=recorded)
            links[stream_id] = event["chainHash"]

    def _domain_has_state(self) -> bool:
        return not isinstance(self.domain, PassThroughDomain)

    def _draft_from(self, stream_id: str, item: Mapping[str, Any], index: int, at: str) -> Event:
        extra = set(item) - _DRAFT_FIELDS
        if extra:
            raise ValidationError(f"event {index}: unknown field {sorted(extra)[0]!r}", code="SCHEMA_INVALID",
                                  index=index)
        etype = item.get("type")
        if not isinstance(etype, str) or not etype:
            raise ValidationError(f"event {index}: type must be a non-empty string", code="SCHEMA_INVALID",
                                  index=index)
        actor = item.get("actor")
        if (not isinstance(actor, dict) or set(actor) != {"type", "id"}
                or not all(isinstance(actor[k], str) and actor[k] for k in ("type", "id"))):
            raise ValidationError(f"event {index}: actor must be {{type, id}} with non-empty strings",
                                  code="SCHEMA_INVALID", index=index)
        own_id, own_at = item.get("id"), item.get("at")
        # a draft may bring its own id and at (a recorded event sent again): they obey the envelope's rules
        if own_id is not None and not is_event_id(own_id):
            raise ValidationError(f"event {index}: id must be 1..200 characters without whitespace",
                                  code="SCHEMA_INVALID", index=index, field="id")
        if own_at is not None:
            if not isinstance(own_at, str):
                raise ValidationError(f"event {index}: at must be an ISO-8601 instant with a time zone",
                                      code="SCHEMA_INVALID", index=index, field="at")
            check_not_in_future(own_at, self.clock(), index)
        return make_draft(stream_id=stream_id, type=etype, actor=actor, payload=item.get("payload"),
                          at=own_at or at, id=own_id)

    def _check_size(self, event: Mapping[str, Any], index: int) -> None:
        try:
            size = storable_size(event["payload"])
        except (ValueError, TypeError):
            size = len(canonical_json(event["payload"]).encode("utf-8"))  # raises the error naming the path
        if size > self.max_payload_bytes:
            raise self._too_large(index, size)

    def _too_large(self, index: int, size: int) -> ValidationError:
        return ValidationError(
            f"event {index}: payload is {size} bytes, over the limit of {self.max_payload_bytes}",
            code="PAYLOAD_TOO_LARGE", status=413, index=index, sizeBytes=size, limitBytes=self.max_payload_bytes)

    def _signer_keys_of(self, tenant_id: str, events: Sequence[Event],
                        state: _StreamState | None = None) -> dict[str, SignerKey]:
        """The registered keys the events name, plus this server's own key (not registered in every tenant).
        `state`: the keys already read with the stream head, used when they are the ones named."""
        key_ids = _signer_key_ids(events)
        if not key_ids:
            return {}
        if state is not None and key_ids <= state.key_ids:
            keys = {k: key for k, key in state.keys.items() if k in key_ids}
        else:
            keys = self.signer_keys.find(tenant_id, key_ids)
        if self.server_signer is not None and self.server_signer.key_id not in keys:
            s = self.server_signer
            keys[s.key_id] = SignerKey(tenant_id, s.key_id, s.public_key_pem, "server", "active")
        return keys

    async def _commit(self, request: _Request, events: list[Event], jsons: list[str] | None, *, prev: str | None,
                      expected_version: int | None, head: StreamHead | None,
                      snapshot: dict[str, Any] | None, client_finalized: bool = False,
                      keys_read: _StreamState | None = None) -> AppendResult:
        """The domain step on top of the stream's `head` and `snapshot`, then one CommitBatch for the recorder
        (`events` link to `prev`; `jsons`: their stored text, when already made). A lost race is a 409 with the
        current head, unless the race was lost to the same client-finalized events (a resend that met the first
        send committing in another process): that is alreadyExists, as before the commit. Once committed, the
        stream's new head and state go to the stream cache, with the signer keys `keys_read` holds."""
        stream_type = head.stream_type if head else self.domain.stream_type(events[0]["type"], request.stream_id)
        first_seq = (head.seq if head else 0) + 1
        outcome = await self._domain_step(request, snapshot, events, first_seq)
        batch = _commit_batch(request, stream_type, events, jsons, prev, expected_version, outcome.snapshot)
        built: list[AppendResult] = []
        try:
            committed = await request.database.commit(batch, self._in_transaction(request, events, outcome, built))
        except DuplicateKey as exc:
            return await self._answer_duplicate(request, events, prev, exc, client_finalized)
        if request.from_cache and not isinstance(committed, Committed):
            raise _CachedCommitRefused()
        if isinstance(committed, KeyInactive):
            raise SettlekitError("invalid or revoked API key", code="API_KEY_INVALID", status=401)
        if isinstance(committed, HeadMismatch):
            existing = (await self._find_existing(request, events)) if client_finalized else None
            if existing is not None:
                return existing
            raise _head_moved(prev, expected_version, committed)
        if not request.recorded:
            new_head = StreamHead(request.stream_id, stream_type, committed.base_seq + len(events),
                                  events[-1]["chainHash"], events[-1]["id"])
            if outcome.snapshot is None and snapshot is not None:  # the stored state stays: its size is unknown
                self.stream_cache.drop(request.tenant_id, request.stream_id)
            else:
                self.stream_cache.put(CachedStream(
                    request.tenant_id, request.stream_id, new_head, outcome.snapshot,
                    keys_read.keys if keys_read is not None else {},
                    keys_read.key_ids if keys_read is not None else frozenset()),
                    len(batch.snapshot_json) if batch.snapshot_json is not None else 0)
        if built:
            return built[0]
        return _appended(request, events, committed.base_seq, committed.positions, outcome.snapshot)

    async def _current_snapshot(self, request: _Request, head: StreamHead | None,
                                snapshot: dict[str, Any] | None) -> dict[str, Any] | None:
        """The stored state in the domain's current format."""
        if head is None or snapshot is None:
            return snapshot
        return await request.database.domain_step(functools.partial(
            self.domain.current_snapshot, request.tenant_id, request.stream_id, snapshot, head.seq))

    async def _domain_step(self, request: _Request, snapshot: dict[str, Any] | None, events: list[Event],
                           first_seq: int) -> DomainOutcome:
        """The domain's step: the new state and the rows it writes with the events, or a refusal."""
        return await request.database.domain_step(functools.partial(
            self.domain.process, request.tenant_id, request.stream_id, snapshot, events, first_seq,
            recorded=request.recorded))

    def _in_transaction(self, request: _Request, events: list[Event], outcome: DomainOutcome,
                        built: list[AppendResult]) -> AfterCommit | None:
        """What the recorder runs in the append's transaction once the events are in: the domain's rows and the
        idempotency record (None when there is neither). It puts the result it builds in `built`."""
        write, idempotency = outcome.write, request.idempotency
        if write is None and idempotency is None:
            return None

        def after(tx: Tx, base_seq: int, positions: list[int]) -> None:
            result = _appended(request, events, base_seq, positions, outcome.snapshot)
            if write is not None:
                write(tx, positions)
            if idempotency is not None:
                idempotent.record(tx, request.tenant_id, idempotency, result, self.clock())
            built[:] = [result]  # a group commit may run this again (alone) after rolling its group back

        return after

    async def _answer_duplicate(self, request: _Request, events: list[Event], prev: str | None,
                                exc: DuplicateKey, client_finalized: bool = False) -> AppendResult:
        """The insert broke a uniqueness rule (nothing was written): the idempotency key was recorded concurrently
        (_IdempotencyRace), an event id is already stored (the same events: alreadyExists, else
        EVENT_ID_CONFLICT), or a concurrent append took the stream position (PREV_CHAIN_HASH_MISMATCH)."""
        if exc.kind == "other":
            raise exc  # a fault (another table's rule), not a concurrent append: never answered as a conflict
        if exc.kind == "idempotency":
            raise _IdempotencyRace() from None
        if exc.kind == "event_id":
            existing = await self._find_existing(request, events)
            if existing is not None:
                return existing
            raise ConflictError("an event with this id already exists with different content",
                                code="EVENT_ID_CONFLICT") from None
        if client_finalized:
            existing = await self._find_existing(request, events)
            if existing is not None:
                return existing
        current = await request.database.read(self.streams.head, request.tenant_id, request.stream_id)
        raise _hash_conflict(prev, current.chain_hash if current else None) from None

    async def _find_existing(self, request: _Request, events: Sequence[Event]) -> AppendResult | None:
        """A replay of already stored client events (same ids, same chain hashes) returns alreadyExists."""
        ids = [e["id"] for e in events]
        tenant_id = request.tenant_id
        found = await request.database.read(self.streams.identities, tenant_id, ids)
        if not found:
            return None
        stream_ids = {f.stream_id for f in found.values()}
        same = len(found) == len(ids) and stream_ids == {events[0]["streamId"]} and all(
            found[e["id"]].chain_hash == e.get("chainHash") and found[e["id"]].payload_hash == compute_payload_hash(e)
            for e in events)
        if not same:
            raise ConflictError("an event with this id already exists with different content",
                                code="EVENT_ID_CONFLICT", eventIds=sorted(found))
        first = found[ids[0]]
        return AppendResult(tenant_id=tenant_id, stream_id=events[0]["streamId"], events=list(events),
                            first_seq=first.seq, positions=[found[i].position for i in ids],
                            head_chain_hash=events[-1]["chainHash"], already_exists=True)


class _CachedCommitRefused(Exception):
    """The commit of an append served from the stream cache found another head, or its API key revoked."""


class _IdempotencyRace(Exception):
    pass


def _public_key(keys: Mapping[str, SignerKey], key_id: str) -> Any:
    key = keys.get(key_id)
    return None if key is None else _load_public_key_cached(key.public_key_pem)


@functools.lru_cache(maxsize=4096)
def _load_public_key_cached(pem: str) -> Any:
    """Parsed keys by PEM text (immutable), so each append does not re-parse its signer's key."""
    return load_public_key(pem)


def _signer_key_ids(events: Sequence[Event]) -> frozenset[str]:
    return frozenset(e["signerKeyId"] for e in events if e.get("signerKeyId"))


def named_key_ids(items: Sequence[Any]) -> frozenset[str]:
    """The signer key ids that unchecked items name (none when they name many): read with the stream head (by
    the append, or by a caller that reads the stream for it)."""
    ids = frozenset(key for item in items if isinstance(item, Mapping)
                    and isinstance(key := item.get("signerKeyId"), str) and key)
    return ids if len(ids) <= _PREFETCHED_KEYS else frozenset()


def _check_items(tenant_id: str, stream_id: str, items: Sequence[Mapping[str, Any]], policy: AppendPolicy) -> bool:
    """The checks every append makes first: the ids, a non-empty batch of well-formed Unicode, and client-finalized
    envelopes for a history append. Returns whether the items are client-finalized."""
    _require_id("tenant_id", tenant_id)
    if policy.recorded:  # settld's job ids: any string JavaScript's trim leaves non-empty (URLs percent-encode it)
        if not js_nonblank(stream_id):
            raise ValidationError("stream_id must be a non-empty string", code="SCHEMA_INVALID")
    else:
        _require_id("stream_id", stream_id)
    if not items:
        raise ValidationError("nothing to append", code="SCHEMA_INVALID")
    for i, item in enumerate(items):
        # stricter than settld on purpose: new input must be well-formed Unicode (README, "Deliberate
        # differences"); recorded history may hold lone surrogates in its payloads, never in the envelope
        # fields the store keeps in columns (ids, type, at, actor, signer)
        if policy.allow_lone_surrogates and isinstance(item, Mapping):
            require_well_formed({k: v for k, v in item.items() if k != "payload"}, f"$[{i}]")
        else:  # a live append refuses a "__proto__" key too: the hash would not cover it (README)
            require_well_formed(item, f"$[{i}]", hashed_keys=policy.is_live)
    client_finalized = any(not _FINALIZED_FIELDS.isdisjoint(item) for item in items)
    if not policy.is_live and not client_finalized:
        raise ValidationError("a history append takes client-finalized envelopes only", code="SCHEMA_INVALID")
    return client_finalized


def _commit_batch(request: _Request, stream_type: str, events: list[Event], jsons: list[str] | None,
                  prev: str | None, expected_version: int | None, snapshot: dict[str, Any] | None) -> CommitBatch:
    """What the recorder writes: the events (their stored text made now unless given) and the domain's snapshot."""
    return CommitBatch(
        tenant_id=request.tenant_id, stream_id=request.stream_id, stream_type=stream_type, prev_chain_hash=prev,
        expected_version=expected_version, events=events,
        jsons=jsons if jsons is not None else [storable_json(e) for e in events],
        snapshot_json=storable_json(snapshot) if snapshot is not None else None,
        batch_id=str(random_uuid()), correlation_id=request.correlation_id, causation_id=request.causation_id,
        active_api_key=request.active_api_key)


def _appended(request: _Request, events: list[Event], base_seq: int, positions: list[int],
              snapshot: dict[str, Any] | None) -> AppendResult:
    """The result of a committed append whose first event took seq `base_seq + 1`."""
    return AppendResult(tenant_id=request.tenant_id, stream_id=request.stream_id, events=events,
                        first_seq=base_seq + 1, positions=positions, head_chain_hash=events[-1]["chainHash"],
                        snapshot=snapshot)


def _head_moved(prev: str | None, expected_version: int | None, mismatch: HeadMismatch) -> ConflictError:
    """The conflict to report when the stream head was not the expected one at commit time."""
    if expected_version is not None and mismatch.seq != expected_version:
        return _version_conflict(expected_version, mismatch.seq)
    return _hash_conflict(prev, mismatch.chain_hash)


def _require_id(name: str, value: Any) -> None:
    if not isinstance(value, str) or not value or len(value) > 200 or any(c.isspace() for c in value):
        raise ValidationError(f"{name} must be 1..200 characters without whitespace", code="SCHEMA_INVALID")


def _hash_conflict(expected: str | None, current: str | None) -> ConflictError:
    return ConflictError("the stream head is not the expected previous chain hash", code="PREV_CHAIN_HASH_MISMATCH",
                         expectedPrevChainHash=expected, currentPrevChainHash=current)


def _version_conflict(expected: int, head: StreamHead | int | None) -> ConflictError:
    current = head.seq if isinstance(head, StreamHead) else (head or 0)
    return ConflictError(f"expected stream version {expected}, the stream is at {current}", code="VERSION_CONFLICT",
                         expectedVersion=expected, currentVersion=current)
