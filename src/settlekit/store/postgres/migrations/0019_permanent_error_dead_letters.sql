-- A consumer may declare failures that no retry can change (an artifact conflicting with a stored one): such an
-- event is dead-lettered at once with the reason `skip_permanent_error`.
ALTER TABLE consumer_dead_letters DROP CONSTRAINT consumer_dead_letters_reason_check;
ALTER TABLE consumer_dead_letters ADD CONSTRAINT consumer_dead_letters_reason_check
    CHECK (reason IN ('skip_apply_error', 'skip_permanent_error', 'operator_skip'));
