-- Consumer repository statements written for SQLite (the same names as in postgres/queries/consumers.sql).

-- name: events_after
SELECT position, tenant_id, stream_id, stream_type, seq, event_json, txid, event_id, type, correlation_id
FROM events WHERE position > ? ORDER BY position LIMIT ?
