"""settlekit api."""
