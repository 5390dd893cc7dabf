-- artifact_outbox was written by a sink nothing read; deliveries are the outbox.
DROP TABLE IF EXISTS artifact_outbox;
