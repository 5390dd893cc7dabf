-- The console's sessions, server side: the cookie carries a session id (signed), the row holds the sha256 of it,
-- so signing out or revoking the key ends the session in every API process at once (a copied cookie names no row).
-- `flash` is the one-shot message of the session's last action, shown and cleared by the page it redirects to.
-- Rows past expires_at are deleted by the retention cleanup.
CREATE TABLE console_sessions (
    session_hash  TEXT PRIMARY KEY,
    key_id        TEXT NOT NULL,
    tenant_id     TEXT NOT NULL,
    csrf          TEXT NOT NULL,
    flash         TEXT,
    created_at    TEXT NOT NULL DEFAULT (strftime('%Y-%m-%dT%H:%M:%fZ','now')),
    expires_at    TEXT NOT NULL
);
CREATE INDEX console_sessions_key ON console_sessions (key_id);
CREATE INDEX console_sessions_expires ON console_sessions (expires_at);
