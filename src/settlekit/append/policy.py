"""What an append demands beyond the stream's own rules: input policy, time, signers."""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta

from settlekit.errors import SignerPolicyError, ValidationError
from settlekit.events.envelope import Event
from settlekit.events.js import date_parse_ms
from settlekit.store.signer_keys import SignerKey

FUTURE_TOLERANCE = timedelta(minutes=5)


@dataclass(frozen=True)
class AppendPolicy:
    """What an append demands of its input beyond the stream's rules.

    `LIVE` (the default, and the only policy the HTTP API uses): new input, so a client-finalized event must
    carry the signature its type needs (the robot's, the operator's or the server's) and no string may hold a
    lone UTF-16 surrogate. `HISTORY` (`settlekit import` of a settld export, and Python callers that replay
    recorded history): client-finalized envelopes only; a signature that is present is verified as ever, but
    its absence is not refused, and lone surrogates in the payload are stored as recorded (hashed as JS does,
    kept as `\\udxxx` escapes in the stored JSON). Every other rule (envelope, chain, payloads, transitions,
    server rules) applies unchanged.

    `recorded` (HISTORY): the envelope, its time and its type are judged as settld's API judged what it stored
    (`settlekit.events.recorded`: ids and types of any length with white space inside, an `at` that `Date.parse`
    reads, actors with more keys, fields beside the envelope's dropped, a `schemaVersion` that reads as 1; the
    signature in any base64 spelling node reads, an empty one as none); types outside the job transition table
    and a JOB_CREATED after the first event are taken as settld's reducer takes them; settlekit's own payload
    schema checks (`jobs.validate`) give way to settld's validators alone."""

    require_signatures: bool = True
    allow_lone_surrogates: bool = False
    recorded: bool = False

    @property
    def is_live(self) -> bool:
        return self.require_signatures and not self.allow_lone_surrogates and not self.recorded


LIVE = AppendPolicy()
HISTORY = AppendPolicy(require_signatures=False, allow_lone_surrogates=True, recorded=True)


def check_not_in_future(at: str, now: datetime, index: int, *, recorded: bool = False) -> None:
    """A client-finalized event may not be dated more than FUTURE_TOLERANCE after `now` (FUTURE_TIMESTAMP).
    `recorded`: `at` is read with `Date.parse`, as settld read it (any spelling it reads; the envelope check
    refused the others)."""
    if recorded:
        ms = date_parse_ms(at)
        if ms > (now + FUTURE_TOLERANCE).timestamp() * 1000:
            raise ValidationError(f"event {index}: at {at} is more than 5 minutes in the future",
                                  code="FUTURE_TIMESTAMP", index=index)
        return
    if _parse_at(at, index) > now + FUTURE_TOLERANCE:
        raise ValidationError(f"event {index}: at {at} is more than 5 minutes in the future",
                              code="FUTURE_TIMESTAMP", index=index)


def check_server_draft_actor(draft: Event, index: int) -> None:
    """A server draft is signed by the server key: it cannot carry a robot or operator actor."""
    actor_type = draft["actor"]["type"]
    if actor_type in ("robot", "operator"):
        raise SignerPolicyError(f"event {index}: server-draft events cannot carry a {actor_type} actor",
                                index=index, actorType=actor_type)


def check_signed_actor(event: Event, index: int, required: str | None, *, robot_or_operator: bool = False) -> None:
    """The actor must be of the kind whose key signs the event (`required`: its type's signer, resolved by its
    actor; `robot_or_operator`: the type takes either), whoever signed it, as settld's signature policy: a robot
    type needs a robot actor, an operator type an operator actor, a robot_or_operator type one of the two; a
    server-signed event (a server type, a server_or_operator type with a robot actor, a server_or_robot type with
    an operator actor) cannot carry a robot or operator actor."""
    actor_type = event["actor"]["type"]
    if required == "server" and actor_type in ("robot", "operator"):
        raise SignerPolicyError(f"event {index}: {event['type']} is signed by the server and cannot carry a "
                                f"{actor_type} actor", index=index, eventType=event["type"], actorType=actor_type)
    if robot_or_operator and actor_type not in ("robot", "operator"):
        raise SignerPolicyError(f"event {index}: robot_or_operator-signed events require actor.type=robot|operator",
                                index=index, eventType=event["type"], actorType=actor_type)
    if required in ("robot", "operator") and actor_type != required:
        raise SignerPolicyError(f"event {index}: {required}-signed events require actor.type={required}",
                                index=index, eventType=event["type"], actorType=actor_type)


