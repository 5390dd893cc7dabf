-- Statements of store/delivery_recovery.py.

-- name: update_replay
UPDATE delivery_replays
SET status = ?, replayed = ?, skipped = ?, cursor_id = ?, updated_at = ?, finished_at = ?
WHERE replay_id = ?

-- name: streak
SELECT failure_streak, failing_since FROM destinations WHERE tenant_id = ? AND destination_id = ?

-- name: running_replays_of
SELECT count(*) FROM delivery_replays WHERE tenant_id = ? AND status = 'running'

-- name: any_running_replay
SELECT 1 FROM delivery_replays WHERE status = 'running' LIMIT 1

-- name: end_streak
UPDATE destinations
SET failure_streak = 0, failing_since = NULL
WHERE tenant_id = ? AND destination_id = ? AND failure_streak <> 0

-- name: disable_if_failing
UPDATE destinations SET status = 'disabled', disabled_reason = ?, disabled_at = ?, updated_at = ? WHERE tenant_id = ? AND destination_id = ? AND status = 'active' AND failure_streak >= ? AND failing_since IS NOT NULL AND failing_since <= ?

-- name: set_streak
UPDATE destinations SET failure_streak = ?, failing_since = ? WHERE tenant_id = ? AND destination_id = ?

-- name: extend_streak
UPDATE destinations
SET failure_streak = failure_streak + ?, failing_since = COALESCE(failing_since, ?)
WHERE tenant_id = ? AND destination_id = ?

-- name: window_counts
-- (all, pending) deliveries of a destination created in a window [?, ?)
SELECT count(*), sum(CASE WHEN state = 'pending' THEN 1 ELSE 0 END) FROM deliveries
WHERE tenant_id = ? AND destination_id = ? AND created_at >= ? AND created_at < ?

-- name: replay_window_page
SELECT id, state FROM deliveries
WHERE tenant_id = ? AND destination_id = ? AND created_at >= ? AND created_at < ? AND id > ? ORDER BY id LIMIT ?

-- name: attempts_in_window
SELECT a.started_at, a.duration_ms, a.http_status, a.error, a.delivery_id FROM delivery_attempts a
JOIN deliveries d ON d.id = a.delivery_id WHERE d.tenant_id = ? AND d.destination_id = ?
AND a.started_at >= ? AND a.started_at < ? ORDER BY a.started_at DESC LIMIT ?

-- name: delivery_states
-- the newest `limit` deliveries of the window counted per state: an index-only scan of at most `limit` entries
SELECT state, count(*), min(created_at) FROM (SELECT state, created_at FROM deliveries
WHERE tenant_id = ? AND destination_id = ? AND created_at >= ? AND created_at < ?
ORDER BY created_at DESC LIMIT ?) newest GROUP BY state
