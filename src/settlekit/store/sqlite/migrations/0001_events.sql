-- Event store: streams (head + snapshot), events (global position in commit order), signer keys, idempotency.
CREATE TABLE streams (
    tenant_id        TEXT NOT NULL,
    stream_id        TEXT NOT NULL,
    stream_type      TEXT NOT NULL,
    head_seq         INTEGER NOT NULL,
    head_chain_hash  TEXT NOT NULL,
    head_event_id    TEXT NOT NULL,
    snapshot_json    TEXT,
    created_at       TEXT NOT NULL DEFAULT (strftime('%Y-%m-%dT%H:%M:%fZ','now')),
    updated_at       TEXT NOT NULL DEFAULT (strftime('%Y-%m-%dT%H:%M:%fZ','now')),
    PRIMARY KEY (tenant_id, stream_id)
);

CREATE TABLE events (
    position         INTEGER PRIMARY KEY,
    tenant_id        TEXT NOT NULL,
    stream_type      TEXT NOT NULL,
    stream_id        TEXT NOT NULL,
    seq              INTEGER NOT NULL,
    event_id         TEXT NOT NULL,
    type             TEXT NOT NULL,
    at               TEXT NOT NULL,
    payload_hash     TEXT NOT NULL,
    prev_chain_hash  TEXT,
    chain_hash       TEXT NOT NULL,
    signature        TEXT,
    signer_key_id    TEXT,
    event_json       TEXT NOT NULL,
    correlation_id   TEXT,
    causation_id     TEXT,
    txid             INTEGER,
    batch_id         TEXT NOT NULL,
    recorded_at      TEXT NOT NULL DEFAULT (strftime('%Y-%m-%dT%H:%M:%fZ','now'))
);
CREATE UNIQUE INDEX events_stream_seq ON events (tenant_id, stream_id, seq);
CREATE UNIQUE INDEX events_tenant_event_id ON events (tenant_id, event_id);
CREATE UNIQUE INDEX events_stream_chain_hash ON events (tenant_id, stream_id, chain_hash);

CREATE TABLE signer_keys (
    tenant_id       TEXT NOT NULL,
    key_id          TEXT NOT NULL,
    public_key_pem  TEXT NOT NULL,
    purpose         TEXT NOT NULL CHECK (purpose IN ('robot', 'operator', 'server')),
    status          TEXT NOT NULL DEFAULT 'active' CHECK (status IN ('active', 'rotated', 'revoked')),
    entity_id       TEXT,
    valid_from      TEXT NOT NULL DEFAULT (strftime('%Y-%m-%dT%H:%M:%fZ','now')),
    valid_to        TEXT,
    rotated_at      TEXT,
    revoked_at      TEXT,
    created_at      TEXT NOT NULL DEFAULT (strftime('%Y-%m-%dT%H:%M:%fZ','now')),
    PRIMARY KEY (tenant_id, key_id)
);

CREATE TABLE idempotency_keys (
    tenant_id      TEXT NOT NULL,
    principal_id   TEXT NOT NULL,
    endpoint       TEXT NOT NULL,
    idem_key       TEXT NOT NULL,
    request_hash   TEXT NOT NULL,
    status_code    INTEGER NOT NULL,
    response_json  TEXT NOT NULL,
    created_at     TEXT NOT NULL DEFAULT (strftime('%Y-%m-%dT%H:%M:%fZ','now')),
    expires_at     TEXT,
    PRIMARY KEY (tenant_id, principal_id, endpoint, idem_key)
);
