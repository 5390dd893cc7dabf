-- Statements of the artifact repository (store/artifacts.py) that need a dialect fragment.

-- name: save_job_state
INSERT INTO artifact_job_state (tenant_id, job_id, seq, state_json) VALUES (?, ?, ?, ?)
ON CONFLICT (tenant_id, job_id) DO UPDATE SET seq = excluded.seq, state_json = excluded.state_json,
    updated_at = ${now}

-- name: event_batch_id
SELECT batch_id FROM events WHERE tenant_id = ? AND stream_id = ? AND seq = ?

-- name: batch_risk_scored
SELECT seq, event_json FROM events WHERE tenant_id = ? AND stream_id = ? AND batch_id = ? AND type = 'RISK_SCORED' ORDER BY seq

-- name: batch_booked
SELECT seq, event_json FROM events WHERE tenant_id = ? AND stream_id = ? AND event_id = ? AND type = 'BOOKED' AND batch_id = ?

-- name: events_between
SELECT seq, event_json FROM events WHERE tenant_id = ? AND stream_id = ? AND seq > ? AND seq <= ? ORDER BY seq

-- name: load_job_state
SELECT seq, state_json FROM artifact_job_state WHERE tenant_id = ? AND job_id = ?

-- name: load_artifact_json
SELECT artifact_json FROM artifacts WHERE tenant_id = ? AND artifact_id = ?

-- name: insert
INSERT INTO artifacts (tenant_id, artifact_id, job_id, artifact_type, source_event_id, source_chain_hash, artifact_hash, job_version, artifact_json, generated_at)
VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)
ON CONFLICT DO NOTHING
RETURNING created_at

-- name: last_completion
SELECT seq, chain_hash FROM events WHERE tenant_id = ? AND stream_id = ? AND type IN ('EXECUTION_COMPLETED', 'JOB_EXECUTION_COMPLETED') ORDER BY seq DESC LIMIT 1

-- name: latest_proofs_after
SELECT event_id, event_json FROM events WHERE tenant_id = ? AND stream_id = ? AND type = 'PROOF_EVALUATED' AND seq > ? ORDER BY seq DESC

-- name: count_of_type
SELECT count(*) FROM artifacts WHERE tenant_id = ? AND job_id = ? AND artifact_type = ?

-- name: latest_settled
SELECT event_id FROM events WHERE tenant_id = ? AND stream_id = ? AND type = 'SETTLED' ORDER BY seq DESC LIMIT 1
