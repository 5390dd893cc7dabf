-- Consumer repository statements written for PostgreSQL (the same names as in sqlite/queries/consumers.sql).

-- name: events_after
-- txid is an xid8: read as a bigint.
SELECT position, tenant_id, stream_id, stream_type, seq, event_json, txid::text::bigint, event_id, type,
    correlation_id
FROM events WHERE position > ? ORDER BY position LIMIT ?
