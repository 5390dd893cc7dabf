"""settlekit artifacts."""
