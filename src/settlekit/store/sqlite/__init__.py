"""settlekit store/sqlite."""
