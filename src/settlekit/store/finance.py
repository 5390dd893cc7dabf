"""Finance repository (docs/finance.md): period assignment of journal entries, the tenant's Merkle log leaves,
the signed close documents and the GL mappings. Every function runs in the caller's transaction."""

from __future__ import annotations

import json
from collections.abc import Iterator, Sequence
from typing import Any, Final

from settlekit.events.canonical import canonical_hash, parse_json, storable_json
from settlekit.ledger import merkle
from settlekit.ledger.close import PeriodEntry, StreamLeaf
from settlekit.ledger.merkle import Node
from settlekit.store.database import Row, Tx
from settlekit.store.sql import statements

PAGE: Final = 2000  # entries per keyset page of a period read


def _sql(tx: Tx, name: str) -> str:
    return statements("finance", tx.dialect)[name]


def lock_tenant_closes(tx: Tx, tenant_id: str) -> None:
    """Wait for any other close of the tenant to finish, and hold the tenant's closes until `tx` ends."""
    tx.scalar(_sql(tx, "lock_tenant_closes"), (tenant_id,))


def tenants_to_close(tx: Tx) -> list[str]:
    """Tenants with journal entries or job streams."""
    rows = tx.fetchall(statements("finance", tx.dialect)["tenants_to_close"])
    return sorted(r[0] for r in rows)


def closed_months(tx: Tx, tenant_id: str) -> list[str]:
    rows = tx.fetchall(statements("finance", tx.dialect)["closed_months"], (tenant_id,))
    return sorted(r[0] for r in rows)


def close_document(tx: Tx, tenant_id: str, month: str) -> dict[str, Any] | None:
    text = tx.scalar(statements("finance", tx.dialect)["close_document"], (tenant_id, month))
    return None if text is None else dict(parse_json(text))


def insert_close(tx: Tx, tenant_id: str, month: str, doc: dict[str, Any]) -> None:
    log = doc["merkleLog"]
    tx.execute(
        statements("finance", tx.dialect)["insert_close"],
        (tenant_id, month, doc["artifactHash"], log["treeSize"], log["rootHash"], doc["journal"]["sha256"],
         storable_json(doc)))


def insert_close_artifact(tx: Tx, tenant_id: str, doc: dict[str, Any]) -> None:
    """The close document as an artifact row, so the delivery worker can load and send it."""
    tx.execute(
        statements("finance", tx.dialect)["insert_close_artifact"],
        (tenant_id, doc["artifactId"], doc["jobId"], doc["artifactType"], doc["sourceEventId"], doc["atChainHash"],
         doc["artifactHash"], doc["jobVersion"], storable_json(doc), doc["generatedAt"]))


def assign_entries(tx: Tx, tenant_id: str, month: str, *, start: str, inside: tuple[str, str],
                   near_start: tuple[str, str]) -> int:
    """Assign to `month` every entry of the tenant not yet in a period whose `at` text is in [inside) and not in
    [near_start); those before `start` are marked carried. Returns how many were assigned."""
    return tx.execute(_sql(tx, "assign_entries"), (month, start, tenant_id, *inside, *near_start))


def unassigned_entries_near(tx: Tx, tenant_id: str, windows: Sequence[tuple[str, str]]) -> list[tuple[str, str]]:
    """(entry id, at) of the tenant's entries in no period whose `at` text is in one of three [from, to), or does
    not start with a digit (see `job_events_between`)."""
    bounds = [bound for window in windows for bound in window]
    return [(str(r[0]), str(r[1])) for r in tx.fetchall(_sql(tx, "unassigned_entries_near"), (tenant_id, *bounds))]


def assign_entry(tx: Tx, tenant_id: str, month: str, entry_id: str, at: str, *, carried: bool) -> None:
    tx.execute(_sql(tx, "assign_entry"), (tenant_id, entry_id, month, at, carried))


def stream_heads_before(tx: Tx, tenant_id: str, end: str) -> list[StreamLeaf]:
    """Each job stream's last event with `at` text before `end`, among those whose `at` starts with a digit (the
    others are judged by their instant: `job_events_between`): (stream, its chain hash, its position)."""
    rows = tx.fetchall(_sql(tx, "stream_heads_before"), (tenant_id, end, tenant_id))
    return [StreamLeaf(r[0], r[2], int(r[1])) for r in rows]


def job_events_between(tx: Tx, tenant_id: str, start: str, end: str) -> list[tuple[str, int, str, str]]:
    """(stream id, seq, chain hash, at) of the tenant's job events whose `at` text is in [start, end), or does not
    start with a digit (imported history spelled as settld's Date.parse reads it: its text order is not its
    instant's)."""
    rows = tx.fetchall(_sql(tx, "job_events_between"), (tenant_id, start, end))
    return [(str(r[0]), int(r[1]), str(r[2]), str(r[3])) for r in rows]


def latest_leaves(tx: Tx, tenant_id: str) -> dict[str, StreamLeaf]:
    rows = tx.fetchall(
        statements("finance", tx.dialect)["latest_leaves"], (tenant_id,))
    return {r[0]: StreamLeaf(r[0], r[1], int(r[2])) for r in rows}


