-- A consumer may declare failures that no retry can change (an artifact conflicting with a stored one): such an
-- event is dead-lettered at once with the reason `skip_permanent_error` (SQLite cannot change a CHECK constraint:
-- the table is made again).
CREATE TABLE consumer_dead_letters_reasons (
    id             INTEGER PRIMARY KEY,
    consumer_name  TEXT NOT NULL,
    instance_id    TEXT NOT NULL,
    position       INTEGER NOT NULL,
    event_id       TEXT,
    tenant_id      TEXT,
    stream_id      TEXT,
    event_type     TEXT,
    reason         TEXT NOT NULL CHECK (reason IN ('skip_apply_error', 'skip_permanent_error', 'operator_skip')),
    error_class    TEXT,
    error_message  TEXT,
    event_json     TEXT,
    created_at     TEXT NOT NULL DEFAULT (strftime('%Y-%m-%dT%H:%M:%fZ','now'))
);
INSERT INTO consumer_dead_letters_reasons SELECT * FROM consumer_dead_letters;
DROP TABLE consumer_dead_letters;
ALTER TABLE consumer_dead_letters_reasons RENAME TO consumer_dead_letters;
CREATE INDEX consumer_dead_letters_consumer ON consumer_dead_letters (consumer_name, instance_id, position);
