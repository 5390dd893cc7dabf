-- Statements of store/cursor_secret.py.

-- name: create
INSERT INTO server_secrets (name, secret) VALUES (?, ?) ON CONFLICT (name) DO NOTHING

-- name: read
SELECT secret FROM server_secrets WHERE name = ?
