-- The event feed (GET /v1/events): one tenant's events in position order.
CREATE INDEX events_tenant_position ON events (tenant_id, position);
