"""Month close (docs/finance.md): periods, the closing statement folded from a period's journal entries, the
stream-head leaves of the tenant's Merkle log, and the signed MonthClose.v1 document with its offline check.

Pure: the store hands the period's entries (in journal order) and leaves; nothing here reads a clock or a database.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any, Final

from settlekit.errors import ValidationError
from settlekit.events.canonical import canonical_bytes, canonical_hash, iso_millis, sha256_hex
from settlekit.events.envelope import Signer, key_id_for_public_pem, load_public_key, verify_signature
from settlekit.ledger import accounts as A
from settlekit.ledger import merkle
from settlekit.ledger.timeline import epoch_millis, millis_to_iso

MONTH_CLOSE: Final = "MonthClose.v1"
_MONTH = re.compile(r"([0-9]{4})-(0[1-9]|1[0-2])")
_RECEIVABLE_ACCOUNTS: Final = frozenset({A.INSURER_RECEIVABLE, A.OPERATOR_CHARGEBACK_RECEIVABLE})
_UNSIGNED_FIELDS: Final = ("artifactHash", "signature")


def require_month(value: str) -> str:
    """`YYYY-MM` of the years 0001 to 9999; FINANCE_MONTH_INVALID otherwise."""
    if not isinstance(value, str) or not _MONTH.fullmatch(value) or value.startswith("0000"):
        raise ValidationError(f"month must be YYYY-MM, got {value!r}", code="FINANCE_MONTH_INVALID", month=value)
    return value


def next_month(month: str) -> str:
    year, mon = int(month[:4]), int(month[5:7])
    return f"{year + mon // 12:04d}-{mon % 12 + 1:02d}"


def month_start(month: str) -> str:
    """The first instant of the month as the ISO text entries carry (UTC, milliseconds)."""
    return f"{require_month(month)}-01T00:00:00.000Z"


def day_shifted(bound: str, days: int) -> str:
    """A period bound (`YYYY-MM-01T00:00:00.000Z`, or the year-0000/10000 texts either side of the range) moved by
    whole days, in the same text form: the edge of the window within which an `at` written with a UTC offset can
    fall on either side of the bound (an offset is less than a day)."""
    moment = datetime.fromisoformat(bound.replace("Z", "+00:00"))
    try:
        return iso_millis(moment + timedelta(days=days))
    except OverflowError:  # before year 1 (or past 9999): no ISO time lies beyond
        return "0000" if days < 0 else "A"


def instant_before(at: str, bound: str) -> bool:
    """Whether an entry or event time is before a period bound as an instant (a UTC offset other than Z counted);
    a time that is no ISO-8601 instant is compared as text, as it was stored."""
    try:
        return epoch_millis(at) < epoch_millis(bound)
    except (ValueError, OverflowError):
        return at < bound


def month_of(at: str) -> str:
    """The period (YYYY-MM) of an entry time's UTC instant; a time that is no ISO-8601 instant, by its first seven
    characters, as it was stored."""
    try:
        return millis_to_iso(epoch_millis(at))[:7]
    except (ValueError, OverflowError):
        return at[:7]


@dataclass(frozen=True)
class PeriodEntry:
    """One journal entry as the close sees it. `allocations`: (postingIndex, partyId, partyRole, amountCents)."""

    entry_id: str
    job_id: str
    event_type: str
    source_event_id: str
    at: str
    memo: str | None
    postings: Sequence[tuple[str, int]]
    allocations: Sequence[tuple[int, str, str, int]] = ()
    carried: bool = False


@dataclass
class StatementTotals:
    """The fold of a period's entries into the statement's sums (constant memory in the number of entries)."""

    entries: int = 0
    postings: int = 0
    debit_cents: int = 0
    credit_cents: int = 0
    accounts: dict[str, list[int]] = field(default_factory=dict)  # account -> [debit, credit]
    parties: dict[tuple[str, str], list[int]] = field(default_factory=dict)  # (party, role) -> [payable, receivable]
    jobs_settled: set[str] = field(default_factory=set)
    credits: list[int] = field(default_factory=lambda: [0, 0])  # [count, cents]
    claims_paid: list[int] = field(default_factory=lambda: [0, 0])
    carried: list[dict[str, str]] = field(default_factory=list)

    def add(self, entry: PeriodEntry) -> None:
        self.entries += 1
        for account, amount in entry.postings:
            self.postings += 1
            side = self.accounts.setdefault(account, [0, 0])
            if amount > 0:
                side[0] += amount
                self.debit_cents += amount
            else:
                side[1] -= amount
                self.credit_cents -= amount
        self._add_parties(entry)
        self._add_event_figures(entry)
        if entry.carried:
            self.carried.append({"entryId": entry.entry_id, "sourceEventId": entry.source_event_id,
                                 "originalPeriod": month_of(entry.at)})

    def _add_parties(self, entry: PeriodEntry) -> None:
        for index, party, role, amount in entry.allocations:
            account = entry.postings[index][0]
            row = self.parties.setdefault((party, role), [0, 0])
            if account in _RECEIVABLE_ACCOUNTS:
                row[1] += amount
            elif A.CHART_OF_ACCOUNTS.get(account, ("", ""))[0] == "liability":
                row[0] -= amount

    def _add_event_figures(self, entry: PeriodEntry) -> None:
        if entry.event_type == "SETTLED":
            self.jobs_settled.add(entry.job_id)
        elif entry.event_type == "SLA_CREDIT_ISSUED":
            self.credits[0] += 1
            self.credits[1] += sum(a for acct, a in entry.postings if acct == A.SLA_CREDITS_EXPENSE and a > 0)
        elif entry.event_type == "CLAIM_PAID":
            self.claims_paid[0] += 1
            self.claims_paid[1] += sum(a for acct, a in entry.postings if acct == A.CLAIMS_PAYABLE and a > 0)

    def to_json(self) -> dict[str, Any]:
        order = {a: i for i, a in enumerate(A.ACCOUNT_IDS)}
        accounts = sorted(self.accounts.items(), key=lambda kv: (order.get(kv[0], len(order)), kv[0]))
        return {
            "entries": self.entries,
            "postings": self.postings,
            "debitCents": self.debit_cents,
            "creditCents": self.credit_cents,
            "accounts": [{"accountId": a, "debitCents": d, "creditCents": c, "netCents": d - c}
                         for a, (d, c) in accounts],
            "parties": [{"partyId": p, "partyRole": r, "payablesCents": pay, "receivablesCents": rec}
                        for (p, r), (pay, rec) in sorted(self.parties.items())],
            "jobsSettled": len(self.jobs_settled),
            "credits": {"count": self.credits[0], "amountCents": self.credits[1]},
            "claimsPaid": {"count": self.claims_paid[0], "amountCents": self.claims_paid[1]},
            "carriedIn": self.carried,
        }


def fold_entries(entries: Iterable[PeriodEntry]) -> StatementTotals:
    totals = StatementTotals()
    for entry in entries:
        totals.add(entry)
    return totals


@dataclass(frozen=True)
class StreamLeaf:
    """One leaf of the tenant log: a job stream's head as of a close."""

    stream_id: str
    head_chain_hash: str
    event_count: int

    def data(self) -> bytes:
        """The leaf's bytes: canonical JSON (sorted keys, UTF-8) of {eventCount, headChainHash, streamId}."""
        return canonical_bytes({"eventCount": self.event_count, "headChainHash": self.head_chain_hash,
                                "streamId": self.stream_id})

    def hash(self) -> bytes:
        return merkle.leaf_hash(self.data())

    def to_json(self) -> dict[str, Any]:
        return {"streamId": self.stream_id, "headChainHash": self.head_chain_hash, "eventCount": self.event_count}


