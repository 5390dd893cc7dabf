-- Deliveries repository (store/deliveries.py), SQLite.

-- name: due_per_destination
-- the first due, unleased deliveries of every active destination whose circuit is not open, at most `?` each, in
-- claim order: one index probe per destination, whatever the backlog
SELECT t.tenant_id, t.destination_id, t.circuit_open_until IS NOT NULL, d.id, d.next_attempt_at, d.claims
FROM destinations t JOIN deliveries d ON d.id IN (
    SELECT e.id FROM deliveries e
    WHERE e.tenant_id = t.tenant_id AND e.destination_id = t.destination_id AND e.state = 'pending'
      AND e.next_attempt_at <= ?1 AND (e.lease_expires_at IS NULL OR e.lease_expires_at < ?2)
      AND (t.ordering <> 'strict_scope' OR NOT EXISTS (SELECT 1 FROM deliveries f
           WHERE f.tenant_id = e.tenant_id AND f.destination_id = e.destination_id AND f.scope_key = e.scope_key
             AND f.state = 'pending' AND (f.order_seq, f.priority, f.id) < (e.order_seq, e.priority, e.id)))
    ORDER BY e.next_attempt_at, e.scope_key, e.order_seq, e.priority, e.id
    LIMIT ?3)
WHERE t.status = 'active' AND (t.circuit_open_until IS NULL OR t.circuit_open_until <= ?4)
