"""Finance use cases over the store (docs/finance.md): close a month (assign entries, grow the tenant log, build
and sign the MonthClose.v1, store it, enqueue its deliveries, all in one transaction), export a closed period
(JournalCsv.v1, GL batch) in constant memory, and the Merkle inclusion and consistency proofs."""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Iterator
from dataclasses import dataclass, replace
from datetime import datetime
from typing import Any

from settlekit.delivery.enqueue import enqueue_artifact
from settlekit.errors import ConflictError, NotFoundError, SettlekitError, ValidationError
from settlekit.events.canonical import canonical_json, iso_millis
from settlekit.events.envelope import Signer
from settlekit.ledger import journal as J
from settlekit.ledger import merkle
from settlekit.ledger.close import (
    CONSISTENCY_PROOF,
    INCLUSION_PROOF,
    CloseInputs,
    StatementTotals,
    StreamLeaf,
    TreeHead,
    changed_leaves,
    close_document,
    day_shifted,
    instant_before,
    month_of,
    month_start,
    next_month,
    require_month,
    sign_document,
    tree_head,
    unsigned_body,
)
from settlekit.store import finance as F
from settlekit.store.db import Database, Tx

Progress = Callable[[int], None]


@dataclass(frozen=True)
class CloseResult:
    document: dict[str, Any]
    created: bool
    deliveries: int


def close_month(db: Database, tenant_id: str, month: str, signer: Signer, *, now: datetime,
                max_pending: int | None = None) -> CloseResult:
    """Close `month` for the tenant, or re-run a stored close (the same document, checked against a rebuild)."""
    require_month(month)
    if month >= month_of(iso_millis(now)):  # the month (or a later one) has not ended: 9999-12 has no end to name
        raise ConflictError(f"{month} has not ended yet", code="FINANCE_PERIOD_OPEN", month=month)
    end = month_start(next_month(month))
    with db.transaction() as tx:
        F.lock_tenant_closes(tx, tenant_id)
        stored = F.close_document(tx, tenant_id, month)
        if stored is not None:
            _check_rerun(tx, tenant_id, month, stored, signer)
            return CloseResult(stored, False, 0)
        months = F.closed_months(tx, tenant_id)
        if months and month < months[-1]:
            raise ConflictError(f"{months[-1]} is already closed; {month} can no longer be closed",
                                code="FINANCE_PERIOD_ORDER", month=month, lastClosed=months[-1])
        floor = month_start(months[0] if months else month)
        _assign_entries(tx, tenant_id, month, floor, month_start(month), end)
        prior = F.leaf_hashes(tx, tenant_id)
        leaves = changed_leaves(_stream_heads_before(tx, tenant_id, end), F.latest_leaves(tx, tenant_id))
        F.append_leaves(tx, tenant_id, month, len(prior), leaves)
        log = prior + [leaf.hash() for leaf in leaves]
        F.append_nodes(tx, tenant_id, merkle.nodes_completed(log, len(prior)))
        previous = F.close_document(tx, tenant_id, months[-1]) if months else None
        inputs = _inputs(tenant_id, month, previous, tree_head(log), len(prior), len(leaves))
        doc = sign_document(_body(tx, inputs), signer)
        F.insert_close(tx, tenant_id, month, doc)
        F.insert_close_artifact(tx, tenant_id, doc)
        created = enqueue_artifact(tx, tenant_id, doc, now=now, max_pending=max_pending)
    return CloseResult(doc, True, created)


def _assign_entries(tx: Tx, tenant_id: str, month: str, floor: str, start: str, end: str) -> None:
    """Assign to `month` the tenant's unassigned entries whose `at` is in [floor, end) as an instant, carried
    when before `start`. Text order is instant order a day or more from a bound whatever an `at`'s UTC offset:
    those are assigned by one statement, the few within a day of a bound one by one, by their instant."""
    near = [(day_shifted(bound, -1), day_shifted(bound, 1)) for bound in (floor, start, end)]
    F.assign_entries(tx, tenant_id, month, start=start, inside=(near[0][1], near[2][0]), near_start=near[1])
    for entry_id, at in F.unassigned_entries_near(tx, tenant_id, near):
        if not instant_before(at, floor) and instant_before(at, end):
            F.assign_entry(tx, tenant_id, month, entry_id, at, carried=instant_before(at, start))


