-- API keys: one tenant and a set of scopes per key; only the sha256 of the secret is stored.
CREATE TABLE api_keys (
    key_id       TEXT PRIMARY KEY,
    tenant_id    TEXT NOT NULL,
    secret_hash  TEXT NOT NULL,
    scopes       TEXT NOT NULL,
    label        TEXT,
    status       TEXT NOT NULL DEFAULT 'active' CHECK (status IN ('active', 'revoked')),
    created_at   TEXT NOT NULL DEFAULT (strftime('%Y-%m-%dT%H:%M:%fZ','now')),
    revoked_at   TEXT
);
CREATE INDEX api_keys_tenant ON api_keys (tenant_id, key_id);
