-- Statements of store/ledger_timeline.py.

-- name: head_position
SELECT MAX(position) FROM ledger_postings WHERE tenant_id = ? AND party_id = ?

-- name: account_known
SELECT 1 FROM ledger_balances WHERE tenant_id = ? AND account_id = ?

-- name: insert_posting
INSERT INTO ledger_postings (tenant_id, party_id, account_id, position, entry_index, posting_index, entry_id,
  at_ms, amount_cents)
VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?) ON CONFLICT DO NOTHING

-- name: add_sum
INSERT INTO ledger_sums (tenant_id, party_id, axis, level, bucket, account_id, amount_cents)
VALUES (?, ?, ?, ?, ?, ?, ?) ON CONFLICT (tenant_id, party_id, axis, level, bucket, account_id) DO UPDATE
SET amount_cents = ledger_sums.amount_cents + excluded.amount_cents
