"""Projections: dispatcher consumers that derive read models from the event log (today: the artifacts
consumer and where its artifacts go next)."""
