"""settld v1 envelope: drafts, payload and chain hashes, Ed25519 signatures, key ids, chain verification."""

from __future__ import annotations

import base64
import hashlib
import json
import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, Final

from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey, Ed25519PublicKey

from settlekit.errors import NotFoundError, ValidationError, VerificationError
from settlekit.events.canonical import canonical_json, iso_millis, quote_string
from settlekit.events.ed25519 import verify_ed25519
from settlekit.events.randomness import random_bytes

ENVELOPE_VERSION: Final = 1
ENVELOPE_FIELDS: Final = (
    "v", "id", "at", "streamId", "type", "actor", "payload",
    "payloadHash", "prevChainHash", "chainHash", "signature", "signerKeyId",
)
HASH_FIELDS: Final = ("payloadHash", "chainHash", "signature", "signerKeyId", "prevChainHash")
_HEX64 = re.compile(r"[0-9a-f]{64}")
_NO_WS = re.compile(r"\s")

Event = dict[str, Any]


def new_event_id() -> str:
    """`evt_<uuid4>`, lower-case hex, hyphenated (formatted directly: cheaper than uuid.UUID)."""
    b = bytearray(random_bytes(16))
    b[6] = (b[6] & 0x0F) | 0x40
    b[8] = (b[8] & 0x3F) | 0x80
    h = b.hex()
    return f"evt_{h[:8]}-{h[8:12]}-{h[12:16]}-{h[16:20]}-{h[20:]}"


def now_iso() -> str:
    return iso_millis(datetime.now(UTC))


def key_id_for_public_pem(public_key_pem: str) -> str:
    """`key_` + first 24 hex chars of sha256 of the PEM text exactly as given."""
    return "key_" + hashlib.sha256(public_key_pem.encode("utf-8")).hexdigest()[:24]


@dataclass(frozen=True)
class Signer:
    """A private Ed25519 key with its key id."""

    key_id: str
    private_key: Ed25519PrivateKey
    public_key_pem: str

    @classmethod
    def generate(cls) -> Signer:
        return cls.from_private_key(Ed25519PrivateKey.generate())

    @classmethod
    def from_private_key(cls, key: Ed25519PrivateKey) -> Signer:
        pem = key.public_key().public_bytes(
            serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
        ).decode("ascii")
        return cls(key_id=key_id_for_public_pem(pem), private_key=key, public_key_pem=pem)

    @classmethod
    def from_pem(cls, private_key_pem: str, public_key_pem: str | None = None) -> Signer:
        key = serialization.load_pem_private_key(private_key_pem.encode("ascii"), password=None)
        if not isinstance(key, Ed25519PrivateKey):
            raise ValidationError("private key is not Ed25519", code="SIGNER_KEY_INVALID")
        if public_key_pem is None:
            return cls.from_private_key(key)
        return cls(key_id=key_id_for_public_pem(public_key_pem), private_key=key, public_key_pem=public_key_pem)

    def private_key_pem(self) -> str:
        return self.private_key.private_bytes(
            serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
        ).decode("ascii")

    def sign_payload_hash(self, payload_hash: str) -> str:
        return base64.b64encode(self.private_key.sign(bytes.fromhex(payload_hash))).decode("ascii")


def load_public_key(public_key_pem: str) -> Ed25519PublicKey:
    try:
        key = serialization.load_pem_public_key(public_key_pem.encode("ascii"))
    except (ValueError, UnicodeEncodeError) as exc:
        raise ValidationError(f"public key PEM is not valid: {exc}", code="SIGNER_KEY_INVALID") from exc
    if not isinstance(key, Ed25519PublicKey):
        raise ValidationError("public key is not Ed25519", code="SIGNER_KEY_INVALID")
    return key