def _stream_heads_before(tx: Tx, tenant_id: str, end: str) -> list[StreamLeaf]:
    """Each job stream's last event whose `at` is before `end` as an instant (see _assign_entries)."""
    low, high = day_shifted(end, -1), day_shifted(end, 1)
    heads = {leaf.stream_id: leaf for leaf in F.stream_heads_before(tx, tenant_id, low)}
    for stream_id, seq, chain_hash, at in F.job_events_between(tx, tenant_id, low, high):
        head = heads.get(stream_id)
        if (head is None or seq > head.event_count) and instant_before(at, end):
            heads[stream_id] = StreamLeaf(stream_id, chain_hash, seq)
    return list(heads.values())


def _inputs(tenant_id: str, month: str, previous: dict[str, Any] | None, head: TreeHead, first: int,
            appended: int) -> CloseInputs:
    prev_head = None
    if previous is not None:
        log = previous["merkleLog"]
        prev_head = TreeHead(log["treeSize"], log["rootHash"])
    return CloseInputs(tenant_id=tenant_id, month=month, journal_sha256="", journal_rows=0, previous=prev_head,
                       head=head, first_leaf_index=first, leaves_appended=appended,
                       previous_month=None if previous is None else previous["period"]["month"])


def _body(tx: Tx, inputs: CloseInputs) -> dict[str, Any]:
    """The unsigned document: one pass over the period's entries folds the statement and hashes the journal."""
    out = _Chunks()
    out.add(J.CSV_HEADER)
    totals = StatementTotals()
    for entry in F.period_entries(tx, inputs.tenant_id, inputs.month):
        totals.add(entry)
        for line in J.journal_lines(entry):
            out.add(line)
            out.rows += 1
        out.ready()
    out.ready(final=True)
    full = replace(inputs, journal_sha256=out.hexdigest(), journal_rows=out.rows)
    return close_document(full, totals)


def _check_rerun(tx: Tx, tenant_id: str, month: str, stored: dict[str, Any], signer: Signer) -> None:
    """Rebuild a stored close from the frozen period and log; any difference is FINANCE_CLOSE_MISMATCH."""
    log = stored["merkleLog"]
    hashes = F.leaf_hashes(tx, tenant_id, log["treeSize"])
    previous = None
    if stored["period"]["previousClose"] is not None:
        previous = F.close_document(tx, tenant_id, stored["period"]["previousClose"])
    inputs = _inputs(tenant_id, month, previous, tree_head(hashes), log["firstLeafIndex"], log["leavesAppended"])
    body = _body(tx, inputs)
    same = (canonical_json(sign_document(body, signer)) == canonical_json(stored)
            if signer.key_id == stored.get("signerKeyId") else body == unsigned_body(stored))
    if not same:
        raise SettlekitError(f"the stored close of {month} differs from its rebuild", code="FINANCE_CLOSE_MISMATCH",
                             month=month, tenantId=tenant_id)


def closed_months(db: Database, tenant_id: str) -> list[str]:
    """The tenant's closed months, oldest first."""
    with db.read() as tx:
        return F.closed_months(tx, tenant_id)


def get_close(db: Database, tenant_id: str, month: str) -> dict[str, Any]:
    require_month(month)
    with db.read() as tx:
        doc = F.close_document(tx, tenant_id, month)
    if doc is None:
        raise NotFoundError(f"{month} is not closed for tenant {tenant_id}", code="FINANCE_CLOSE_NOT_FOUND",
                            month=month)
    return doc


def _closed(tx: Tx, tenant_id: str, month: str) -> dict[str, Any]:
    doc = F.close_document(tx, tenant_id, require_month(month))
    if doc is None:
        raise NotFoundError(f"{month} is not closed for tenant {tenant_id}", code="FINANCE_CLOSE_NOT_FOUND",
                            month=month)
    return doc


CHUNK = 1 << 16  # bytes handed to the writer at a time


