-- Statements of the event feed repository (store/feed.py), portable.

-- name: positions_after
-- The visible global positions past a position (every tenant), for the feed's gap walk.
SELECT position FROM events WHERE position > ? ORDER BY position LIMIT ?

-- name: tenant_events
-- One tenant's events in (after, upto]; the repository appends the type filter, then the order and limit.
SELECT position, type, event_json FROM events WHERE tenant_id = ? AND position > ? AND position <= ?

-- name: tenant_last
-- The position of one tenant's last event in (after, upto], whatever its type.
SELECT MAX(position) FROM events WHERE tenant_id = ? AND position > ? AND position <= ?

-- name: raw_page
-- A plain paged read of one tenant's events, without the gap walk (the feed benchmark's anchor).
SELECT position, type, event_json FROM events WHERE tenant_id = ? AND position > ? ORDER BY position LIMIT ?
