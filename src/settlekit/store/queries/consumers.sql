-- Statements of the consumer repository (store/consumers.py) that both dialects share.

-- name: register
INSERT INTO consumer_state (name, instance_id) VALUES (?, ?) ON CONFLICT DO NOTHING

-- name: register_at_head
-- `WHERE 1 = 1` lets SQLite parse ON CONFLICT after a SELECT.
INSERT INTO consumer_state (name, instance_id, last_processed_position)
SELECT ?, ?, COALESCE(MAX(position), 0) FROM events WHERE 1 = 1
ON CONFLICT DO NOTHING

-- name: precheck
-- Per state row of some consumer names: whether it has no pending gaps, the age of the first event past its
-- cursor (NULL: none) and the high-water mark. The repository appends the name list `(?, ...)`.
-- (On PostgreSQL the untyped '[]' is read as jsonb.)
SELECT c.name, c.instance_id, c.status, c.last_processed_position, c.pending_gaps = '[]',
    (SELECT ${seconds_since_recorded_at} FROM events e WHERE e.position > c.last_processed_position
     ORDER BY e.position LIMIT 1),
    (SELECT COALESCE(MAX(position), 0) FROM events)
FROM consumer_state c WHERE c.name IN

-- name: exists
SELECT 1 FROM consumer_state WHERE name = ? AND instance_id = ?

-- name: state
-- The repository appends the dialect's row-lock clause.
SELECT name, instance_id, status, last_processed_position, attempts, rearm_count, CAST(pending_gaps AS TEXT),
    last_error, skipped_count, updated_at, ${seconds_since_updated_at}
FROM consumer_state WHERE name = ? AND instance_id = ?

-- name: list_states
SELECT name, instance_id, status, last_processed_position, attempts, rearm_count, CAST(pending_gaps AS TEXT),
    last_error, skipped_count, updated_at, ${seconds_since_updated_at},
    (SELECT ${seconds_since_recorded_at} FROM events e WHERE e.position > consumer_state.last_processed_position
     ORDER BY e.position LIMIT 1)
FROM consumer_state ORDER BY name, instance_id

-- name: write_state
UPDATE consumer_state SET last_processed_position = ?, attempts = ?, status = ?, last_error = ?,
    pending_gaps = ${json}, rearm_count = ?, skipped_count = skipped_count + ?, updated_at = ${now}
WHERE name = ? AND instance_id = ?

-- name: record_error
UPDATE consumer_state SET last_error = ? WHERE name = ? AND instance_id = ?

-- name: high_water_mark
SELECT COALESCE(MAX(position), 0) FROM events

-- name: lag
SELECT (SELECT COALESCE(MAX(position), 0) FROM events),
    (SELECT ${seconds_since_recorded_at} FROM events WHERE position > ? ORDER BY position LIMIT 1)

-- name: next_position_after
SELECT MIN(position) FROM events WHERE position > ?

-- name: positions_between
SELECT position FROM events WHERE position > ? AND position <= ? ORDER BY position

-- name: insert_dead_letter
INSERT INTO consumer_dead_letters (consumer_name, instance_id, position, event_id, tenant_id, stream_id,
    event_type, reason, error_class, error_message, event_json)
SELECT ?, ?, position, event_id, tenant_id, stream_id, type, ?, ?, ?, event_json FROM events WHERE position = ?

-- name: dead_letters
SELECT id, position, event_id, event_type, reason, error_class, error_message, created_at
FROM consumer_dead_letters WHERE consumer_name = ? AND instance_id = ? ORDER BY id