class _Chunks:
    """Collects text and hands it out as UTF-8 chunks of about CHUNK characters; hashes exactly the bytes it hands
    out (SHA-256), so the hash is over the export's bytes."""

    def __init__(self) -> None:
        self.rows = 0
        self.size = 0
        self._sha = hashlib.sha256()
        self._parts: list[str] = []
        self._chars = 0

    def add(self, text: str) -> None:
        self._parts.append(text)
        self._chars += len(text)

    def ready(self, final: bool = False) -> bytes | None:
        if not self._parts or (self._chars < CHUNK and not final):
            return None
        data = "".join(self._parts).encode("utf-8")
        self._parts, self._chars = [], 0
        self._sha.update(data)
        self.size += len(data)
        return data

    def hexdigest(self) -> str:
        return self._sha.hexdigest()


def iter_journal(db: Database, tenant_id: str, month: str, progress: Progress | None = None) -> Iterator[bytes]:
    """The period's JournalCsv.v1 bytes in chunks, read page by page in one read transaction (constant memory).
    At the end the hash is checked against the close document (FINANCE_CLOSE_MISMATCH otherwise)."""
    out = _Chunks()
    with db.read() as tx:
        doc = _closed(tx, tenant_id, month)
        out.add(J.CSV_HEADER)
        for entry in F.period_entries(tx, tenant_id, month):
            for line in J.journal_lines(entry):
                out.add(line)
                out.rows += 1
            if (chunk := out.ready()) is not None:
                yield chunk
                if progress is not None:
                    progress(out.rows)
    if (chunk := out.ready(final=True)) is not None:
        yield chunk
    if progress is not None:
        progress(out.rows)
    if out.hexdigest() != doc["journal"]["sha256"]:
        raise SettlekitError("the exported journal does not match the close document",
                             code="FINANCE_CLOSE_MISMATCH", month=month, tenantId=tenant_id)


def export_journal(db: Database, tenant_id: str, month: str, write: Callable[[bytes], Any],
                   progress: Progress | None = None) -> dict[str, Any]:
    """Write the period's JournalCsv.v1 to `write`; returns {rows, sha256, bytes} (see `iter_journal`)."""
    return _write_export(db, tenant_id, month, iter_journal(db, tenant_id, month, progress), write)


def _write_export(db: Database, tenant_id: str, month: str, chunks: Iterator[bytes],
                  write: Callable[[bytes], Any]) -> dict[str, Any]:
    """Hand `chunks` to `write`; {rows (the close's journal rows), sha256 and bytes of what was written}."""
    sha, size = hashlib.sha256(), 0
    for chunk in chunks:
        sha.update(chunk)
        size += len(chunk)
        write(chunk)
    return {"rows": journal_rows(db, tenant_id, month), "sha256": sha.hexdigest(), "bytes": size}


def put_gl_mapping(db: Database, tenant_id: str, mapping: Any) -> str:
    checked = J.require_gl_mapping(mapping)
    with db.transaction() as tx:
        return F.put_gl_mapping(tx, tenant_id, checked)


def get_gl_mapping(db: Database, tenant_id: str) -> dict[str, Any]:
    with db.read() as tx:
        return _gl_mapping(tx, tenant_id)[0]


def _gl_mapping(tx: Tx, tenant_id: str) -> tuple[dict[str, Any], str]:
    """(mapping, mapping hash) of the tenant; FINANCE_GL_MAPPING_NOT_FOUND when it has none."""
    found = F.gl_mapping(tx, tenant_id)
    if found is None:
        raise NotFoundError(f"tenant {tenant_id} has no GL mapping", code="FINANCE_GL_MAPPING_NOT_FOUND")
    return found[0], found[1]


def _gl_inputs(tx: Tx, tenant_id: str, month: str) -> tuple[dict[str, Any], dict[str, Any], str]:
    """(close document, mapping, mapping hash); FINANCE_GL_ACCOUNT_UNMAPPED when the close names an account the
    mapping lacks."""
    doc = _closed(tx, tenant_id, month)
    mapping, mapping_hash = _gl_mapping(tx, tenant_id)
    for account in doc["statement"]["accounts"]:
        J.gl_account(mapping, account["accountId"])
    return doc, mapping, mapping_hash


def check_gl_export(db: Database, tenant_id: str, month: str) -> None:
    """Raise what `iter_gl_batch` would raise before its first byte (for a streamed response)."""
    with db.read() as tx:
        _gl_inputs(tx, tenant_id, month)


