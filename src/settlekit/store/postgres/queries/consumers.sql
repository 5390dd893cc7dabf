-- Consumer repository statements written for PostgreSQL (the same names as in sqlite/queries/consumers.sql).

-- name: precheck
-- Per state row of the given names (a JSON array): whether it has no pending gaps, the age of the first event
-- past its cursor (NULL: none) and the high-water mark.
SELECT c.name, c.instance_id, c.status, c.last_processed_position, c.pending_gaps = '[]'::jsonb,
    (SELECT ${seconds_since_recorded_at} FROM events e WHERE e.position > c.last_processed_position
     ORDER BY e.position LIMIT 1),
    (SELECT COALESCE(MAX(position), 0) FROM events)
FROM consumer_state c WHERE c.name IN (SELECT jsonb_array_elements_text(?::jsonb))

-- name: events_after
SELECT position, tenant_id, stream_id, stream_type, seq, event_json, txid::text::bigint, event_id, type,
    correlation_id
FROM events WHERE position > ? ORDER BY position LIMIT ?
