-- Statements of the finance repository (store/finance.py): month close, the tenant log, exports.
-- Times and ids compare by code point on both backends (${collate_c}).

-- name: assign_entries
-- the entries whose `at` text lies in [inside_from, inside_to) but not in [near_start_from, near_start_to): a day
-- or more from each bound, where text order is instant order whatever the UTC offset; carried: before `start`.
-- An entry already in a period keeps it (the key conflict skips it).
-- Parameters: period, start, tenant_id, inside_from, inside_to, near_start_from, near_start_to.
INSERT INTO finance_entry_periods (tenant_id, entry_id, period, at, carried)
SELECT e.tenant_id, e.entry_id, ?, e.at, (e.at ${collate_c} < ?)
FROM ledger_entries e
WHERE e.tenant_id = ? AND e.at ${collate_c} >= ? AND e.at ${collate_c} < ?
  AND NOT (e.at ${collate_c} >= ? AND e.at ${collate_c} < ?)
ON CONFLICT (tenant_id, entry_id) DO NOTHING

-- name: unassigned_entries_near
-- (entry id, at) of the tenant's entries in no period whose `at` text lies in one of three [from, to) windows, or
-- does not start with a digit (a time of imported history spelled as settld's Date.parse reads it, e.g. RFC 1123 or
-- an expanded year: its text order is not its instant's, so it is judged by its instant).
SELECT e.entry_id, e.at
FROM ledger_entries e
WHERE e.tenant_id = ?
  AND ((e.at ${collate_c} >= ? AND e.at ${collate_c} < ?) OR (e.at ${collate_c} >= ? AND e.at ${collate_c} < ?)
       OR (e.at ${collate_c} >= ? AND e.at ${collate_c} < ?)
       OR e.at ${collate_c} < '0' OR e.at ${collate_c} >= ':')
  AND NOT EXISTS (SELECT 1 FROM finance_entry_periods p WHERE p.tenant_id = e.tenant_id AND p.entry_id = e.entry_id)
ORDER BY e.entry_id ${collate_c}

-- name: assign_entry
INSERT INTO finance_entry_periods (tenant_id, entry_id, period, at, carried) VALUES (?, ?, ?, ?, ?)
ON CONFLICT (tenant_id, entry_id) DO NOTHING

-- name: stream_heads_before
-- (an `at` that does not start with a digit is judged by its instant: job_events_between)
SELECT e.stream_id, e.seq, e.chain_hash
FROM events e
JOIN (SELECT stream_id, max(seq) AS seq FROM events
      WHERE tenant_id = ? AND stream_type = 'job' AND at ${collate_c} < ? AND at ${collate_c} >= '0'
      GROUP BY stream_id) h
  ON e.stream_id = h.stream_id AND e.seq = h.seq
WHERE e.tenant_id = ?

-- name: job_events_between
-- (stream id, seq, chain hash, at) of the tenant's job events whose `at` text lies in [from, to), or does not start
-- with a digit (see unassigned_entries_near).
SELECT stream_id, seq, chain_hash, at
FROM events
WHERE tenant_id = ? AND stream_type = 'job'
  AND ((at ${collate_c} >= ? AND at ${collate_c} < ?) OR at ${collate_c} < '0' OR at ${collate_c} >= ':')
ORDER BY stream_id ${collate_c}, seq

-- name: period_entries_page
SELECT p.entry_id, p.at, p.carried, e.job_id, e.event_type, e.source_event_id, e.memo, e.entry_json
FROM finance_entry_periods p
JOIN ledger_entries e ON e.tenant_id = p.tenant_id AND e.entry_id = p.entry_id
WHERE p.tenant_id = ? AND p.period = ? AND (p.at ${collate_c}, p.entry_id ${collate_c}) > (?, ?)
ORDER BY p.at ${collate_c}, p.entry_id ${collate_c}
LIMIT ?

-- name: period_allocations_range
SELECT a.entry_id, a.posting_id, a.party_id, a.party_role, a.amount_cents
FROM finance_entry_periods p
JOIN ledger_allocations a ON a.tenant_id = p.tenant_id AND a.entry_id = p.entry_id
WHERE p.tenant_id = ? AND p.period = ? AND (p.at ${collate_c}, p.entry_id ${collate_c}) > (?, ?)
  AND (p.at ${collate_c}, p.entry_id ${collate_c}) <= (?, ?)

-- name: tenants_to_close
SELECT tenant_id FROM ledger_entries UNION SELECT tenant_id FROM streams WHERE stream_type = 'job'

-- name: closed_months
SELECT month FROM finance_closes WHERE tenant_id = ?

-- name: close_document
SELECT document_json FROM finance_closes WHERE tenant_id = ? AND month = ?

-- name: insert_close
INSERT INTO finance_closes (tenant_id, month, artifact_hash, tree_size, root_hash, journal_sha256, document_json)
VALUES (?, ?, ?, ?, ?, ?, ?)

-- name: insert_close_artifact
INSERT INTO artifacts (tenant_id, artifact_id, job_id, artifact_type, source_event_id, source_chain_hash, artifact_hash, job_version, artifact_json, generated_at)
VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)
ON CONFLICT DO NOTHING

-- name: latest_leaves
SELECT stream_id, head_chain_hash, event_count
FROM finance_log_leaves l
WHERE tenant_id = ? AND leaf_index = (SELECT max(leaf_index)
FROM finance_log_leaves m
WHERE m.tenant_id = l.tenant_id AND m.stream_id = l.stream_id)

-- name: append_leaves
INSERT INTO finance_log_leaves (tenant_id, leaf_index, period, stream_id, head_chain_hash, event_count, leaf_hash)
VALUES (?, ?, ?, ?, ?, ?, ?)

-- name: append_nodes
INSERT INTO finance_log_nodes (tenant_id, level, node_index, node_hash) VALUES (?, ?, ?, ?)

-- name: leaf_of_stream
SELECT leaf_index, head_chain_hash, event_count
FROM finance_log_leaves
WHERE tenant_id = ? AND period = ? AND stream_id = ?

-- name: put_gl_mapping
INSERT INTO finance_gl_mappings (tenant_id, mapping_hash, mapping_json)
VALUES (?, ?, ?)
ON CONFLICT (tenant_id) DO UPDATE
SET mapping_hash = excluded.mapping_hash, mapping_json = excluded.mapping_json

-- name: gl_mapping
SELECT mapping_json, mapping_hash FROM finance_gl_mappings WHERE tenant_id = ?

-- name: log_tenants
SELECT DISTINCT tenant_id FROM finance_log_leaves ORDER BY tenant_id
