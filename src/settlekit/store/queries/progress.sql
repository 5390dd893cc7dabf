-- Statements of store/progress.py.

-- name: outstanding
-- one statement, so one snapshot on every dialect: counts read one after another under READ COMMITTED could
-- see an artifact (and its delivery, sent meanwhile) that did not exist when the undelivered ones were counted
SELECT (SELECT count(*) FROM deliveries WHERE state <> 'delivered'),
       (SELECT count(*) FROM artifacts),
       (SELECT count(*) FROM consumer_state),
       (SELECT count(*)
        FROM consumer_state
        WHERE last_processed_position < (SELECT COALESCE(max(position), 0) FROM events))
