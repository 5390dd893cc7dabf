-- Fair, isolated delivery: the due deliveries of one destination in claim order (the worker takes a few of each
-- destination per claim), the destination's circuit breaker, and replays as recorded jobs.
CREATE INDEX deliveries_destination_due ON deliveries
    (tenant_id, destination_id, next_attempt_at, scope_key, order_seq, priority, id) WHERE state = 'pending';

ALTER TABLE destinations ADD COLUMN circuit_failures INT NOT NULL DEFAULT 0;
ALTER TABLE destinations ADD COLUMN circuit_opens INT NOT NULL DEFAULT 0;
ALTER TABLE destinations ADD COLUMN circuit_open_until TIMESTAMPTZ;

CREATE TABLE delivery_replays (
    replay_id      TEXT PRIMARY KEY,
    tenant_id      TEXT NOT NULL,
    destination_id TEXT NOT NULL,
    since          TIMESTAMPTZ NOT NULL,
    until          TIMESTAMPTZ NOT NULL,
    status         TEXT NOT NULL,
    total          INT NOT NULL,
    replayed       INT NOT NULL DEFAULT 0,
    skipped        INT NOT NULL DEFAULT 0,
    cursor_id      BIGINT NOT NULL DEFAULT 0,
    actor          TEXT,
    created_at     TIMESTAMPTZ NOT NULL,
    updated_at     TIMESTAMPTZ NOT NULL,
    finished_at    TIMESTAMPTZ,
    FOREIGN KEY (tenant_id, destination_id) REFERENCES destinations (tenant_id, destination_id) ON DELETE CASCADE
);
CREATE UNIQUE INDEX delivery_replays_one_running ON delivery_replays (tenant_id, destination_id)
    WHERE status = 'running';
CREATE INDEX delivery_replays_tenant ON delivery_replays (tenant_id, destination_id, created_at);
