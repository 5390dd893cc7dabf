"""The append pipeline and the read side of the event store, written once for both backends.

Append = validate (envelope, size, time) → check idempotency → domain step (reducer, ledger dry run) →
compare-and-swap the stream head and insert the events, the snapshot, the domain's rows and the idempotency
record in ONE transaction. A failure anywhere leaves nothing stored.
"""

from __future__ import annotations

import functools
import uuid
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any, Protocol

from settlekit.errors import ConflictError, NotFoundError, SettlekitError, SignerPolicyError, ValidationError
from settlekit.events.canonical import (
    canonical_hash,
    canonical_json,
    find_lone_surrogate,
    parse_json,
    require_well_formed,
    storable_json,
)
from settlekit.events.envelope import (
    Event,
    Signer,
    check_envelope_shape,
    compute_payload_hash,
    finalize_with_text,
    load_public_key,
    make_draft,
    now_iso,
    verify_link,
)
from settlekit.store import idempotency as idempotency_keys
from settlekit.store.db import Database, Tx

_MISSING: Any = object()
_FINALIZED_FIELDS = frozenset(("payloadHash", "chainHash", "signature", "signerKeyId", "prevChainHash"))
DEFAULT_MAX_PAYLOAD_BYTES = 256 * 1024
FUTURE_TOLERANCE = timedelta(minutes=5)
SHARED_PRINCIPAL = "anon"


def _dumps(value: Any) -> str:
    """Stored JSON text: exact, lone surrogates (history imports only) kept as their `\\udxxx` escape."""
    return storable_json(value)


@dataclass(frozen=True)
class AppendPolicy:
    """What an append demands of its input beyond the stream's rules.

    `LIVE` (the default, and the only policy the HTTP API uses): new input, so a robot- or operator-signed event
    type must carry its signature and no string may hold a lone UTF-16 surrogate. `HISTORY` (`settlekit import`
    of a settld export, and Python callers that replay recorded history): client-finalized envelopes only; a
    signature that is present is verified as ever, but its absence is not refused, and lone surrogates in the
    payload are stored as recorded (hashed as JS does, kept as `\\udxxx` escapes in the stored JSON). Every
    other rule (envelope, chain, payloads, transitions, server rules) applies unchanged."""

    require_signatures: bool = True
    allow_lone_surrogates: bool = False

    @property
    def is_live(self) -> bool:
        return self.require_signatures and not self.allow_lone_surrogates


LIVE = AppendPolicy()
HISTORY = AppendPolicy(require_signatures=False, allow_lone_surrogates=True)


@dataclass(frozen=True)
class StreamHead:
    stream_id: str
    stream_type: str
    seq: int
    chain_hash: str
    event_id: str


@dataclass
class AppendResult:
    tenant_id: str
    stream_id: str
    events: list[Event]
    first_seq: int
    positions: list[int]
    head_chain_hash: str
    snapshot: dict[str, Any] | None = None
    already_exists: bool = False
    replayed: bool = False
    # events accepted only under a history policy: unsigned of a robot/operator-signed type, holding a lone
    # surrogate (not part of the stored answer: an idempotent replay reports 0)
    unsigned: int = 0
    lone_surrogates: int = 0

    def to_json(self) -> dict[str, Any]:
        return {
            "tenantId": self.tenant_id, "streamId": self.stream_id, "events": self.events,
            "firstSeq": self.first_seq, "positions": self.positions, "headChainHash": self.head_chain_hash,
            "snapshot": self.snapshot, "alreadyExists": self.already_exists,
        }

    @classmethod
    def from_json(cls, data: Mapping[str, Any], *, replayed: bool) -> AppendResult:
        return cls(tenant_id=data["tenantId"], stream_id=data["streamId"], events=data["events"],
                   first_seq=data["firstSeq"], positions=data["positions"], head_chain_hash=data["headChainHash"],
                   snapshot=data.get("snapshot"), already_exists=data.get("alreadyExists", False),
                   replayed=replayed)


@dataclass(frozen=True)
class StoredEvent:
    position: int
    tenant_id: str
    stream_id: str
    stream_type: str
    seq: int
    event: Event
    txid: int | None = None

    @property
    def event_id(self) -> str:
        return str(self.event["id"])

    @property
    def type(self) -> str:
        return str(self.event["type"])


