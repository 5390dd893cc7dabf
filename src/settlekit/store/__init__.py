"""settlekit store."""
