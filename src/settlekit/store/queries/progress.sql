-- Statements of store/progress.py.

-- name: outstanding
SELECT count(*) FROM deliveries WHERE state <> 'delivered'

-- name: count_artifacts
SELECT count(*) FROM artifacts

-- name: count_consumers
SELECT count(*) FROM consumer_state

-- name: consumers_behind
SELECT count(*)
FROM consumer_state
WHERE last_processed_position < (SELECT COALESCE(max(position), 0)
FROM events)
