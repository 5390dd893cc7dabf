-- Statements of store/ledger.py.

-- name: write_errors
INSERT INTO ledger_errors (tenant_id, job_id, source_event_id, event_type, source_seq, code, message)
VALUES (?, ?, ?, ?, ?, ?, ?)
ON CONFLICT DO NOTHING

-- name: errors_for_job
SELECT source_event_id, event_type, code, message
FROM ledger_errors
WHERE tenant_id = ? AND job_id = ? ORDER BY source_seq

-- name: entries_for_job
SELECT source_event_id, event_type, entry_json
FROM ledger_entries
WHERE tenant_id = ? AND job_id = ? ORDER BY source_seq, entry_index

-- name: entry_ids_for_event
SELECT entry_id
FROM ledger_entries
WHERE tenant_id = ? AND job_id = ? AND source_event_id = ? ORDER BY entry_index

-- name: allocations_for_job
SELECT a.entry_id, a.posting_id, a.account_id, a.party_id, a.party_role, a.currency, a.amount_cents
FROM ledger_allocations a JOIN ledger_entries e ON e.tenant_id = a.tenant_id AND e.entry_id = a.entry_id
WHERE a.tenant_id = ? AND e.job_id = ?
ORDER BY e.source_seq, e.entry_index, CAST(substr(a.posting_id, 2) AS INTEGER), a.party_id
