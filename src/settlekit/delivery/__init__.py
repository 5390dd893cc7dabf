"""settlekit delivery."""
