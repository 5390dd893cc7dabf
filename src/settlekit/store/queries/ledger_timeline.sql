-- Statements of store/ledger_timeline.py.

-- name: head_position
SELECT MAX(position) FROM ledger_postings WHERE tenant_id = ? AND party_id = ?

-- name: account_known
SELECT 1 FROM ledger_balances WHERE tenant_id = ? AND account_id = ?
