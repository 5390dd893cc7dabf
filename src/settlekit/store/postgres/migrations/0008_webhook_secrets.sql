-- Webhook secrets sent by value are kept per tenant in the database, referenced by an opaque server-issued id
-- (destinations.secret_ref = 'secret:<id>'); a rotation keeps the previous secret signing until its grace ends.
CREATE TABLE webhook_secrets (
    tenant_id   TEXT NOT NULL,
    secret_id   TEXT NOT NULL,
    secret      TEXT NOT NULL,
    created_at  TIMESTAMPTZ NOT NULL DEFAULT now(),
    PRIMARY KEY (tenant_id, secret_id)
);
ALTER TABLE destinations ADD COLUMN previous_secret_ref TEXT;
ALTER TABLE destinations ADD COLUMN previous_secret_expires_at TIMESTAMPTZ;
