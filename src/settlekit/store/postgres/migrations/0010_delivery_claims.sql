-- Crash-loop guard: claims since the last recorded outcome. A claim adds one, a recorded outcome resets it, a
-- graceful release takes its claim back; a delivery claimed too often without an outcome is dead-lettered.
ALTER TABLE deliveries ADD COLUMN claims INTEGER NOT NULL DEFAULT 0;