def leaf_hashes(tx: Tx, tenant_id: str, size: int | None = None) -> list[bytes]:
    """The log's leaf hashes in order (the first `size` of them)."""
    sql = "SELECT leaf_hash FROM finance_log_leaves WHERE tenant_id = ?"
    params: tuple[Any, ...] = (tenant_id,)
    if size is not None:
        sql += " AND leaf_index < ?"
        params = (tenant_id, size)
    return [bytes.fromhex(r[0]) for r in tx.fetchall(sql + " ORDER BY leaf_index", params)]


def append_leaves(tx: Tx, tenant_id: str, month: str, first_index: int, leaves: Sequence[StreamLeaf]) -> None:
    tx.executemany(
        statements("finance", tx.dialect)["append_leaves"],
        [(tenant_id, first_index + i, month, leaf.stream_id, leaf.head_chain_hash, leaf.event_count,
          leaf.hash().hex()) for i, leaf in enumerate(leaves)])


def append_nodes(tx: Tx, tenant_id: str, nodes: Sequence[tuple[int, int, bytes]]) -> None:
    """Store perfect subtrees of the log, (level >= 1, index, hash) each."""
    tx.executemany(statements("finance", tx.dialect)["append_nodes"],
                   [(tenant_id, level, index, digest.hex()) for level, index, digest in nodes])


def subtree_hashes(tx: Tx, tenant_id: str, nodes: Sequence[Node]) -> dict[Node, bytes]:
    """The stored hashes of these perfect subtrees (level 0: the leaves); a node not stored is left out."""
    found: dict[Node, bytes] = {}
    leaves = sorted({index for level, index in nodes if level == 0})
    if leaves:
        rows = tx.fetchall("SELECT leaf_index, leaf_hash FROM finance_log_leaves WHERE tenant_id = ?"
                           f" AND leaf_index IN ({', '.join('?' * len(leaves))})", (tenant_id, *leaves))
        found.update(((0, int(r[0])), bytes.fromhex(r[1])) for r in rows)
    upper = sorted({n for n in nodes if n[0] > 0})
    if upper:
        rows = tx.fetchall("SELECT level, node_index, node_hash FROM finance_log_nodes WHERE tenant_id = ? AND ("
                           + " OR ".join(["(level = ? AND node_index = ?)"] * len(upper)) + ")",
                           (tenant_id, *(v for n in upper for v in n)))
        found.update(((int(r[0]), int(r[1])), bytes.fromhex(r[2])) for r in rows)
    return found


def build_log_nodes(tx: Tx) -> None:
    """Migration 0025's data step: the perfect subtrees of every tenant's log closed so far."""
    for (tenant_id,) in tx.fetchall(statements("finance", tx.dialect)["log_tenants"]):
        append_nodes(tx, tenant_id, merkle.nodes_completed(leaf_hashes(tx, tenant_id), 0))


def leaf_of_stream(tx: Tx, tenant_id: str, month: str, stream_id: str) -> tuple[int, StreamLeaf] | None:
    """The leaf a close of `month` appended for the stream, with its index."""
    row = tx.fetchone(
        statements("finance", tx.dialect)["leaf_of_stream"], (tenant_id, month, stream_id))
    return None if row is None else (int(row[0]), StreamLeaf(stream_id, row[1], int(row[2])))


def period_entries(tx: Tx, tenant_id: str, month: str, *, page: int = PAGE) -> Iterator[PeriodEntry]:
    """The entries assigned to a period in journal order (time, then entry id), read page by page."""
    at, entry_id = "", ""
    while True:
        rows = tx.fetchall(_sql(tx, "period_entries_page"), (tenant_id, month, at, entry_id, page))
        if not rows:
            return
        last = rows[-1]
        shares = _allocations(tx, tenant_id, month, (at, entry_id), (last[1], last[0]))
        for r in rows:
            yield _entry(r, shares.get(r[0], []))
        if len(rows) < page:
            return
        at, entry_id = last[1], last[0]


def _allocations(tx: Tx, tenant_id: str, month: str, after: tuple[str, str],
                 through: tuple[str, str]) -> dict[str, list[tuple[int, str, str, int]]]:
    rows = tx.fetchall(_sql(tx, "period_allocations_range"),
                       (tenant_id, month, after[0], after[1], through[0], through[1]))
    out: dict[str, list[tuple[int, str, str, int]]] = {}
    for entry_id, posting_id, party, role, cents in rows:
        out.setdefault(entry_id, []).append((int(posting_id[1:]), party, role, int(cents)))
    for shares in out.values():
        shares.sort()
    return out


def _entry(r: Row, shares: list[tuple[int, str, str, int]]) -> PeriodEntry:
    entry = json.loads(r[7])  # written by the ledger: integers and strings only
    postings = tuple((p["accountId"], int(p["amountCents"])) for p in entry["postings"])
    return PeriodEntry(entry_id=r[0], job_id=r[3], event_type=r[4], source_event_id=r[5], at=r[1], memo=r[6],
                       postings=postings, allocations=tuple(shares), carried=bool(r[2]))


def put_gl_mapping(tx: Tx, tenant_id: str, mapping: dict[str, Any]) -> str:
    digest = canonical_hash(mapping)
    tx.execute(
        statements("finance", tx.dialect)["put_gl_mapping"], (tenant_id, digest, storable_json(mapping)))
    return digest


def gl_mapping(tx: Tx, tenant_id: str) -> tuple[dict[str, Any], str] | None:
    row = tx.fetchone(statements("finance", tx.dialect)["gl_mapping"], (tenant_id,))
    return None if row is None else (dict(parse_json(row[0])), row[1])
