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