@dataclass
class DomainOutcome:
    """What a stream's domain adds to an append: the new snapshot and rows written in the same transaction."""

    snapshot: dict[str, Any] | None = None
    write: Callable[[Tx], None] | None = None


class StreamDomain(Protocol):
    """Business rules plugged into the append pipeline (the job domain implements this)."""

    def stream_type(self, first_event_type: str, stream_id: str) -> str: ...

    def prepare_drafts(self, snapshot: dict[str, Any] | None, drafts: list[Event]) -> list[Event]: ...

    def required_signer(self, event_type: str, actor_type: str) -> str | None: ...

    def process(self, tenant_id: str, stream_id: str, snapshot: dict[str, Any] | None,
                events: list[Event], first_seq: int) -> DomainOutcome: ...


class PassThroughDomain:
    """No business rules: any well-formed event is accepted; signatures are checked when present."""

    def stream_type(self, first_event_type: str, stream_id: str) -> str:
        return "job" if first_event_type == "JOB_CREATED" else "generic"

    def prepare_drafts(self, snapshot: dict[str, Any] | None, drafts: list[Event]) -> list[Event]:
        return drafts

    def required_signer(self, event_type: str, actor_type: str) -> str | None:
        return None

    def process(self, tenant_id: str, stream_id: str, snapshot: dict[str, Any] | None,
                events: list[Event], first_seq: int) -> DomainOutcome:
        return DomainOutcome()


@dataclass
class Idempotency:
    key: str
    principal_id: str = SHARED_PRINCIPAL
    endpoint: str = "append"
    request_hash: str | None = None
    ttl_days: int = 30

    def scope(self, tenant_id: str) -> idempotency_keys.KeyScope:
        return idempotency_keys.KeyScope(tenant_id, self.principal_id, self.endpoint, self.key)


@dataclass
class SignerKey:
    tenant_id: str
    key_id: str
    public_key_pem: str
    purpose: str
    status: str
    entity_id: str | None = None


KEY_PURPOSES = ("robot", "operator", "server")
KEY_STATUSES = ("active", "rotated", "revoked")


