-- Statements of store/streams.py.

-- name: read_stream
SELECT seq FROM events WHERE tenant_id = ? AND stream_id = ? AND chain_hash = ?

-- name: events_after
SELECT event_json FROM events WHERE tenant_id = ? AND stream_id = ? AND seq > ? ORDER BY seq

-- name: events_between_seqs
SELECT event_json FROM events WHERE tenant_id = ? AND stream_id = ? AND seq > ? AND seq <= ? ORDER BY seq

-- name: high_water_mark
SELECT COALESCE(MAX(position), 0) FROM events
