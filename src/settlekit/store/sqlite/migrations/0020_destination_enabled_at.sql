-- When a destination was last enabled: the backfill of a later disable looks for artifacts without a delivery to
-- it from a margin before that disable, never before this.
ALTER TABLE destinations ADD COLUMN enabled_at TEXT;