def changed_leaves(heads: Iterable[StreamLeaf], last_leaf: Mapping[str, StreamLeaf]) -> list[StreamLeaf]:
    """The heads that differ from their stream's latest leaf, in stream-id (code point) order."""
    return sorted((h for h in heads if last_leaf.get(h.stream_id) != h), key=lambda h: h.stream_id)


@dataclass(frozen=True)
class TreeHead:
    size: int
    root_hash: str

    def to_json(self) -> dict[str, Any]:
        return {"treeSize": self.size, "rootHash": self.root_hash}


def tree_head(leaf_hashes: Sequence[bytes]) -> TreeHead:
    return TreeHead(len(leaf_hashes), merkle.root_from_leaf_hashes(leaf_hashes).hex())


@dataclass(frozen=True)
class CloseInputs:
    """Everything a close document is built from besides the entry fold."""

    tenant_id: str
    month: str
    journal_sha256: str
    journal_rows: int
    previous: TreeHead | None
    head: TreeHead
    first_leaf_index: int
    leaves_appended: int
    previous_month: str | None


def close_document(inputs: CloseInputs, totals: StatementTotals) -> dict[str, Any]:
    """The unsigned MonthClose.v1 body (the artifact base fields keep the delivery machinery's shape)."""
    month = inputs.month
    end = month_start(next_month(month))
    return {
        "schemaVersion": MONTH_CLOSE,
        "artifactType": MONTH_CLOSE,
        "artifactId": f"close_{month}",
        "generatedAt": end,
        "tenantId": inputs.tenant_id,
        "jobId": f"period:{month}",
        "jobVersion": inputs.head.size,
        "period": {"month": month, "start": month_start(month), "end": end, "previousClose": inputs.previous_month},
        "statement": totals.to_json(),
        "journal": {"format": "JournalCsv.v1", "rows": inputs.journal_rows, "sha256": inputs.journal_sha256},
        "merkleLog": {
            **inputs.head.to_json(),
            "previousTreeSize": inputs.previous.size if inputs.previous else 0,
            "previousRootHash": inputs.previous.root_hash if inputs.previous else merkle.EMPTY_ROOT.hex(),
            "firstLeafIndex": inputs.first_leaf_index,
            "leavesAppended": inputs.leaves_appended,
        },
        "sourceEventId": f"close:{month}",
        "atChainHash": inputs.head.root_hash,
    }