class EventStore:
    """Tenant-scoped hash-chained streams on one Database."""

    def __init__(self, db: Database, *, server_signer: Signer | None = None,
                 domain: StreamDomain | None = None, max_payload_bytes: int = DEFAULT_MAX_PAYLOAD_BYTES,
                 clock: Callable[[], datetime] | None = None):
        self.db = db
        self.server_signer = server_signer
        self.domain: StreamDomain = domain or PassThroughDomain()
        self.max_payload_bytes = max_payload_bytes
        self.clock = clock or (lambda: datetime.now(UTC))

    # ------------------------------------------------------------------ append

    def append(
        self,
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
    ) -> AppendResult:
        """Append drafts (`{type, actor, payload}`) or client-finalized envelopes to one stream, atomically.

        Give the expected head as `expected_prev_chain_hash` (None = the stream must be empty) or
        `expected_version` (0 = empty). Client-finalized events carry their own prevChainHash. `policy`: see
        AppendPolicy (`HISTORY` takes client-finalized envelopes only).
        """
        _require_id("tenant_id", tenant_id)
        _require_id("stream_id", stream_id)
        if not items:
            raise ValidationError("nothing to append", code="SCHEMA_INVALID")
        for i, item in enumerate(items):
            # stricter than settld on purpose: new input must be well-formed Unicode (README, "Deliberate
            # differences"); recorded history may hold lone surrogates in its payloads, never in the envelope
            # fields the store keeps in columns (ids, type, at, actor, signer)
            if policy.allow_lone_surrogates and isinstance(item, Mapping):
                require_well_formed({k: v for k, v in item.items() if k != "payload"}, f"$[{i}]")
            else:
                require_well_formed(item, f"$[{i}]")
        client_finalized = any(not _FINALIZED_FIELDS.isdisjoint(item) for item in items)
        if not policy.is_live and not client_finalized:
            raise ValidationError("a history append takes client-finalized envelopes only", code="SCHEMA_INVALID")
        if idempotency is not None:
            if not idempotency.key or len(idempotency.key) > 500:
                raise ValidationError("idempotency key must be 1..500 characters", code="SCHEMA_INVALID")
            if idempotency.request_hash is None:
                idempotency.request_hash = canonical_hash({
                    "endpoint": idempotency.endpoint, "streamId": stream_id,
                    "expectedPrevChainHash": None if expected_prev_chain_hash is _MISSING
                    else expected_prev_chain_hash,
                    "expectedVersion": expected_version, "body": [dict(i) for i in items],
                })
            replay = self._idempotent_replay(tenant_id, idempotency)
            if replay is not None:
                return replay
        try:
            if client_finalized:
                result = self._append_finalized(tenant_id, stream_id, items, idempotency, correlation_id,
                                                causation_id, policy)
            else:
                result = self._append_drafts(tenant_id, stream_id, items, expected_prev_chain_hash,
                                             expected_version, idempotency, correlation_id, causation_id)
        except _IdempotencyRace:
            assert idempotency is not None
            replay = self._idempotent_replay(tenant_id, idempotency)
            if replay is None:
                raise ConflictError("idempotency record vanished during a concurrent append",
                                    code="IDEMPOTENCY_CONFLICT") from None
            return replay
        except SettlekitError:
            # A concurrent request with the same key may have committed first (its events moved the head, so
            # this attempt conflicted): its stored answer is the answer.
            replay = self._idempotent_replay(tenant_id, idempotency) if idempotency is not None else None
            if replay is None:
                raise
            return replay
        if idempotency is not None and result.already_exists:
            replay = self._idempotent_replay(tenant_id, idempotency)
            if replay is not None:
                return replay
        return result

    def _append_drafts(self, tenant_id: str, stream_id: str, items: Sequence[Mapping[str, Any]],
                       expected_prev_chain_hash: Any, expected_version: int | None,
                       idempotency: Idempotency | None, correlation_id: str | None,
                       causation_id: str | None) -> AppendResult:
        if expected_prev_chain_hash is _MISSING and expected_version is None:
            raise SettlekitError("server-draft append needs expected_prev_chain_hash or expected_version",
                                 code="PRECONDITION_REQUIRED", status=428)
        at = now_iso()
        drafts = [self._draft_from(stream_id, item, i, at) for i, item in enumerate(items)]
        for i, draft in enumerate(drafts):
            actor_type = draft["actor"]["type"]
            if actor_type in ("robot", "operator"):
                raise SignerPolicyError(f"event {i}: server-draft events cannot carry a {actor_type} actor",
                                        index=i, actorType=actor_type)
            kind = self.domain.required_signer(draft["type"], actor_type)
            if kind in ("robot", "operator"):
                raise SignerPolicyError(f"event {i}: {draft['type']} must be signed by a {kind}", index=i,
                                        eventType=draft["type"], requiredSigner=kind)
        head = None
        snapshot: dict[str, Any] | None = None
        if expected_prev_chain_hash is _MISSING or self._domain_has_state():
            head, snapshot = self._read_head(tenant_id, stream_id)
            if expected_version is not None and (head.seq if head else 0) != expected_version:
                raise _version_conflict(expected_version, head)
            if expected_prev_chain_hash is not _MISSING:
                current = head.chain_hash if head else None
                if current != expected_prev_chain_hash:
                    raise _hash_conflict(expected_prev_chain_hash, current)
            prev = head.chain_hash if head else None
        else:
            prev = expected_prev_chain_hash
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
        return self._commit(tenant_id, stream_id, events, prev, expected_version, head, snapshot,
                            idempotency, correlation_id, causation_id, jsons)

    def _append_finalized(self, tenant_id: str, stream_id: str, items: Sequence[Mapping[str, Any]],
                          idempotency: Idempotency | None, correlation_id: str | None,
                          causation_id: str | None, policy: AppendPolicy = LIVE) -> AppendResult:
        events: list[Event] = []
        now = self.clock()
        for i, item in enumerate(items):
            event = dict(item)
            schema_version = event.pop("schemaVersion", event.pop("schema_version", 1))
            if schema_version != 1:
                raise ValidationError(f"event {i}: schemaVersion must be 1", code="SCHEMA_INVALID", index=i)
            check_envelope_shape(event, i)
            if event["streamId"] != stream_id:
                raise ValidationError(f"event {i}: streamId {event['streamId']!r} is not {stream_id!r}",
                                      code="SCHEMA_INVALID", index=i)
            self._check_size(event, i)
            if _parse_at(event["at"], i) > now + FUTURE_TOLERANCE:
                raise ValidationError(f"event {i}: at {event['at']} is more than 5 minutes in the future",
                                      code="FUTURE_TIMESTAMP", index=i)
            events.append(event)
        prev = events[0]["prevChainHash"]
        head, snapshot = self._read_head(tenant_id, stream_id)
        current = head.chain_hash if head else None
        if prev != current:
            existing = self._find_existing(tenant_id, events)
            if existing is not None:
                return existing
            raise _hash_conflict(prev, current)
        keys = self._signer_keys(tenant_id, events)
        link = prev
        unsigned = 0
        for i, event in enumerate(events):
            verify_link(event, link, i, lambda kid: _public_key(keys, kid))
            unsigned += not self._check_signer_policy(event, i, keys, policy)
            link = event["chainHash"]
        result = self._commit(tenant_id, stream_id, events, prev, None, head, snapshot, idempotency,
                              correlation_id, causation_id)
        if not policy.is_live and not result.already_exists:
            result.unsigned = unsigned
            result.lone_surrogates = sum(find_lone_surrogate(e["payload"]) is not None for e in events)
        return result

    def verify_history(self, tenant_id: str, events: Sequence[Mapping[str, Any]]) -> None:
        """Check a whole exported file before anything of it is written: each envelope's shape, each stream's
        hash chain in file order (the first event of a stream links to whatever it names; the append checks
        that against the stored head), and every signature present, against the tenant's registered keys
        (SIGNER_UNKNOWN, SIG_INVALID). Raises the first failure with `index` = the position in `events`. Whether
        the key's role (purpose) and status fit the event is the signer policy, checked by the append of that
        event, as for any append."""
        checked: list[Event] = []
        for i, item in enumerate(events):
            event = {k: v for k, v in item.items() if k not in ("schemaVersion", "schema_version")}
            check_envelope_shape(event, i)
            checked.append(event)
        keys = self._signer_keys(tenant_id, checked)
        links: dict[str, str | None] = {}
        for i, event in enumerate(checked):
            stream_id = event["streamId"]
            link = links.get(stream_id, event["prevChainHash"])
            verify_link(event, link, i, lambda kid: _public_key(keys, kid))
            links[stream_id] = event["chainHash"]

    def _domain_has_state(self) -> bool:
        return not isinstance(self.domain, PassThroughDomain)

    def _draft_from(self, stream_id: str, item: Mapping[str, Any], index: int, at: str) -> Event:
        allowed = {"type", "actor", "payload", "id", "at"}
        extra = set(item) - allowed
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
        return make_draft(stream_id=stream_id, type=etype, actor=actor, payload=item.get("payload"),
                          at=item.get("at") or at, id=item.get("id"))

    def _check_size(self, event: Mapping[str, Any], index: int) -> None:
        try:
            size = len(_dumps(event["payload"]).encode("utf-8"))
        except (ValueError, TypeError):
            size = len(canonical_json(event["payload"]).encode("utf-8"))  # raises the error naming the path
        if size > self.max_payload_bytes:
            raise self._too_large(index, size)

    def _too_large(self, index: int, size: int) -> ValidationError:
        return ValidationError(
            f"event {index}: payload is {size} bytes, over the limit of {self.max_payload_bytes}",
            code="PAYLOAD_TOO_LARGE", status=413, index=index, sizeBytes=size, limitBytes=self.max_payload_bytes)

    def _commit(self, tenant_id: str, stream_id: str, events: list[Event], prev: str | None,
                expected_version: int | None, head: StreamHead | None, snapshot: dict[str, Any] | None,
                idempotency: Idempotency | None, correlation_id: str | None,
                causation_id: str | None, jsons: list[str] | None = None) -> AppendResult:
        stream_type = head.stream_type if head else self.domain.stream_type(events[0]["type"], stream_id)
        first_seq = (head.seq if head else 0) + 1
        outcome = self.domain.process(tenant_id, stream_id, snapshot, events, first_seq)
        snapshot_json = _dumps(outcome.snapshot) if outcome.snapshot is not None else None
        batch_id = str(uuid.uuid4())
        built: list[AppendResult] = []

        def after(tx: Tx, base_seq: int, positions: list[int]) -> None:
            result = AppendResult(tenant_id=tenant_id, stream_id=stream_id, events=events, first_seq=base_seq + 1,
                                  positions=positions, head_chain_hash=events[-1]["chainHash"],
                                  snapshot=outcome.snapshot)
            if outcome.write is not None:
                outcome.write(tx)
            if idempotency is not None:
                self._record_idempotency(tx, tenant_id, idempotency, result)
            built.append(result)

        needs_after = outcome.write is not None or idempotency is not None
        if jsons is None:
            jsons = [_dumps(e) for e in events]
        try:
            if self.db.dialect == "postgres":
                from settlekit.store.postgres import events as pg_events

                sql, params = pg_events.append_params(
                    (tenant_id, stream_id, stream_type, prev, prev is None and expected_version in (None, 0),
                     expected_version, snapshot_json, batch_id), events, jsons, (correlation_id, causation_id))
                outcome_row = pg_events.append(self.db, sql, params,  # type: ignore[arg-type]
                                               after if needs_after else None)
            else:
                from settlekit.store.sqlite import events as sqlite_events

                outcome_row = sqlite_events.append(self.db, tenant_id, stream_id, stream_type, prev,  # type: ignore[arg-type]
                                                   expected_version, events, jsons, snapshot_json, batch_id,
                                                   correlation_id, causation_id, after)
        except Exception as exc:
            what = _unique_violation_kind(exc)
            if what is None:
                raise
            if what == "idempotency":
                raise _IdempotencyRace() from None
            if what == "event_id":
                existing = self._find_existing(tenant_id, events)
                if existing is not None:
                    return existing
                raise ConflictError("an event with this id already exists with different content",
                                    code="EVENT_ID_CONFLICT") from None
            raise _hash_conflict(prev, self._current_hash(tenant_id, stream_id)) from None
        if outcome_row[0] == "conflict":
            _, cur_seq, cur_hash = outcome_row
            if expected_version is not None and cur_seq != expected_version:
                raise _version_conflict(expected_version, cur_seq)
            raise _hash_conflict(prev, cur_hash)
        if built:
            return built[0]
        _, base_seq, positions = outcome_row
        return AppendResult(tenant_id=tenant_id, stream_id=stream_id, events=events, first_seq=base_seq + 1,
                            positions=positions, head_chain_hash=events[-1]["chainHash"], snapshot=outcome.snapshot)

    # ------------------------------------------------------------------ idempotency

    def _idempotent_replay(self, tenant_id: str, idem: Idempotency) -> AppendResult | None:
        assert idem.request_hash is not None
        with self.db.query() as tx:
            stored = idempotency_keys.find(tx, idem.scope(tenant_id), idem.request_hash,
                                           conflict_code="IDEMPOTENCY_KEY_REUSED")
        return None if stored is None else AppendResult.from_json(stored.body, replayed=True)

    def _record_idempotency(self, tx: Tx, tenant_id: str, idem: Idempotency, result: AppendResult) -> None:
        assert idem.request_hash is not None
        idempotency_keys.record(tx, idem.scope(tenant_id), idem.request_hash, 201, _dumps(result.to_json()),
                                now=self.clock(), ttl_days=idem.ttl_days)

    def purge_expired_idempotency(self) -> int:
        return idempotency_keys.purge_expired(self.db, now=self.clock())

    # ------------------------------------------------------------------ signer keys

    def register_key(self, tenant_id: str, public_key_pem: str, purpose: str, *,
                     entity_id: str | None = None) -> str:
        """Register a public key for a tenant; returns its key id."""
        from settlekit.events.envelope import key_id_for_public_pem

        if purpose not in KEY_PURPOSES:
            raise ValidationError(f"purpose must be one of {KEY_PURPOSES}", code="SCHEMA_INVALID")
        load_public_key(public_key_pem)
        key_id = key_id_for_public_pem(public_key_pem)
        with self.db.transaction() as tx:
            row = tx.fetchone("SELECT purpose, public_key_pem FROM signer_keys WHERE tenant_id = ? AND key_id = ?",
                              (tenant_id, key_id))
            if row is not None:
                if row[0] != purpose:
                    raise ConflictError(f"key {key_id} is already registered as {row[0]}",
                                        code="SIGNER_KEY_CONFLICT")
                return key_id
            tx.execute("INSERT INTO signer_keys (tenant_id, key_id, public_key_pem, purpose, entity_id)"
                       " VALUES (?, ?, ?, ?, ?)", (tenant_id, key_id, public_key_pem, purpose, entity_id))
        return key_id

    def set_key_status(self, tenant_id: str, key_id: str, status: str) -> None:
        if status not in KEY_STATUSES:
            raise ValidationError(f"status must be one of {KEY_STATUSES}", code="SCHEMA_INVALID")
        column = {"rotated": "rotated_at", "revoked": "revoked_at"}.get(status)
        now = "now()" if self.db.dialect == "postgres" else "strftime('%Y-%m-%dT%H:%M:%fZ','now')"
        stamp = f", {column} = {now}" if column else ""
        with self.db.transaction() as tx:
            if tx.execute(f"UPDATE signer_keys SET status = ?{stamp} WHERE tenant_id = ? AND key_id = ?",
                          (status, tenant_id, key_id)) == 0:
                raise NotFoundError(f"signer key {key_id} is not registered", code="SIGNER_KEY_NOT_FOUND")

    def list_keys(self, tenant_id: str) -> list[SignerKey]:
        with self.db.read() as tx:
            rows = tx.fetchall("SELECT tenant_id, key_id, public_key_pem, purpose, status, entity_id"
                               " FROM signer_keys WHERE tenant_id = ? ORDER BY key_id", (tenant_id,))
        return [SignerKey(*row) for row in rows]

    def _signer_keys(self, tenant_id: str, events: Sequence[Event]) -> dict[str, SignerKey]:
        key_ids = sorted({e["signerKeyId"] for e in events if e.get("signerKeyId")})
        if not key_ids:
            return {}
        marks = ",".join("?" for _ in key_ids)
        with self.db.read() as tx:
            rows = tx.fetchall(
                "SELECT tenant_id, key_id, public_key_pem, purpose, status, entity_id FROM signer_keys"
                f" WHERE tenant_id = ? AND key_id IN ({marks})", (tenant_id, *key_ids))
        keys = {row[1]: SignerKey(*row) for row in rows}
        if self.server_signer is not None and self.server_signer.key_id not in keys:
            s = self.server_signer
            keys[s.key_id] = SignerKey(tenant_id, s.key_id, s.public_key_pem, "server", "active")
        return keys

    def _check_signer_policy(self, event: Event, index: int, keys: Mapping[str, SignerKey],
                             policy: AppendPolicy = LIVE) -> bool:
        """Refuse what the signer policy forbids; False when the event is accepted only because `policy` does
        not require the robot's/operator's signature (an unsigned event of a robot/operator-signed type)."""
        actor_type = event["actor"]["type"]
        required = self.domain.required_signer(event["type"], actor_type)
        key_id = event.get("signerKeyId")
        if event.get("signature") is None:
            if required in ("robot", "operator"):
                if not policy.require_signatures:
                    return False
                raise SignerPolicyError(f"event {index}: {event['type']} must be signed by a {required} key",
                                        index=index, requiredSigner=required)
            return True
        key = keys.get(key_id or "")
        if key is None:
            raise SignerPolicyError(f"event {index}: signer key {key_id} is not registered for this tenant",
                                    code="SIGNER_UNKNOWN", index=index)
        if key.status != "active":
            raise SignerPolicyError(f"event {index}: signer key {key_id} is {key.status}",
                                    code="SIGNER_KEY_NOT_ACTIVE", index=index, keyStatus=key.status)
        purpose = required or _purpose_for_actor(actor_type)
        if key.purpose != purpose:
            raise SignerPolicyError(f"event {index}: key {key_id} has purpose {key.purpose}, needs {purpose}",
                                    code="SIGNER_KEY_PURPOSE_MISMATCH", index=index)
        if purpose in ("robot", "operator") and key.entity_id is not None and key.entity_id != event["actor"]["id"]:
            raise SignerPolicyError(f"event {index}: key {key_id} belongs to {key.entity_id}, not the actor",
                                    index=index)
        return True

    # ------------------------------------------------------------------ reads

    def head(self, tenant_id: str, stream_id: str) -> StreamHead | None:
        return self._read_head(tenant_id, stream_id)[0]

    def snapshot(self, tenant_id: str, stream_id: str) -> dict[str, Any] | None:
        return self._read_head(tenant_id, stream_id)[1]

    def head_and_snapshot(self, tenant_id: str, stream_id: str) -> tuple[StreamHead | None, dict[str, Any] | None]:
        """The stream head and its stored state, read together."""
        return self._read_head(tenant_id, stream_id)

    def _read_head(self, tenant_id: str, stream_id: str) -> tuple[StreamHead | None, dict[str, Any] | None]:
        with self.db.query() as tx:
            row = tx.fetchone(
                "SELECT stream_id, stream_type, head_seq, head_chain_hash, head_event_id, snapshot_json"
                " FROM streams WHERE tenant_id = ? AND stream_id = ?", (tenant_id, stream_id))
        if row is None:
            return None, None
        snapshot = parse_json(row[5]) if row[5] is not None else None
        return StreamHead(row[0], row[1], int(row[2]), row[3], row[4]), snapshot

    def _current_hash(self, tenant_id: str, stream_id: str) -> str | None:
        head = self.head(tenant_id, stream_id)
        return head.chain_hash if head else None

    def read_stream(self, tenant_id: str, stream_id: str, *, through_chain_hash: str | None = None,
                    after_seq: int = 0) -> list[Event]:
        """A stream's events in order; with `through_chain_hash`, only up to and including that event."""
        with self.db.read() as tx:
            limit_seq = None
            if through_chain_hash is not None:
                limit_seq = tx.scalar(
                    "SELECT seq FROM events WHERE tenant_id = ? AND stream_id = ? AND chain_hash = ?",
                    (tenant_id, stream_id, through_chain_hash))
                if limit_seq is None:
                    raise NotFoundError(f"chain hash {through_chain_hash} is not in stream {stream_id}",
                                        code="ATCHAINHASH_NOT_FOUND")
            if limit_seq is None:
                rows = tx.fetchall("SELECT event_json FROM events WHERE tenant_id = ? AND stream_id = ?"
                                   " AND seq > ? ORDER BY seq", (tenant_id, stream_id, after_seq))
            else:
                rows = tx.fetchall("SELECT event_json FROM events WHERE tenant_id = ? AND stream_id = ?"
                                   " AND seq > ? AND seq <= ? ORDER BY seq",
                                   (tenant_id, stream_id, after_seq, limit_seq))
        return [parse_json(r[0]) for r in rows]

    def read_positions(self, after: int, limit: int = 1000, *, up_to: int | None = None,
                       tenant_id: str | None = None) -> list[StoredEvent]:
        """Events with position > after, in position order (all tenants unless one is named)."""
        sql = ("SELECT position, tenant_id, stream_id, stream_type, seq, event_json, txid FROM events"
               " WHERE position > ?")
        params: list[Any] = [after]
        if up_to is not None:
            sql += " AND position <= ?"
            params.append(up_to)
        if tenant_id is not None:
            sql += " AND tenant_id = ?"
            params.append(tenant_id)
        sql += " ORDER BY position LIMIT ?"
        params.append(limit)
        with self.db.query() as tx:
            rows = tx.fetchall(sql, params)
        return [row_to_stored(r) for r in rows]

    def high_water_mark(self) -> int:
        with self.db.query() as tx:
            return int(tx.scalar("SELECT COALESCE(MAX(position), 0) FROM events"))

    def list_streams(self, tenant_id: str, *, stream_type: str | None = None, after: str | None = None,
                     limit: int = 100) -> list[StreamHead]:
        sql = ("SELECT stream_id, stream_type, head_seq, head_chain_hash, head_event_id FROM streams"
               " WHERE tenant_id = ?")
        params: list[Any] = [tenant_id]
        if stream_type is not None:
            sql += " AND stream_type = ?"
            params.append(stream_type)
        if after is not None:
            sql += " AND stream_id > ?"
            params.append(after)
        sql += " ORDER BY stream_id LIMIT ?"
        params.append(limit)
        with self.db.read() as tx:
            return [StreamHead(r[0], r[1], int(r[2]), r[3], r[4]) for r in tx.fetchall(sql, params)]

    def _find_existing(self, tenant_id: str, events: Sequence[Event]) -> AppendResult | None:
        """A replay of already stored client events (same ids, same chain hashes) returns alreadyExists."""
        ids = [e["id"] for e in events]
        marks = ",".join("?" for _ in ids)
        with self.db.read() as tx:
            rows = tx.fetchall(f"SELECT event_id, chain_hash, seq, position, stream_id, payload_hash FROM events"
                               f" WHERE tenant_id = ? AND event_id IN ({marks})", (tenant_id, *ids))
        found = {r[0]: r for r in rows}
        if not found:
            return None
        stream_ids = {r[4] for r in rows}
        same = len(found) == len(ids) and stream_ids == {events[0]["streamId"]} and all(
            found[e["id"]][1] == e.get("chainHash") and found[e["id"]][5] == compute_payload_hash(e) for e in events)
        if not same:
            raise ConflictError("an event with this id already exists with different content",
                                code="EVENT_ID_CONFLICT", eventIds=sorted(found))
        first = found[ids[0]]
        return AppendResult(tenant_id=tenant_id, stream_id=events[0]["streamId"], events=list(events),
                            first_seq=int(first[2]), positions=[int(found[i][3]) for i in ids],
                            head_chain_hash=events[-1]["chainHash"], already_exists=True)