def check_server_draft_type(draft: Event, index: int, required: str | None) -> None:
    """Nor can it be of a type that needs a robot's or an operator's key (`required`: the type's signer)."""
    if required in ("robot", "operator"):
        raise SignerPolicyError(f"event {index}: {draft['type']} must be signed by a {required}", index=index,
                                eventType=draft["type"], requiredSigner=required)


def check_signer(event: Event, index: int, keys: Mapping[str, SignerKey], required: str | None,
                 policy: AppendPolicy = LIVE) -> bool:
    """Refuse what the signer policy forbids (`required`: the signer the event type needs, if any); False when
    the event is accepted only because `policy` does not require signatures (an unsigned client-finalized
    event). New input of a server-signed type must carry the server's signature: unsigned, it is refused, as
    settld refuses it; the way to write one without the server key is a server draft."""
    key_id = event.get("signerKeyId")
    if event.get("signature") is None or (policy.recorded and event.get("signature") == ""):
        if required is None:
            return True
        if not policy.require_signatures:
            return False
        hint = "; send it as a server draft, which the server signs" if required == "server" else ""
        raise SignerPolicyError(f"event {index}: {event['type']} must be signed by a {required} key{hint}",
                                index=index, requiredSigner=required)
    key = keys.get(key_id or "")
    if key is None:
        raise SignerPolicyError(f"event {index}: signer key {key_id} is not registered for this tenant",
                                code="SIGNER_UNKNOWN", index=index)
    if key.status != "active":
        raise SignerPolicyError(f"event {index}: signer key {key_id} is {key.status}",
                                code="SIGNER_KEY_NOT_ACTIVE", index=index, keyStatus=key.status)
    actor_type = event["actor"]["type"]
    purpose = required or _purpose_for_actor(actor_type)
    if key.purpose != purpose:
        raise SignerPolicyError(f"event {index}: key {key_id} has purpose {key.purpose}, needs {purpose}",
                                code="SIGNER_KEY_PURPOSE_MISMATCH", index=index)
    if purpose in ("robot", "operator") and key.entity_id is not None and key.entity_id != event["actor"]["id"]:
        raise SignerPolicyError(f"event {index}: key {key_id} belongs to {key.entity_id}, not the actor",
                                index=index)
    return True


def _purpose_for_actor(actor_type: str) -> str:
    return actor_type if actor_type in ("robot", "operator") else "server"


# An instant in the extended calendar form (YYYY-MM-DD, then the time): Python also reads ISO's basic, week and
# ordinal forms (20260115T…, 2026-W03-4T…, 2026-015T…), which settld's Date.parse does not, and which the month
# close, placing entries by their text a day or more from a bound, would put in the wrong month.
_CALENDAR_DATE = re.compile(r"[0-9]{4}-[0-9]{2}-[0-9]{2}(?:[T ]|\Z)", re.ASCII)


def _parse_at(at: str, index: int) -> datetime:
    try:
        if not _CALENDAR_DATE.match(at):
            raise ValueError("not the extended calendar form")
        parsed = datetime.fromisoformat(at)
    except ValueError as exc:
        raise ValidationError(f"event {index}: at {at!r} is not an ISO-8601 instant (YYYY-MM-DDTHH:MM:SS.sssZ)",
                              code="SCHEMA_INVALID", index=index, field="at") from exc
    if parsed.tzinfo is None:
        raise ValidationError(f"event {index}: at {at!r} has no time zone", code="SCHEMA_INVALID", index=index,
                              field="at")
    return parsed
