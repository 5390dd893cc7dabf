-- The operator console's reads: a job page lists where each of its artifacts was delivered, and a destination's
-- page its latest deliveries, newest first (keyset on id).
CREATE INDEX deliveries_artifact ON deliveries (tenant_id, artifact_id);
CREATE INDEX deliveries_destination_id ON deliveries (tenant_id, destination_id, id);
