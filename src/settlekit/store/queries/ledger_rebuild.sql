-- Statements of store/ledger_rebuild.py. The shadow tables (ledger_rebuild_*) hold a run's rebuilt rows: the run
-- id, then the columns of the ledger table they shadow, in the same order.

-- name: ledger_tenants
SELECT DISTINCT tenant_id FROM ledger_entries

-- name: stream_events
SELECT seq, event_json FROM events WHERE tenant_id = ? AND stream_id = ? AND seq <= ? ORDER BY seq

-- name: write_shadow_entries
INSERT INTO ledger_rebuild_entries (run_id, tenant_id, entry_id, job_id, source_event_id, event_type, source_seq,
  entry_index, at, memo, entry_json)
VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)

-- name: write_shadow_allocations
INSERT INTO ledger_rebuild_allocations (run_id, tenant_id, entry_id, posting_id, account_id, party_id, party_role,
  currency, amount_cents)
VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)

-- name: delete_shadow_entries
DELETE FROM ledger_rebuild_entries WHERE run_id = ?

-- name: delete_shadow_allocations
DELETE FROM ledger_rebuild_allocations WHERE run_id = ?

-- name: stored_balances
SELECT account_id, balance_cents FROM ledger_balances WHERE tenant_id = ?

-- name: timeline_rows
SELECT COUNT(*) FROM ledger_postings WHERE tenant_id = ?

-- name: insert_rebuilt_entries
INSERT INTO ledger_entries (tenant_id, entry_id, job_id, source_event_id, event_type, source_seq, entry_index, at,
  memo, entry_json)
SELECT tenant_id, entry_id, job_id, source_event_id, event_type, source_seq, entry_index, at, memo, entry_json
FROM ledger_rebuild_entries WHERE run_id = ? AND tenant_id = ?

-- name: insert_rebuilt_allocations
INSERT INTO ledger_allocations (tenant_id, entry_id, posting_id, account_id, party_id, party_role, currency,
  amount_cents)
SELECT tenant_id, entry_id, posting_id, account_id, party_id, party_role, currency, amount_cents
FROM ledger_rebuild_allocations WHERE run_id = ? AND tenant_id = ?

-- name: insert_balances
INSERT INTO ledger_balances (tenant_id, account_id, balance_cents) VALUES (?, ?, ?)

-- name: rebuilt_entries_page
-- a page of the run's entries of a tenant after a (job id, seq, entry index) key, in stream order
SELECT job_id, source_seq, entry_index, source_event_id, entry_json FROM ledger_rebuild_entries
WHERE run_id = ? AND tenant_id = ? AND (job_id, source_seq, entry_index) > (?, ?, ?)
ORDER BY job_id, source_seq, entry_index LIMIT 500
