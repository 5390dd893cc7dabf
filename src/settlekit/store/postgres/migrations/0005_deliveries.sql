-- Webhook destinations per tenant, the durable delivery queue (claim + lease) and its attempt log (spec 06).
CREATE TABLE destinations (
    tenant_id              TEXT NOT NULL,
    destination_id         TEXT NOT NULL,
    kind                   TEXT NOT NULL DEFAULT 'webhook' CHECK (kind IN ('webhook')),
    url                    TEXT NOT NULL,
    secret_ref             TEXT NOT NULL,
    signing                TEXT NOT NULL DEFAULT 'standard' CHECK (signing IN ('standard', 'settld_legacy', 'both')),
    artifact_types         TEXT,
    ordering               TEXT NOT NULL DEFAULT 'best_effort' CHECK (ordering IN ('best_effort', 'strict_scope')),
    allow_private_network  BOOLEAN NOT NULL DEFAULT false,
    status                 TEXT NOT NULL DEFAULT 'active' CHECK (status IN ('active', 'disabled')),
    disabled_reason        TEXT,
    disabled_at            TIMESTAMPTZ,
    created_at             TIMESTAMPTZ NOT NULL DEFAULT now(),
    updated_at             TIMESTAMPTZ NOT NULL DEFAULT now(),
    PRIMARY KEY (tenant_id, destination_id)
);

CREATE TABLE deliveries (
    id                BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    tenant_id         TEXT NOT NULL,
    destination_id    TEXT NOT NULL,
    artifact_type     TEXT NOT NULL,
    artifact_id       TEXT NOT NULL,
    artifact_hash     TEXT NOT NULL,
    dedupe_key        TEXT NOT NULL,
    message_id        TEXT NOT NULL,
    scope_key         TEXT NOT NULL,
    order_seq         BIGINT NOT NULL,
    priority          INT NOT NULL,
    order_key         TEXT NOT NULL,
    state             TEXT NOT NULL DEFAULT 'pending' CHECK (state IN ('pending', 'delivered', 'failed')),
    attempts          INT NOT NULL DEFAULT 0,
    next_attempt_at   TIMESTAMPTZ NOT NULL DEFAULT now(),
    lease_owner       TEXT,
    lease_expires_at  TIMESTAMPTZ,
    last_status       INT,
    last_error        TEXT,
    delivered_at      TIMESTAMPTZ,
    acked_at          TIMESTAMPTZ,
    created_at        TIMESTAMPTZ NOT NULL DEFAULT now(),
    updated_at        TIMESTAMPTZ NOT NULL DEFAULT now(),
    expires_at        TIMESTAMPTZ,
    UNIQUE (tenant_id, dedupe_key),
    FOREIGN KEY (tenant_id, destination_id) REFERENCES destinations (tenant_id, destination_id) ON DELETE CASCADE
);
CREATE INDEX deliveries_due ON deliveries (next_attempt_at, scope_key, order_seq, priority, id)
    WHERE state = 'pending';
CREATE INDEX deliveries_scope ON deliveries (tenant_id, destination_id, scope_key, state, order_seq, priority, id);
CREATE INDEX deliveries_expires ON deliveries (expires_at) WHERE expires_at IS NOT NULL;

CREATE TABLE delivery_attempts (
    delivery_id       BIGINT NOT NULL REFERENCES deliveries (id) ON DELETE CASCADE,
    attempt           INT NOT NULL,
    started_at        TIMESTAMPTZ NOT NULL,
    duration_ms       DOUBLE PRECISION NOT NULL,
    http_status       INT,
    error             TEXT,
    response_snippet  TEXT,
    PRIMARY KEY (delivery_id, attempt)
);
