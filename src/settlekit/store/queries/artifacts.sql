-- Statements of the artifact repository (store/artifacts.py) that need a dialect fragment.

-- name: save_job_state
INSERT INTO artifact_job_state (tenant_id, job_id, seq, state_json) VALUES (?, ?, ?, ?)
ON CONFLICT (tenant_id, job_id) DO UPDATE SET seq = excluded.seq, state_json = excluded.state_json,
    updated_at = ${now}