def row_to_stored(r: Sequence[Any]) -> StoredEvent:
    txid = r[6]
    return StoredEvent(position=int(r[0]), tenant_id=r[1], stream_id=r[2], stream_type=r[3], seq=int(r[4]),
                       event=parse_json(r[5]), txid=None if txid is None else int(txid))


class _IdempotencyRace(Exception):
    pass


def _unique_violation_kind(exc: Exception) -> str | None:
    """Which uniqueness rule an insert broke, or None when `exc` is something else."""
    import sqlite3

    from settlekit.store.postgres.events import UniqueViolation

    if isinstance(exc, UniqueViolation):
        message = exc.constraint
    elif isinstance(exc, sqlite3.IntegrityError) and "UNIQUE" in str(exc):
        message = str(exc)
    else:
        return None
    if "idempotency" in message:
        return "idempotency"
    if "event_id" in message:
        return "event_id"
    return "stream"


def _purpose_for_actor(actor_type: str) -> str:
    return actor_type if actor_type in ("robot", "operator") else "server"


def _public_key(keys: Mapping[str, SignerKey], key_id: str) -> Any:
    key = keys.get(key_id)
    return None if key is None else _load_public_key_cached(key.public_key_pem)


@functools.lru_cache(maxsize=4096)
def _load_public_key_cached(pem: str) -> Any:
    """Parsed keys by PEM text (immutable), so each append does not re-parse its signer's key."""
    return load_public_key(pem)


