-- Statements of store/append_rate.py (the primary key of events and the (tenant_id, position) index only).

-- name: head
SELECT COALESCE(max(position), 0), COALESCE(min(position), 1) FROM events

-- name: first_at_or_after
SELECT position, recorded_at FROM events WHERE position >= ? ORDER BY position LIMIT 1

-- name: recorded_after
SELECT position, recorded_at FROM events WHERE position > ? ORDER BY position LIMIT ?

-- name: tenant_after
SELECT count(*) FROM (SELECT 1 FROM events WHERE tenant_id = ? AND position > ? ORDER BY position LIMIT ?) newest

-- name: recorded_between
SELECT position, recorded_at FROM events WHERE position > ? AND position < ? ORDER BY position
