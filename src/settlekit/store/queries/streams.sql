-- Statements of store/streams.py.

-- name: read_stream
SELECT seq FROM events WHERE tenant_id = ? AND stream_id = ? AND chain_hash = ?

-- name: events_after
SELECT event_json FROM events WHERE tenant_id = ? AND stream_id = ? AND seq > ? ORDER BY seq

-- name: events_between_seqs
SELECT event_json FROM events WHERE tenant_id = ? AND stream_id = ? AND seq > ? AND seq <= ? ORDER BY seq

-- name: high_water_mark
SELECT COALESCE(MAX(position), 0) FROM events

-- name: job_page
SELECT stream_id, head_seq, head_chain_hash, updated_at, snapshot_json FROM streams WHERE tenant_id = ? AND stream_type = 'job' AND stream_id > ? ORDER BY stream_id LIMIT ?

-- name: job_after
SELECT stream_id FROM streams WHERE tenant_id = ? AND stream_type = 'job' AND stream_id > ? ORDER BY stream_id LIMIT 1

-- name: job_prefix_page
SELECT stream_id, head_seq, head_chain_hash, updated_at, snapshot_json FROM streams WHERE tenant_id = ? AND stream_type = 'job' AND stream_id > ? AND stream_id >= ? ORDER BY stream_id LIMIT ?
