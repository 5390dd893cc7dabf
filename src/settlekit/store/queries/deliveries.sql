-- Statements of store/deliveries.py.

-- name: put_destination
INSERT INTO destinations (tenant_id, destination_id, kind, url, secret_ref, signing, artifact_types, ordering, allow_private_network, status, disabled_reason, previous_secret_ref, previous_secret_expires_at, created_at, updated_at)
VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)
ON CONFLICT (tenant_id, destination_id) DO UPDATE
SET kind = excluded.kind, url = excluded.url, secret_ref = excluded.secret_ref, signing = excluded.signing, artifact_types = excluded.artifact_types, ordering = excluded.ordering, allow_private_network = excluded.allow_private_network, status = excluded.status, disabled_reason = excluded.disabled_reason, previous_secret_ref = excluded.previous_secret_ref, previous_secret_expires_at = excluded.previous_secret_expires_at, updated_at = excluded.updated_at

-- name: disable_if_active
UPDATE destinations SET status = 'disabled', disabled_reason = ?, disabled_at = ?, updated_at = ? WHERE tenant_id = ? AND destination_id = ? AND status = 'active'

-- name: insert_delivery
INSERT INTO deliveries (tenant_id, destination_id, artifact_type, artifact_id, artifact_hash, dedupe_key, message_id, scope_key, order_seq, priority, order_key, next_attempt_at, created_at, updated_at)
VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)
ON CONFLICT (tenant_id, dedupe_key) DO NOTHING

-- name: record_attempt
INSERT INTO delivery_attempts (delivery_id, attempt, started_at, duration_ms, http_status, error, response_snippet)
VALUES (?, ?, ?, ?, ?, ?, ?)
ON CONFLICT (delivery_id, attempt) DO NOTHING

-- name: list_attempts
SELECT attempt, http_status, error FROM delivery_attempts WHERE delivery_id = ? ORDER BY attempt

-- name: cleanup_expired
DELETE
FROM deliveries
WHERE id IN (SELECT id
FROM deliveries
WHERE expires_at IS NOT NULL AND expires_at < ? LIMIT ?) AND expires_at IS NOT NULL AND expires_at < ?

-- name: pending_counts
SELECT state, count(*) FROM deliveries GROUP BY state

-- name: get_circuit
SELECT circuit_failures, circuit_opens, circuit_open_until
FROM destinations
WHERE tenant_id = ? AND destination_id = ?

-- name: set_circuit
UPDATE destinations
SET circuit_failures = ?, circuit_opens = ?, circuit_open_until = ?
WHERE tenant_id = ? AND destination_id = ?

-- name: destination_active_since
SELECT enabled_at, created_at FROM destinations WHERE tenant_id = ? AND destination_id = ?

-- name: end_expired_rotations
UPDATE destinations
SET previous_secret_ref = NULL, previous_secret_expires_at = NULL
WHERE tenant_id = ? AND previous_secret_expires_at IS NOT NULL AND previous_secret_expires_at <= ?

-- name: destinations_with_ref_scheme
SELECT tenant_id, destination_id, signing, secret_ref, previous_secret_ref
FROM destinations
WHERE secret_ref LIKE ? OR previous_secret_ref LIKE ? ORDER BY tenant_id, destination_id

-- name: count_pending
SELECT count(*) FROM deliveries WHERE tenant_id = ? AND state = 'pending'

-- name: oldest_pending_created_at
SELECT min(created_at) FROM deliveries WHERE state = 'pending'

-- name: destination_disabled_at
SELECT disabled_at FROM destinations WHERE tenant_id = ? AND destination_id = ?

-- name: secret_refs
SELECT secret_ref, previous_secret_ref FROM destinations WHERE tenant_id = ?

-- name: count_due
-- due now, leased or not (the claim's own query is each dialect's due_per_destination)
SELECT count(*) FROM deliveries d JOIN destinations t
ON t.tenant_id = d.tenant_id AND t.destination_id = d.destination_id
WHERE d.state = 'pending' AND d.next_attempt_at <= ? AND t.status = 'active'
AND (t.circuit_open_until IS NULL OR t.circuit_open_until <= ?)
AND (t.ordering <> 'strict_scope' OR NOT EXISTS (SELECT 1 FROM deliveries e
WHERE e.tenant_id = d.tenant_id AND e.destination_id = d.destination_id AND e.scope_key = d.scope_key
AND e.state = 'pending' AND (e.order_seq, e.priority, e.id) < (d.order_seq, d.priority, d.id)))
