-- Dispatcher: one state row per (consumer, shard) and the dead-letter log (05-dispatcher.md §2).
CREATE TABLE consumer_state (
    name                     TEXT NOT NULL,
    instance_id              TEXT NOT NULL DEFAULT '__shared__',
    status                   TEXT NOT NULL DEFAULT 'idle' CHECK (status IN ('idle', 'dead', 'disabled')),
    last_processed_position  INTEGER NOT NULL DEFAULT 0,
    attempts                 INTEGER NOT NULL DEFAULT 0,
    rearm_count              INTEGER NOT NULL DEFAULT 0,
    pending_gaps             TEXT NOT NULL DEFAULT '[]',
    last_error               TEXT,
    skipped_count            INTEGER NOT NULL DEFAULT 0,
    created_at               TEXT NOT NULL DEFAULT (strftime('%Y-%m-%dT%H:%M:%fZ','now')),
    updated_at               TEXT NOT NULL DEFAULT (strftime('%Y-%m-%dT%H:%M:%fZ','now')),
    PRIMARY KEY (name, instance_id)
);

CREATE TABLE consumer_dead_letters (
    id             INTEGER PRIMARY KEY,
    consumer_name  TEXT NOT NULL,
    instance_id    TEXT NOT NULL,
    position       INTEGER NOT NULL,
    event_id       TEXT,
    tenant_id      TEXT,
    stream_id      TEXT,
    event_type     TEXT,
    reason         TEXT NOT NULL CHECK (reason IN ('skip_apply_error', 'operator_skip')),
    error_class    TEXT,
    error_message  TEXT,
    event_json     TEXT,
    created_at     TEXT NOT NULL DEFAULT (strftime('%Y-%m-%dT%H:%M:%fZ','now'))
);
CREATE INDEX consumer_dead_letters_consumer ON consumer_dead_letters (consumer_name, instance_id, position);