def _require_id(name: str, value: Any) -> None:
    if not isinstance(value, str) or not value or len(value) > 200 or any(c.isspace() for c in value):
        raise ValidationError(f"{name} must be 1..200 characters without whitespace", code="SCHEMA_INVALID")


def _parse_at(at: str, index: int) -> datetime:
    try:
        parsed = datetime.fromisoformat(at)
    except ValueError as exc:
        raise ValidationError(f"event {index}: at {at!r} is not an ISO-8601 instant", code="SCHEMA_INVALID",
                              index=index) from exc
    if parsed.tzinfo is None:
        raise ValidationError(f"event {index}: at {at!r} has no time zone", code="SCHEMA_INVALID", index=index)
    return parsed


def _hash_conflict(expected: str | None, current: str | None) -> ConflictError:
    return ConflictError("the stream head is not the expected previous chain hash", code="PREV_CHAIN_HASH_MISMATCH",
                         expectedPrevChainHash=expected, currentPrevChainHash=current)


def _version_conflict(expected: int, head: StreamHead | int | None) -> ConflictError:
    current = head.seq if isinstance(head, StreamHead) else (head or 0)
    return ConflictError(f"expected stream version {expected}, the stream is at {current}", code="VERSION_CONFLICT",
                         expectedVersion=expected, currentVersion=current)
