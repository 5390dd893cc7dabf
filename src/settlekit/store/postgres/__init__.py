"""settlekit store/postgres."""
