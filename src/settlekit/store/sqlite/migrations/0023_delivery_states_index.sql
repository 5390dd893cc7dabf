-- A destination's deliveries per state over a window (its endpoint statistics, the console's overview and
-- deliveries pages) read the index alone: the state is its last column. It replaces the index without it.
CREATE INDEX deliveries_destination_created_state ON deliveries (tenant_id, destination_id, created_at, state);
DROP INDEX deliveries_destination_created;
