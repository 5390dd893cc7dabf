-- Delivery recovery: replays keep numbering the attempt log (attempt_base: attempts made before the last requeue
-- or replay), and a destination's run of failed attempts (failure_streak since failing_since) for auto-disable.
ALTER TABLE deliveries ADD COLUMN attempt_base INTEGER NOT NULL DEFAULT 0;
ALTER TABLE destinations ADD COLUMN failure_streak INTEGER NOT NULL DEFAULT 0;
ALTER TABLE destinations ADD COLUMN failing_since TEXT;
CREATE INDEX deliveries_destination_created ON deliveries (tenant_id, destination_id, created_at);
CREATE INDEX delivery_attempts_started ON delivery_attempts (started_at);