def sign_document(body: Mapping[str, Any], signer: Signer) -> dict[str, Any]:
    """Add the signer, an Ed25519 signature over SHA-256 of the canonical body (signer fields included), then the
    artifactHash over everything else (as every artifact's)."""
    doc = {**body, "signerKeyId": signer.key_id, "signerPublicKeyPem": signer.public_key_pem}
    doc["signature"] = signer.sign_payload_hash(canonical_hash(doc))
    doc["artifactHash"] = canonical_hash(doc)
    return doc


def unsigned_body(doc: Mapping[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in doc.items() if k not in (*_UNSIGNED_FIELDS, "signerKeyId", "signerPublicKeyPem")}


def verify_close_document(doc: Any, keys: Mapping[str, str] | None = None) -> dict[str, Any]:
    """`{ok, artifactHashValid, signatureValid, keyPinned, signerKeyId, error}` for a MonthClose.v1 document.

    With `keys` ({keyId: PEM}) the signer must be one of them (`keyPinned`); without, the document's own public
    key is used and only its key id is checked against it."""
    if not isinstance(doc, Mapping) or doc.get("artifactType") != MONTH_CLOSE:
        return {"ok": False, "error": {"code": "FINANCE_DOCUMENT_INVALID", "message": "not a MonthClose.v1"}}
    core = {k: v for k, v in doc.items() if k != "artifactHash"}
    hash_ok = doc.get("artifactHash") == canonical_hash(core)
    signed = {k: v for k, v in core.items() if k != "signature"}
    key_id, pem = doc.get("signerKeyId"), doc.get("signerPublicKeyPem")
    report: dict[str, Any] = {"ok": False, "artifactHashValid": hash_ok, "signatureValid": False,
                              "keyPinned": keys is not None, "signerKeyId": key_id, "error": None}
    if keys is not None:
        pem = keys.get(key_id) if isinstance(key_id, str) else None
    if not isinstance(pem, str) or key_id != key_id_for_public_pem(pem):
        report["error"] = {"code": "FINANCE_SIGNER_UNKNOWN", "message": f"signer key {key_id!r} is not known"}
        return report
    sig = doc.get("signature")
    report["signatureValid"] = isinstance(sig, str) and verify_signature(load_public_key(pem),
                                                                         canonical_hash(signed), sig)
    report["ok"] = hash_ok and report["signatureValid"]
    return report


def journal_hash_matches(doc: Any, csv_bytes: bytes) -> bool:
    """Whether a close document (anything a file held) names these journal bytes' sha256."""
    journal = doc.get("journal") if isinstance(doc, Mapping) else None
    return isinstance(journal, Mapping) and journal.get("sha256") == sha256_hex(csv_bytes)


INCLUSION_PROOF: Final = "MerkleInclusionProof.v1"
CONSISTENCY_PROOF: Final = "MerkleConsistencyProof.v1"


def _hashes(values: Any) -> list[bytes] | None:
    if not isinstance(values, list):
        return None
    try:
        out = [bytes.fromhex(v) for v in values]
    except (TypeError, ValueError):
        return None
    return out if all(len(h) == 32 for h in out) else None


def _tree_of(doc: Mapping[str, Any]) -> tuple[int, bytes] | None:
    log = doc.get("merkleLog")
    if not isinstance(log, Mapping) or type(log.get("treeSize")) is not int:
        return None
    root = _hashes([log.get("rootHash")])
    return None if root is None else (log["treeSize"], root[0])


def _failed(report: dict[str, Any], message: str, *, code: str = "FINANCE_PROOF_INVALID") -> dict[str, Any]:
    report["ok"] = False
    report["error"] = {"code": code, "message": message}
    return report


def verify_inclusion_proof(proof: Any, keys: Mapping[str, str] | None = None) -> dict[str, Any]:
    """`{ok, close: <close verification>, leafValid, error}`: the embedded close document verifies, and the leaf
    with its audit path gives the document's signed tree head."""
    if not isinstance(proof, Mapping) or proof.get("proofType") != INCLUSION_PROOF:
        return _failed({}, f"not a {INCLUSION_PROOF}")
    close = verify_close_document(proof.get("close"), keys)
    report: dict[str, Any] = {"ok": False, "close": close, "leafValid": False, "error": None}
    if not close["ok"]:
        return _failed(report, "the close document does not verify")
    tree, leaf, path, index = _tree_of(proof["close"]), proof.get("leaf"), _hashes(proof.get("auditPath")), \
        proof.get("leafIndex")
    if tree is None or path is None or type(index) is not int or not isinstance(leaf, Mapping):
        return _failed(report, "the proof is missing a field")
    signed = proof["close"]
    period = signed.get("period")
    if (proof.get("tenantId"), proof.get("month"), proof.get("treeSize")) != (
            signed.get("tenantId"), period.get("month") if isinstance(period, Mapping) else None, tree[0]):
        return _failed(report, "the proof's tenantId, month or treeSize is not the signed close's")
    try:
        data = StreamLeaf(leaf["streamId"], leaf["headChainHash"], leaf["eventCount"])
    except KeyError:
        return _failed(report, "the leaf needs streamId, headChainHash, eventCount")
    report["leafValid"] = merkle.verify_inclusion(data.hash(), index, tree[0], path, tree[1])
    report["ok"] = report["leafValid"]
    if not report["ok"]:
        return _failed(report, "the audit path does not lead to the signed tree head")
    return report


def verify_consistency_proof(proof: Any, keys: Mapping[str, str] | None = None) -> dict[str, Any]:
    """`{ok, old, new, consistent, error}`: both close documents verify, belong to the proof's tenant, and the
    newer tree extends the older one."""
    if not isinstance(proof, Mapping) or proof.get("proofType") != CONSISTENCY_PROOF:
        return _failed({}, f"not a {CONSISTENCY_PROOF}")
    old, new = verify_close_document(proof.get("old"), keys), verify_close_document(proof.get("new"), keys)
    report: dict[str, Any] = {"ok": False, "old": old, "new": new, "consistent": False, "error": None}
    if not (old["ok"] and new["ok"]):
        return _failed(report, "a close document does not verify")
    if proof["old"].get("tenantId") != proof["new"].get("tenantId"):
        return _failed(report, "the close documents are of different tenants")
    if proof.get("tenantId") != proof["old"].get("tenantId"):
        return _failed(report, "the proof's tenantId is not the signed closes'")
    a, b, path = _tree_of(proof["old"]), _tree_of(proof["new"]), _hashes(proof.get("proof"))
    if a is None or b is None or path is None:
        return _failed(report, "the proof is missing a field")
    report["consistent"] = merkle.verify_consistency(a[0], b[0], a[1], b[1], path)
    report["ok"] = report["consistent"]
    if not report["ok"]:
        return _failed(report, "the newer log does not extend the older one")
    return report
