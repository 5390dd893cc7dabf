"""PostgreSQL form of `store.ledger.write_entries`: ONE statement, with nothing to read back.

Every row an append adds to the ledger (entries, balances, allocations, timeline postings and bucket sums) goes
in one statement of data-modifying CTEs. Only the entries that were really inserted (`ON CONFLICT DO NOTHING`
returns them) carry their balances, allocations, postings and sums, exactly as the portable form decides row by
row. Nothing is fetched, and a group commit sends the rows of all its appends as one statement: each statement
sent costs the writer thread a trip through the interpreter lock, which under load is what a group waits on.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from settlekit.store.database import Tx

# Rows of one input entry are matched to the inserted entries by (entry id, source event id, index in the event):
# a repeated entry id (an id the tenant already has, or two equal ids in one append) adds nothing.
_WRITE = """
WITH new_entries AS (
    INSERT INTO ledger_entries (tenant_id, entry_id, job_id, source_event_id, event_type, source_seq, entry_index,
                                at, memo, entry_json)
    SELECT e.tenant_id, e.entry_id, e.job_id, e.event_id, e.event_type, e.source_seq, e.entry_index, e.at, e.memo,
           e.entry_json
      FROM unnest(%(e_tenant)s::text[], %(e_job)s::text[], %(e_id)s::text[], %(e_event)s::text[],
                  %(e_type)s::text[], %(e_seq)s::bigint[], %(e_index)s::int[], %(e_at)s::text[],
                  %(e_memo)s::text[], %(e_json)s::text[])
           AS e(tenant_id, job_id, entry_id, event_id, event_type, source_seq, entry_index, at, memo, entry_json)
    ON CONFLICT DO NOTHING
    RETURNING tenant_id, entry_id, source_event_id, entry_index
), postings AS (
    SELECT p.* FROM unnest(%(p_tenant)s::text[], %(p_entry)s::text[], %(p_event)s::text[], %(p_party)s::text[],
                           %(p_account)s::text[], %(p_position)s::bigint[], %(p_index)s::int[],
                           %(p_posting)s::int[], %(p_at)s::bigint[], %(p_amount)s::bigint[])
           AS p(tenant_id, entry_id, event_id, party_id, account_id, position, entry_index, posting_index, at_ms,
                amount_cents)
      JOIN new_entries n ON n.tenant_id = p.tenant_id AND n.entry_id = p.entry_id
                        AND n.source_event_id = p.event_id AND n.entry_index = p.entry_index
), added_postings AS (
    INSERT INTO ledger_postings (tenant_id, party_id, account_id, position, entry_index, posting_index, entry_id,
                                 at_ms, amount_cents)
    SELECT tenant_id, party_id, account_id, position, entry_index, posting_index, entry_id, at_ms, amount_cents
      FROM postings
    ON CONFLICT DO NOTHING
), balances AS (
    INSERT INTO ledger_balances (tenant_id, account_id, balance_cents)
    SELECT tenant_id, account_id, sum(amount_cents)::bigint FROM postings WHERE party_id = ''
     GROUP BY tenant_id, account_id ORDER BY tenant_id COLLATE "C", account_id COLLATE "C"
    ON CONFLICT (tenant_id, account_id) DO UPDATE
       SET balance_cents = ledger_balances.balance_cents + excluded.balance_cents
), allocations AS (
    INSERT INTO ledger_allocations (tenant_id, entry_id, posting_id, account_id, party_id, party_role, currency,
                                    amount_cents)
    SELECT a.tenant_id, a.entry_id, a.posting_id, a.account_id, a.party_id, a.party_role, a.currency,
           a.amount_cents
      FROM unnest(%(a_tenant)s::text[], %(a_entry)s::text[], %(a_event)s::text[], %(a_index)s::int[],
                  %(a_posting)s::text[], %(a_account)s::text[], %(a_party)s::text[], %(a_role)s::text[],
                  %(a_currency)s::text[], %(a_amount)s::bigint[])
           AS a(tenant_id, entry_id, event_id, entry_index, posting_id, account_id, party_id, party_role, currency,
                amount_cents)
      JOIN new_entries n ON n.tenant_id = a.tenant_id AND n.entry_id = a.entry_id
                        AND n.source_event_id = a.event_id AND n.entry_index = a.entry_index
), sums AS (
    INSERT INTO ledger_sums (tenant_id, party_id, axis, level, bucket, account_id, amount_cents)
    SELECT s.tenant_id, s.party_id, s.axis, s.level, s.bucket, s.account_id, sum(s.amount_cents)::bigint
      FROM unnest(%(s_tenant)s::text[], %(s_entry)s::text[], %(s_event)s::text[], %(s_index)s::int[],
                  %(s_party)s::text[], %(s_axis)s::text[], %(s_level)s::smallint[], %(s_bucket)s::bigint[],
                  %(s_account)s::text[], %(s_amount)s::bigint[])
           AS s(tenant_id, entry_id, event_id, entry_index, party_id, axis, level, bucket, account_id, amount_cents)
      JOIN new_entries n ON n.tenant_id = s.tenant_id AND n.entry_id = s.entry_id
                        AND n.source_event_id = s.event_id AND n.entry_index = s.entry_index
     GROUP BY s.tenant_id, s.party_id, s.axis, s.level, s.bucket, s.account_id
     ORDER BY s.tenant_id COLLATE "C", s.party_id COLLATE "C", s.axis COLLATE "C", s.level, s.bucket,
              s.account_id COLLATE "C"
    ON CONFLICT (tenant_id, party_id, axis, level, bucket, account_id) DO UPDATE
       SET amount_cents = ledger_sums.amount_cents + excluded.amount_cents
)
SELECT count(*) FROM new_entries
"""
# binary parameters (JSON text in arrays needs no escaping), and the blanks squeezed: psycopg caches the parsing
# of statements up to 4,096 characters only, and parsing this one costs more than sending it
_WRITE = " ".join(_WRITE.replace(")s::", ")b::").split())

# the columns of each row kind, after its tenant id (see LedgerRows)
_COLUMNS = {"e": ("job", "id", "event", "type", "seq", "index", "at", "memo", "json"),
            "p": ("entry", "event", "party", "account", "position", "index", "posting", "at", "amount"),
            "a": ("entry", "event", "index", "posting", "account", "party", "role", "currency", "amount"),
            "s": ("entry", "event", "index", "party", "axis", "level", "bucket", "account", "amount")}


class LedgerRows:
    """The ledger rows of one or more appends, written by ONE statement (`flush`): a group commit gathers those
    of all its appends here (PostgresTx.ledger_rows) instead of sending a statement per append.

    `entries`: (tenant, job id, entry id, source event id, event type, source seq, index in the event, at, memo,
    entry json); `postings`: (tenant, entry id, event id, party, account, position, entry index, posting index,
    at ms, cents); `allocations`: (tenant, entry id, event id, entry index, posting id, account, party, role,
    currency, cents); `sums`: (tenant, entry id, event id, entry index, party, axis, level, bucket, account,
    cents), one per posting and bucket (summed by the statement, over the inserted entries only)."""

    def __init__(self) -> None:
        self.rows: dict[str, list[tuple[Any, ...]]] = {"e": [], "p": [], "a": [], "s": []}

    def add(self, tenant_id: str, kind: str, rows: Sequence[Sequence[Any]]) -> None:
        self.rows[kind].extend((tenant_id, *row) for row in rows)

    def flush(self, tx: Tx) -> None:
        """Send the statement for the rows gathered so far (no answer is awaited) and start over."""
        if not self.rows["e"]:
            return
        params: dict[str, Any] = {}
        for kind, rows in self.rows.items():
            names = ("tenant", *_COLUMNS[kind])
            columns = [[row[i] for row in rows] for i in range(len(names))]
            params.update((f"{kind}_{name}", column) for name, column in zip(names, columns, strict=True))
        self.rows = {kind: [] for kind in self.rows}
        tx.raw.execute(_WRITE, params, binary=True)


def write_entries(tx: Tx, tenant_id: str, job_id: str, entries: Sequence[Sequence[Any]],
                  postings: Sequence[Sequence[Any]], allocations: Sequence[Sequence[Any]],
                  sums: Sequence[Sequence[Any]]) -> None:
    """Write the rows of one append (the row forms of LedgerRows without the tenant; entries without the job
    id): gathered in the transaction's LedgerRows when it has one (a group commit sends them all at once),
    otherwise sent now."""
    gathered: LedgerRows | None = getattr(tx, "ledger_rows", None)
    rows = gathered if gathered is not None else LedgerRows()
    rows.add(tenant_id, "e", [(job_id, *entry) for entry in entries])
    rows.add(tenant_id, "p", postings)
    rows.add(tenant_id, "a", allocations)
    rows.add(tenant_id, "s", sums)
    if gathered is None:
        rows.flush(tx)
