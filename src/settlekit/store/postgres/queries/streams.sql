-- Read models of the streams table (store/streams.py), PostgreSQL form.

-- name: job_page_with_status
-- At most `scan` job streams of a tenant after a stream id, in stream id order; of these, the ones whose stored
-- snapshot has the given status, and the last one looked at (`matched` false unless it matches too), at most
-- `limit` rows. Lone-surrogate and U+0000 escapes (imported history) are neutralised first: PostgreSQL's JSON
-- parser refuses them anywhere in a document, and they never occur in a status. The status is read only for
-- the streams of the window (outside its LIMIT), never for the tenant's other streams. PostgreSQL's JSON parser
-- recurses (it stops near 14,000 levels at the default max_stack_depth): a snapshot with more than 5,000 opening
-- brackets, which might nest that deep (imported history), is not parsed here; its `matched` is NULL and it is
-- returned, for the caller to read its status.
-- Parameters: status, tenant_id, after, scan, limit.
SELECT stream_id, head_seq, head_chain_hash, updated_at, snapshot_json, matched
  FROM (SELECT scanned.*,
               CASE WHEN snapshot_json IS NULL THEN FALSE
                    WHEN length(snapshot_json) - length(translate(snapshot_json, '[{', '')) <= 5000
                    THEN COALESCE((regexp_replace(snapshot_json, '\\u([dD][89a-fA-F][0-9a-fA-F]{2}|0000)',
                                                  '\\u003f', 'g')::json -> 'snapshot' ->> 'status') = ?, FALSE)
               END AS matched,
               row_number() OVER (ORDER BY stream_id DESC) AS from_end
          FROM (SELECT stream_id, head_seq, head_chain_hash, updated_at, snapshot_json
                  FROM streams
                 WHERE tenant_id = ? AND stream_type = 'job' AND stream_id > ?
                 ORDER BY stream_id
                 LIMIT ?) AS scanned) AS numbered
 WHERE matched OR matched IS NULL OR from_end = 1
 ORDER BY stream_id
 LIMIT ?