def iter_gl_batch(db: Database, tenant_id: str, month: str, progress: Progress | None = None) -> Iterator[bytes]:
    """The period's GlBatch.v1 JSON in chunks (constant memory)."""
    out = _Chunks()
    with db.read() as tx:
        doc, mapping, mapping_hash = _gl_inputs(tx, tenant_id, month)
        out.add(J.gl_batch_head(tenant_id, month, doc["artifactHash"], mapping_hash))
        for entry in F.period_entries(tx, tenant_id, month):
            for line in J.gl_lines(entry, mapping):
                out.add(line if out.rows == 0 else "," + line)
                out.rows += 1
            if (chunk := out.ready()) is not None:
                yield chunk
                if progress is not None:
                    progress(out.rows)
    out.add(J.gl_batch_tail(out.rows))
    if (chunk := out.ready(final=True)) is not None:
        yield chunk
    if progress is not None:
        progress(out.rows)


def export_gl_batch(db: Database, tenant_id: str, month: str, write: Callable[[bytes], Any],
                    progress: Progress | None = None) -> dict[str, Any]:
    """Write the period's GlBatch.v1 JSON to `write`; an account missing from the tenant's mapping is
    FINANCE_GL_ACCOUNT_UNMAPPED, raised before any byte is written."""
    return _write_export(db, tenant_id, month, iter_gl_batch(db, tenant_id, month, progress), write)


def journal_rows(db: Database, tenant_id: str, month: str) -> int:
    """How many rows the period's journal has (from its close document)."""
    with db.read() as tx:
        return int(_closed(tx, tenant_id, month)["journal"]["rows"])


def inclusion_proof(db: Database, tenant_id: str, month: str, job_id: str) -> dict[str, Any]:
    """The MerkleInclusionProof.v1 of the leaf the close of `month` appended for the job (O(log n) rows read)."""
    with db.read() as tx:
        doc = _closed(tx, tenant_id, month)
        found = F.leaf_of_stream(tx, tenant_id, month, job_id)
        if found is None:
            raise NotFoundError(f"job {job_id} has no leaf in the close of {month}", code="FINANCE_LEAF_NOT_FOUND",
                                jobId=job_id, month=month)
        size = int(doc["merkleLog"]["treeSize"])
        path = _subtrees(tx, tenant_id, size, merkle.inclusion_ranges(found[0], size))
    index, leaf = found
    return {"proofType": INCLUSION_PROOF, "tenantId": tenant_id, "month": month, "leaf": leaf.to_json(),
            "leafIndex": index, "treeSize": size, "auditPath": [h.hex() for h in path], "close": doc}


def consistency_proof(db: Database, tenant_id: str, old_month: str, new_month: str) -> dict[str, Any]:
    """The MerkleConsistencyProof.v1 between the logs signed by two closes (old first)."""
    if require_month(old_month) > require_month(new_month):
        raise ValidationError("the first month must not be after the second", code="FINANCE_MONTH_INVALID",
                              month=old_month)
    with db.read() as tx:
        old, new = _closed(tx, tenant_id, old_month), _closed(tx, tenant_id, new_month)
        size = int(new["merkleLog"]["treeSize"])
        proof = _subtrees(tx, tenant_id, size, merkle.consistency_ranges(size, old["merkleLog"]["treeSize"]))
    return {"proofType": CONSISTENCY_PROOF, "tenantId": tenant_id, "old": old, "new": new,
            "proof": [h.hex() for h in proof]}


def _subtrees(tx: Tx, tenant_id: str, size: int, ranges: list[tuple[int, int]]) -> list[bytes]:
    """The hashes of these subtrees of the log's first `size` leaves, folded from its stored perfect subtrees; a
    log missing some (closed by an older version while this one was being rolled out) is read leaf by leaf."""
    needed = sorted({node for start, end in ranges for node in merkle.range_nodes(start, end)})
    stored = F.subtree_hashes(tx, tenant_id, needed)
    if len(stored) == len(needed):
        return [merkle.range_hash(stored, start, end) for start, end in ranges]
    hashes = F.leaf_hashes(tx, tenant_id, size)
    return [merkle.root_from_leaf_hashes(hashes[start:end]) for start, end in ranges]


def tenants_to_close(db: Database) -> list[str]:
    with db.read() as tx:
        return F.tenants_to_close(tx)
