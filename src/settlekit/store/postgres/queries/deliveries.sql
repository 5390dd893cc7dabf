-- Deliveries repository (store/deliveries.py), PostgreSQL.

-- name: due_per_destination
-- the first due, unleased deliveries of every active destination whose circuit is not open, at most `?` each, in
-- claim order: one index probe per destination, whatever the backlog
SELECT t.tenant_id, t.destination_id, t.circuit_open_until IS NOT NULL, c.id, c.next_attempt_at, c.claims
FROM destinations t
CROSS JOIN LATERAL (
    SELECT d.id, d.next_attempt_at, d.claims FROM deliveries d
    WHERE d.tenant_id = t.tenant_id AND d.destination_id = t.destination_id AND d.state = 'pending'
      AND d.next_attempt_at <= ? AND (d.lease_expires_at IS NULL OR d.lease_expires_at < ?)
      AND (t.ordering <> 'strict_scope' OR NOT EXISTS (SELECT 1 FROM deliveries e
           WHERE e.tenant_id = d.tenant_id AND e.destination_id = d.destination_id AND e.scope_key = d.scope_key
             AND e.state = 'pending' AND (e.order_seq, e.priority, e.id) < (d.order_seq, d.priority, d.id)))
    ORDER BY d.next_attempt_at, d.scope_key, d.order_seq, d.priority, d.id
    LIMIT ?) c
WHERE t.status = 'active' AND (t.circuit_open_until IS NULL OR t.circuit_open_until <= ?)