# Node's base64 alphabet, both spellings: '+' and '-' are 62, '/' and '_' are 63.
_NODE_BASE64_VALUES: Final = {c: i for i, c in enumerate(
    b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/")} | {ord("-"): 62, ord("_"): 63}


def node_base64_decode(text: str) -> bytes:
    """The bytes Node's `Buffer.from(text, "base64")` gives (node 20).

    Node reads the string's UTF-16 code units, each cut to its low byte (U+0144 reads as 'D', U+013D and the
    low byte of many astral characters as '='). It skips every byte outside both base64 alphabets (white space,
    line breaks, '.', U+0000, …), stops at the first '=', and turns what it read into bytes 4 characters to 3;
    a last group of 2 or 3 characters gives 1 or 2 bytes, a last lone character none. Padding is optional."""
    units = text.encode("utf-16-le", "surrogatepass")[::2]  # the low byte of each UTF-16 code unit
    stop = units.find(b"=")
    if stop >= 0:
        units = units[:stop]
    values = [v for v in map(_NODE_BASE64_VALUES.get, units) if v is not None]
    out = bytearray()
    for i in range(0, len(values) - len(values) % 4, 4):
        a, b, c, d = values[i:i + 4]
        n = (a << 18) | (b << 12) | (c << 6) | d
        out += bytes((n >> 16, (n >> 8) & 0xFF, n & 0xFF))
    rest = values[len(values) - len(values) % 4:]
    if len(rest) >= 2:
        n = (rest[0] << 18) | (rest[1] << 12) | ((rest[2] << 6) if len(rest) == 3 else 0)
        out += bytes((n >> 16, (n >> 8) & 0xFF))[: len(rest) - 1]
    return bytes(out)


def verify_signature(public_key: Ed25519PublicKey, payload_hash: str, signature_b64: str, *,
                     node_base64: bool = False) -> bool:
    """Whether `signature_b64` is `public_key`'s Ed25519 signature of the payload hash's bytes. The signature is
    strict base64, or with `node_base64` any spelling settld reads (`node_base64_decode`)."""
    try:
        raw = node_base64_decode(signature_b64) if node_base64 else base64.b64decode(signature_b64, validate=True)
        message = bytes.fromhex(payload_hash)
    except ValueError:
        return False
    return verify_ed25519(public_key, raw, message)


_quote = quote_string


def payload_material(event: Mapping[str, Any]) -> str:
    """Canonical JSON of the seven hashed fields. The envelope keys have a fixed order, so only the payload
    needs the general canonicalizer when the fields have their usual types."""
    actor = event["actor"]
    if (type(actor) is dict and len(actor) == 2 and type(actor.get("id")) is str and type(actor.get("type")) is str
            and event["v"] == 1 and type(event["v"]) is int and type(event["id"]) is str
            and type(event["at"]) is str and type(event["streamId"]) is str and type(event["type"]) is str):
        return (f'{{"actor":{{"id":{_quote(actor["id"])},"type":{_quote(actor["type"])}}},"at":{_quote(event["at"])}'
                f',"id":{_quote(event["id"])},"payload":{canonical_json(event["payload"])}'
                f',"streamId":{_quote(event["streamId"])},"type":{_quote(event["type"])},"v":1}}')
    return canonical_json(
        {
            "v": event["v"],
            "id": event["id"],
            "at": event["at"],
            "streamId": event["streamId"],
            "type": event["type"],
            "actor": event["actor"],
            "payload": event["payload"],
        }
    )


def compute_payload_hash(event: Mapping[str, Any]) -> str:
    return hashlib.sha256(payload_material(event).encode("utf-8")).hexdigest()


def compute_chain_hash(prev_chain_hash: str | None, payload_hash: str) -> str:
    # Canonical form of {"v":1,"prevChainHash":…,"payloadHash":…}: keys sorted, values are hex or null.
    prev = "null" if prev_chain_hash is None else f'"{prev_chain_hash}"'
    material = f'{{"payloadHash":"{payload_hash}","prevChainHash":{prev},"v":1}}'
    return hashlib.sha256(material.encode("ascii")).hexdigest()


def make_draft(
    *,
    stream_id: str,
    type: str,
    actor: Mapping[str, Any],
    payload: Any,
    at: str | None = None,
    id: str | None = None,
) -> Event:
    """A draft event: the seven hashed fields, hash and signature fields null.

    Values must already be JSON values; run `settlekit.events.canonical.normalize` first on data holding
    datetimes or UNDEFINED."""
    return {
        "v": ENVELOPE_VERSION,
        "id": id or new_event_id(),
        "at": at or now_iso(),
        "streamId": stream_id,
        "type": type,
        "actor": dict(actor),
        "payload": payload,
        "payloadHash": None,
        "prevChainHash": None,
        "chainHash": None,
        "signature": None,
        "signerKeyId": None,
    }


def finalize(draft: Mapping[str, Any], prev_chain_hash: str | None, signer: Signer | None = None) -> Event:
    """Compute payloadHash and chainHash against `prev_chain_hash`; sign when a signer is given."""
    event = dict(draft)
    payload_hash = compute_payload_hash(event)
    event["payloadHash"] = payload_hash
    event["prevChainHash"] = prev_chain_hash
    event["chainHash"] = compute_chain_hash(prev_chain_hash, payload_hash)
    if signer is not None:
        event["signature"] = signer.sign_payload_hash(payload_hash)
        event["signerKeyId"] = signer.key_id
    else:
        event["signature"] = None
        event["signerKeyId"] = None
    return event


def finalize_with_text(draft: Mapping[str, Any], prev_chain_hash: str | None,
                       signer: Signer | None = None) -> tuple[Event, str, int]:
    """Finalize one draft and also return the stored JSON text of the envelope and the payload's canonical
    byte size, canonicalizing the payload only once."""
    actor = draft["actor"]
    simple = (type(actor) is dict and len(actor) == 2 and type(actor.get("id")) is str
              and type(actor.get("type")) is str and draft["v"] == 1 and type(draft["v"]) is int
              and type(draft["id"]) is str and type(draft["at"]) is str and type(draft["streamId"]) is str
              and type(draft["type"]) is str)
    if not simple:
        event = finalize(draft, prev_chain_hash, signer)
        text = json.dumps(event, ensure_ascii=False, separators=(",", ":"))
        return event, text, len(canonical_json(event["payload"]).encode("utf-8"))
    payload_text = canonical_json(draft["payload"])
    actor_text = f'{{"id":{_quote(actor["id"])},"type":{_quote(actor["type"])}}}'
    at, eid, sid, etype = _quote(draft["at"]), _quote(draft["id"]), _quote(draft["streamId"]), _quote(draft["type"])
    material = (f'{{"actor":{actor_text},"at":{at},"id":{eid},"payload":{payload_text},"streamId":{sid}'
                f',"type":{etype},"v":1}}').encode()
    payload_hash = hashlib.sha256(material).hexdigest()
    chain_hash = compute_chain_hash(prev_chain_hash, payload_hash)
    signature = signer.sign_payload_hash(payload_hash) if signer is not None else None
    key_id = signer.key_id if signer is not None else None
    event = {"v": 1, "id": draft["id"], "at": draft["at"], "streamId": draft["streamId"], "type": draft["type"],
             "actor": actor, "payload": draft["payload"], "payloadHash": payload_hash,
             "prevChainHash": prev_chain_hash, "chainHash": chain_hash, "signature": signature,
             "signerKeyId": key_id}
    prev_text = "null" if prev_chain_hash is None else f'"{prev_chain_hash}"'
    sig_text = "null" if signature is None else f'"{signature}"'
    kid_text = "null" if key_id is None else _quote(key_id)
    text = (f'{{"v":1,"id":{eid},"at":{at},"streamId":{sid},"type":{etype},"actor":{actor_text}'
            f',"payload":{payload_text},"payloadHash":"{payload_hash}","prevChainHash":{prev_text}'
            f',"chainHash":"{chain_hash}","signature":{sig_text},"signerKeyId":{kid_text}}}')
    return event, text, len(payload_text.encode("utf-8")) if not payload_text.isascii() else len(payload_text)


def finalize_chain(drafts: Iterable[Mapping[str, Any]], prev_chain_hash: str | None,
                   signer: Signer | None = None) -> list[Event]:
    out: list[Event] = []
    prev = prev_chain_hash
    for draft in drafts:
        event = finalize(draft, prev, signer)
        out.append(event)
        prev = event["chainHash"]
    return out


def _is_str(v: Any) -> bool:
    return type(v) is str


def is_event_id(value: Any) -> bool:
    """An event id: a string of 1..200 characters without whitespace."""
    return _is_str(value) and 1 <= len(value) <= 200 and not _NO_WS.search(value)


def check_envelope_shape(event: Any, index: int | None = None) -> None:
    """Types and required fields of a finalized envelope. Raises SCHEMA_INVALID naming the field."""
    where = f"event[{index}]" if index is not None else "event"

    def bad(field: str, why: str) -> ValidationError:
        return ValidationError(f"{where}.{field} {why}", code="SCHEMA_INVALID", field=field, index=index)

    if not isinstance(event, dict):
        raise ValidationError(f"{where} is not an object", code="SCHEMA_INVALID", index=index)
    extra = set(event) - set(ENVELOPE_FIELDS) - {"schemaVersion", "schema_version"}
    if extra:
        raise bad(sorted(extra)[0], "is not an envelope field")
    for field in ENVELOPE_FIELDS:
        if field not in event:
            raise bad(field, "is required")
    if type(event["v"]) is not int:
        raise bad("v", "must be an integer")
    if not is_event_id(event["id"]):
        raise bad("id", "must be 1..200 characters without whitespace")
    for field in ("at", "streamId", "type"):
        if not _is_str(event[field]) or not event[field]:
            raise bad(field, "must be a non-empty string")
    actor = event["actor"]
    if not isinstance(actor, dict) or set(actor) != {"type", "id"}:
        raise bad("actor", "must be an object with exactly the keys type and id")
    if not _is_str(actor["type"]) or not actor["type"] or not _is_str(actor["id"]) or not actor["id"]:
        raise bad("actor", "type and id must be non-empty strings")
    for field in ("payloadHash", "chainHash"):
        if not _is_str(event[field]) or not _HEX64.fullmatch(event[field]):
            raise bad(field, "must be 64 lower-case hex characters")
    prev = event["prevChainHash"]
    if prev is not None and (not _is_str(prev) or not _HEX64.fullmatch(prev)):
        raise bad("prevChainHash", "must be null or 64 lower-case hex characters")
    for field in ("signature", "signerKeyId"):
        if event[field] is not None and (not _is_str(event[field]) or not event[field]):
            raise bad(field, "must be null or a non-empty string")


PublicKeyLookup = Callable[[str], Ed25519PublicKey | None]


def _lookup_from(keys: Mapping[str, Any] | PublicKeyLookup | None) -> PublicKeyLookup:
    if keys is None:
        return lambda _key_id: None
    if callable(keys):
        return keys
    cache: dict[str, Ed25519PublicKey] = {}

    def lookup(key_id: str) -> Ed25519PublicKey | None:
        if key_id in cache:
            return cache[key_id]
        value = keys.get(key_id)
        if value is None:
            return None
        key = value if isinstance(value, Ed25519PublicKey) else load_public_key(value)
        cache[key_id] = key
        return key

    return lookup


def _js_truthy(value: Any) -> bool:
    """JavaScript's truthiness of a JSON value (null, false, 0, -0 and "" are falsy; objects and arrays are not)."""
    if value is None or value is False or value == "":
        return False
    return not (type(value) in (int, float) and value == 0)


def verify_link(event: Mapping[str, Any], prev_chain_hash: str | None, index: int,
                lookup: PublicKeyLookup, *, node_base64: bool = False) -> None:
    """Verify one event against the chain hash before it (§5, steps 1-5).

    An event is signed when its `signature` is truthy as settld reads it (`if (event.signature)`): an empty
    string, like null, is no signature; a signed event's `signerKeyId` must be truthy too. `node_base64`: read
    the signature as node's `Buffer.from(s, "base64")` does (no padding, the URL-safe alphabet, white space and
    other bytes skipped, the end at the first '='), as settld verifies it; otherwise it must be strict base64."""
    if event.get("v") != ENVELOPE_VERSION:
        raise VerificationError(f"event {index}: envelope version {event.get('v')!r} is not supported",
                                code="ENVELOPE_VERSION_UNSUPPORTED", index=index)
    if event.get("prevChainHash") != prev_chain_hash:
        raise VerificationError(
            f"event {index}: prevChainHash does not link to the previous event",
            code="CHAIN_BREAK", index=index,
            expectedPrevChainHash=prev_chain_hash, prevChainHash=event.get("prevChainHash"),
        )
    payload_hash = compute_payload_hash(event)
    if payload_hash != event.get("payloadHash"):
        raise VerificationError(f"event {index}: payloadHash does not match the content",
                                code="PAYLOAD_HASH_MISMATCH", index=index)
    if compute_chain_hash(prev_chain_hash, payload_hash) != event.get("chainHash"):
        raise VerificationError(f"event {index}: chainHash does not match", code="CHAIN_HASH_MISMATCH",
                                index=index)
    signature = event.get("signature")
    if _js_truthy(signature):
        key_id = event.get("signerKeyId")
        if not _js_truthy(key_id):
            raise VerificationError(f"event {index}: signed but signerKeyId is missing",
                                    code="SIGNER_KEY_ID_REQUIRED", index=index)
        key = lookup(key_id) if type(key_id) is str else None
        if key is None:
            raise VerificationError(f"event {index}: signer key {key_id} is unknown",
                                    code="SIGNER_UNKNOWN", index=index, signerKeyId=key_id)
        if type(signature) is not str or not verify_signature(key, payload_hash, signature,
                                                              node_base64=node_base64):
            raise VerificationError(f"event {index}: signature is not valid", code="SIG_INVALID", index=index)


def verify_chain(events: Sequence[Mapping[str, Any]],
                 public_keys: Mapping[str, Any] | PublicKeyLookup | None = None) -> None:
    """Verify a whole stream in order, as settld's `verifyChainedEvents` does (signatures in any base64 spelling
    node reads, an empty signature as none); raises VerificationError at the first bad index."""
    lookup = _lookup_from(public_keys)
    prev: str | None = None
    for i, event in enumerate(events):
        if not isinstance(event, Mapping):
            raise VerificationError(f"event {i} is not an object", code="SCHEMA_INVALID", index=i)
        try:
            verify_link(event, prev, i, lookup, node_base64=True)
        except KeyError as exc:
            raise VerificationError(f"event {i}: missing field {exc}", code="SCHEMA_INVALID", index=i) from exc
        prev = event.get("chainHash")


def slice_through_chain_hash(events: Sequence[Event], at_chain_hash: str) -> list[Event]:
    """events[0..idx] inclusive where idx is the first event whose chainHash matches."""
    if not isinstance(at_chain_hash, str) or not at_chain_hash:
        raise ValidationError("atChainHash must be a non-empty string", code="SCHEMA_INVALID")
    for i, event in enumerate(events):
        if event.get("chainHash") == at_chain_hash:
            return list(events[: i + 1])
    raise NotFoundError(f"chain hash {at_chain_hash} is not in the stream", code="ATCHAINHASH_NOT_FOUND")


def parse_keys_file(data: Any) -> dict[str, str]:
    """KEYS.json: either {keyId: pem} or a list of {keyId, publicKeyPem, ...}."""
    if isinstance(data, dict):
        if all(isinstance(k, str) and isinstance(v, str) for k, v in data.items()):
            return dict(data)
        raise ValidationError("keys object must map keyId to a PEM string", code="SCHEMA_INVALID")
    if isinstance(data, list):
        out: dict[str, str] = {}
        for i, item in enumerate(data):
            if not isinstance(item, dict) or not isinstance(item.get("publicKeyPem"), str):
                raise ValidationError(f"keys[{i}] needs publicKeyPem", code="SCHEMA_INVALID")
            key_id = item.get("keyId") or key_id_for_public_pem(item["publicKeyPem"])
            out[key_id] = item["publicKeyPem"]
        return out
    raise ValidationError("keys file must be an object or a list", code="SCHEMA_INVALID")
