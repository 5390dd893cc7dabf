-- Secrets the deployment generates for itself, shared by every host: `cursor` keys the opaque, tenant-bound
-- cursors and ids the API hands out (settlekit/cursors.py). The data step stores a random one.
CREATE TABLE server_secrets (
    name   TEXT PRIMARY KEY,
    secret TEXT NOT NULL
);
