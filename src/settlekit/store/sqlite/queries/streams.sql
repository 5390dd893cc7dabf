-- Read models of the streams table (store/streams.py), SQLite form.

-- name: job_page_with_status
-- At most `scan` job streams of a tenant after a stream id, in stream id order; of these, the ones whose stored
-- snapshot has the given status, and the last one looked at (`matched` false unless it matches too), at most
-- `limit` rows. The status is read only for the streams of the window (outside its LIMIT). A snapshot nested
-- deeper than SQLite's JSON functions read (imported history) has `matched` NULL and is returned: the caller
-- reads its status.
-- Parameters: status, tenant_id, after, scan, limit.
SELECT stream_id, head_seq, head_chain_hash, updated_at, snapshot_json, matched
  FROM (SELECT scanned.*,
               CASE WHEN snapshot_json IS NULL THEN 0
                    WHEN json_valid(snapshot_json)
                    THEN COALESCE(json_extract(snapshot_json, '$.snapshot.status') = ?, 0) END AS matched,
               row_number() OVER (ORDER BY stream_id DESC) AS from_end
          FROM (SELECT stream_id, head_seq, head_chain_hash, updated_at, snapshot_json
                  FROM streams
                 WHERE tenant_id = ? AND stream_type = 'job' AND stream_id > ?
                 ORDER BY stream_id
                 LIMIT ?) AS scanned) AS numbered
 WHERE matched OR matched IS NULL OR from_end = 1
 ORDER BY stream_id
 LIMIT ?
