"""settlekit ledger."""
