"""Import an exported settld stream through the live append path, event by event, as recorded history.

The events are client-finalized envelopes and are stored as settld's API stored them (`events.recorded`: ids,
times, chain hashes and signatures kept, fields beside the envelope dropped). The signer keys are registered for the
tenant by role first (idempotent). The file's hash chains and every signature present are verified before anything
is written (up to the first envelope settld's rules refuse, where the import stops). A chain or signature failure
is where settld's API refused the stream (it verifies the whole chain at each append): the events before it are
appended and the import stops at it, nothing of it written (with `strict=True` the file is refused whole, nothing
written). The events go through the store's append with the HISTORY policy (AppendPolicy): settld's envelope, type
and payload rules; a missing signature and lone surrogates in payloads are accepted as recorded and counted;
`strict=True` applies the rules for new input instead. The import stops at the first event the append refuses,
a posting error included in history mode (LEDGER_POSTING_REJECTED: settld's API refused such an event).
A re-run resumes: events already stored, identical, are skipped; the rest are appended.

A JOB_CREATED (the first or a later one) whose job belongs to another tenant than the one imported into (its
payload's tenantId as settld reads it; settld's default tenant when it names none) is refused at that event
(JOB_TENANT_MISMATCH), as the API refuses it: the job would show that tenant under this one while its artifacts
name this one. `retenant=True` imports it anyway (the events are signed: their tenantId cannot be changed), and
counts such JOB_CREATED events (`retenanted`).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from settlekit.append import HISTORY, LIVE, Appender, AppendPolicy
from settlekit.errors import SettlekitError, ValidationError
from settlekit.events.canonical import same_json
from settlekit.events.envelope import Event, key_id_for_public_pem, load_public_key
from settlekit.events.js import js_to_string, js_trim
from settlekit.events.recorded import recorded_envelope
from settlekit.jobs.reducer import DEFAULT_TENANT_ID
from settlekit.store.signer_keys import KEY_PURPOSES


@dataclass(frozen=True)
class ImportSigner:
    """One entry of KEYS.json: `{role, keyId, publicKeyPem}` (keyId optional; it is derived from the PEM)."""

    role: str
    key_id: str
    public_key_pem: str


@dataclass(frozen=True)
class Refusal:
    index: int
    event_id: str | None
    code: str
    message: str

    def to_json(self) -> dict[str, Any]:
        return {"index": self.index, "eventId": self.event_id, "code": self.code, "message": self.message}


@dataclass
class ImportResult:
    appended: int = 0
    skipped: int = 0
    refused: Refusal | None = None
    unsigned: int = 0  # appended unsigned events (history mode)
    lone_surrogates: int = 0  # appended events whose payload holds a lone surrogate (history mode)
    retenanted: int = 0  # appended JOB_CREATED events naming another tenant (--retenant)

    def to_json(self) -> dict[str, Any]:
        return {"appended": self.appended, "skipped": self.skipped,
                "refused": None if self.refused is None else self.refused.to_json(),
                "unsigned": self.unsigned, "loneSurrogates": self.lone_surrogates, "retenanted": self.retenanted}


def parse_import_keys(data: Any) -> list[ImportSigner]:
    """KEYS.json for an import: a list of `{role, keyId, publicKeyPem}` (the corpus files' `signers`), or an
    object holding that list under `signers`. Raises KEYS_INVALID, SIGNER_ROLE_UNKNOWN or
    SIGNER_KEY_ID_MISMATCH."""
    if isinstance(data, dict) and "signers" in data:
        data = data["signers"]
    if not isinstance(data, list):
        raise ValidationError("keys file must be a list of {role, keyId, publicKeyPem}", code="KEYS_INVALID")
    out: list[ImportSigner] = []
    for i, item in enumerate(data):
        if not isinstance(item, dict):
            raise ValidationError(f"keys[{i}] is not an object", code="KEYS_INVALID", index=i)
        role, pem, key_id = item.get("role"), item.get("publicKeyPem"), item.get("keyId")
        if not isinstance(role, str):
            raise ValidationError(f"keys[{i}].role must be a string", code="KEYS_INVALID", index=i)
        if role not in KEY_PURPOSES:
            raise ValidationError(f"keys[{i}].role {role!r} is not one of {', '.join(KEY_PURPOSES)}",
                                  code="SIGNER_ROLE_UNKNOWN", index=i, role=role)
        if not isinstance(pem, str):
            raise ValidationError(f"keys[{i}].publicKeyPem must be a PEM string", code="KEYS_INVALID", index=i)
        try:
            load_public_key(pem)
        except SettlekitError as exc:
            raise ValidationError(f"keys[{i}].publicKeyPem: {exc.message}", code="KEYS_INVALID",
                                  index=i) from exc
        derived = key_id_for_public_pem(pem)
        if key_id is not None and key_id != derived:
            raise ValidationError(f"keys[{i}].keyId {key_id!r} is not the id of its key ({derived})",
                                  code="SIGNER_KEY_ID_MISMATCH", index=i, keyId=key_id, derivedKeyId=derived)
        out.append(ImportSigner(role, derived, pem))
    return out


def parse_import_stream(data: Any) -> list[Event]:
    """An exported stream: a JSON array of finalized events, or an object holding it under `events`.
    Raises STREAM_INVALID when it is neither or holds a non-object."""
    if isinstance(data, dict) and isinstance(data.get("events"), list):
        data = data["events"]
    if not isinstance(data, list):
        raise ValidationError("stream file must be a JSON array of events", code="STREAM_INVALID")
    for i, event in enumerate(data):
        if not isinstance(event, dict):
            raise ValidationError(f"event {i} is not an object", code="STREAM_INVALID", index=i)
    return data


def register_signers(store: Appender, tenant_id: str, signers: Sequence[ImportSigner]) -> list[str]:
    """Register each key for the tenant with its role as purpose, all or none (SIGNER_KEY_CONFLICT when one is
    registered with another role: then none is); a key already registered with the same role is left as it is.
    Returns the ids of the keys registered now (`forget_signers` removes them if the file is refused)."""
    return store.signer_keys.register_all(tenant_id, [(s.public_key_pem, s.role) for s in signers])


def forget_signers(store: Appender, tenant_id: str, key_ids: Sequence[str], result: ImportResult) -> None:
    """After an import that wrote nothing (its file refused, or nothing appended before the refusal), remove the
    keys it registered: they sign nothing stored, and a refused file leaves the tenant as it was."""
    if result.refused is not None and result.appended == 0:
        store.signer_keys.forget(tenant_id, key_ids)


def named_tenant(event: Mapping[str, Any]) -> str | None:
    """The tenant a JOB_CREATED gives its job, as settld reads it (`payload.tenantId`, trimmed, `tenant_default`
    when absent or blank); None for another type."""
    if event.get("type") != "JOB_CREATED":
        return None
    payload = event.get("payload")
    named = payload.get("tenantId") if isinstance(payload, dict) else None
    text = "" if named is None else js_trim(js_to_string(named))
    return text or DEFAULT_TENANT_ID


def names_other_tenant(event: Mapping[str, Any], tenant_id: str) -> bool:
    """A JOB_CREATED whose job would belong to another tenant than `tenant_id` (`named_tenant`)."""
    named = named_tenant(event)
    return named is not None and named != tenant_id


def import_events(store: Appender, tenant_id: str, events: Sequence[Mapping[str, Any]], *,
                  strict: bool = False, retenant: bool = False, chunk_size: int = 64,
                  progress: Callable[[int], None] | None = None) -> ImportResult:
    """Append `events` in file order to their streams, as event-by-event appends would; stop at the first refused.

    First the whole file is verified, before anything is written (`Appender.verify_history`: each stream's hash
    chain, every signature present against the tenant's keys). In history mode a failure there is where settld's
    API refused the stream (it verifies the whole chain at each append): the events before it are appended, as
    below, and that event is refused, nothing of it written; an append refusing an earlier event stops the import
    there instead. With `strict` (envelope shapes checked too) such a failure refuses the file: nothing is
    written. The appends use the HISTORY policy (the events are recorded history, not new input); `strict` uses
    the LIVE policy, so an unsigned event or a lone surrogate is refused.

    A JOB_CREATED (the first or a later one) whose job belongs to another tenant than `tenant_id` (its
    `payload.tenantId`, `tenant_default` when it names none, as settld's reducer reads it) is refused
    (JOB_TENANT_MISMATCH, as the API refuses it; the events before it appended) unless `retenant`: then it is
    appended under `tenant_id` (its signed tenantId cannot be changed) and counted in `retenanted`.

    An event already stored in its stream, identical (same envelope, signature included), is skipped: a re-run
    resumes. Refusal = a SettlekitError with a 4xx status raised by the append path for that event (nothing of
    it is written). Anything else (a 5xx such as DATABASE_UNAVAILABLE, a bug) propagates; the events before it
    stay stored and a re-run resumes after them. `progress(n)` is called as events are handled.

    Consecutive events of one stream go to the store in chunks of up to `chunk_size` (one transaction each, so
    a PostgreSQL import is not bound by one commit per event). A chunk the store refuses is written nothing; it
    is then split (before the event the refusal names, if it names one, else in halves) and each part appended
    in turn, the left one first, down to the single refused event. The store checks each event of a batch
    against the state after the ones before it, so the outcome is exactly that of appending one event at a time.
    """
    policy = LIVE if strict else HISTORY
    result = ImportResult()
    broken = _check_file(store, tenant_id, events, policy)
    if broken is not None and (not policy.recorded or broken.index == 0):
        result.refused = broken  # nothing before it: nothing is written
        return result
    if broken is not None:
        events = events[:broken.index]  # appended as settld's API took them, one by one, up to the broken one
    stored: dict[str, dict[str, Mapping[str, Any]]] = {}
    i = 0
    while i < len(events):
        stream_id = str(events[i]["streamId"])
        known = stored.get(stream_id)
        if known is None:
            known = stored[stream_id] = _stored_by_id(store, tenant_id, stream_id)
        if _already_stored(known, events[i], policy):
            result.skipped += 1
            i += 1
        elif not retenant and names_other_tenant(events[i], tenant_id):
            result.refused = _refusal(i, events[i], _tenant_mismatch(events[i], tenant_id))
            return result
        else:
            j = _chunk_end(events, i, stream_id, known, chunk_size, policy, tenant_id)
            result.refused = _append_exact(store, tenant_id, stream_id, events, i, j, result, policy)
            if result.refused is not None:
                return result
            i = j
        if progress is not None:
            progress(i)
    result.refused = broken
    return result


def _check_file(store: Appender, tenant_id: str, events: Sequence[Mapping[str, Any]],
                policy: AppendPolicy) -> Refusal | None:
    """The checks of the whole file before anything is written: every event names its stream as a string, and
    `Appender.verify_history` (in history mode up to the first envelope settld's rules refuse: the import stops
    there, at that event's append). Returns the refusal of the first event that fails them (in history mode the
    first in file order: the import appends the events before it; else a streamId first, and the file is
    refused)."""
    bad_stream = next((i for i, event in enumerate(events) if not isinstance(event.get("streamId"), str)), None)
    if bad_stream is not None and not policy.recorded:
        return _refusal(bad_stream, events[bad_stream],
                        ValidationError("streamId must be a string", code="SCHEMA_INVALID"))
    checked = events if bad_stream is None else events[:bad_stream]
    try:
        store.verify_history(tenant_id, checked, policy=policy)
    except SettlekitError as exc:
        if exc.status >= 500:
            raise
        index = _batch_index(exc, len(events))
        if index is None:
            raise
        return _refusal(index, events[index], exc)
    if bad_stream is not None:
        return _refusal(bad_stream, events[bad_stream],
                        ValidationError("streamId must be a string", code="SCHEMA_INVALID"))
    return None


def _chunk_end(events: Sequence[Mapping[str, Any]], start: int, stream_id: str,
               known: Mapping[str, Mapping[str, Any]], chunk_size: int, policy: AppendPolicy,
               tenant_id: str) -> int:
    """Where the chunk that starts at `start` ends: up to `chunk_size` consecutive events of `stream_id`, stopping
    before one already stored and before a JOB_CREATED of another tenant (checked on its own)."""
    end = start + 1
    while (end < len(events) and end - start < chunk_size and events[end].get("streamId") == stream_id
           and not _already_stored(known, events[end], policy) and not names_other_tenant(events[end], tenant_id)):
        end += 1
    return end


def _append_exact(store: Appender, tenant_id: str, stream_id: str, events: Sequence[Mapping[str, Any]],
                  lo: int, hi: int, result: ImportResult, policy: AppendPolicy) -> Refusal | None:
    """Append events[lo:hi] in one go; when the store refuses, split and go on with each part (the left one
    first), down to the single refused event, which is returned. Counts what was stored in `result`."""
    try:
        appended = store.append(tenant_id, stream_id, events[lo:hi], policy=policy)
        if appended.already_exists:  # another writer stored these very events since the stream was read
            result.skipped += hi - lo
        else:
            result.appended += hi - lo
            result.retenanted += sum(names_other_tenant(e, tenant_id) for e in events[lo:hi])
            result.unsigned += appended.unsigned
            result.lone_surrogates += appended.lone_surrogates
        return None
    except SettlekitError as exc:
        if exc.status >= 500:
            raise
        if hi - lo == 1:
            return _refusal(lo, events[lo], exc)
        named = _batch_index(exc, hi - lo)
    # Split right before the event the refusal names (that one alone when it is the first), else in halves.
    mid = (lo + hi) // 2 if named is None else lo + max(named, 1)
    return (_append_exact(store, tenant_id, stream_id, events, lo, mid, result, policy)
            or _append_exact(store, tenant_id, stream_id, events, mid, hi, result, policy))


def _tenant_mismatch(event: Mapping[str, Any], tenant_id: str) -> SettlekitError:
    named = named_tenant(event)
    return SettlekitError(f"JOB_CREATED names tenant {named!r}, another tenant than {tenant_id!r}; import it with "
                          "--tenant set to that tenant, or with --retenant to keep it under this one",
                          code="JOB_TENANT_MISMATCH", status=403, tenantId=tenant_id, namedTenantId=named)


def _batch_index(exc: SettlekitError, size: int) -> int | None:
    """The position in the batch of the event a refusal names, when it names one."""
    index = exc.details.get("index")
    return index if type(index) is int and 0 <= index < size else None


def _stored_by_id(store: Appender, tenant_id: str, stream_id: str) -> dict[str, Mapping[str, Any]]:
    if store.streams.head(tenant_id, stream_id) is None:
        return {}
    return {e["id"]: e for e in store.streams.read_stream(tenant_id, stream_id)}


def _already_stored(known: Mapping[str, Mapping[str, Any]], event: Mapping[str, Any],
                    policy: AppendPolicy) -> bool:
    """The very same envelope is in the stream (schemaVersion, which the store does not keep, aside; in history
    mode, the event as settld recorded it: fields beside the envelope's dropped, absent ones null)."""
    found = known.get(str(event.get("id")))
    if found is None:
        return False
    if policy.recorded:
        try:
            return same_json(recorded_envelope(event, 0), found)
        except ValidationError:
            return False
    return same_json({k: v for k, v in event.items() if k not in ("schemaVersion", "schema_version")}, found)


def _refusal(index: int, event: Mapping[str, Any], exc: SettlekitError) -> Refusal:
    event_id = event.get("id")
    return Refusal(index, event_id if isinstance(event_id, str) else None, exc.code,
                   _strip_batch_index(exc.message))


def _strip_batch_index(message: str) -> str:
    """The store numbers events within its batch; each batch here is one event, so `event 0: ` says nothing
    (the refusal carries the index in the file). The up-front check numbers them in the file: also dropped."""
    return re.sub(r"^(event \d+: |event\[\d+\]\.)", "", message)
