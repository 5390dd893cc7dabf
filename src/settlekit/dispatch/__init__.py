"""settlekit dispatch."""
