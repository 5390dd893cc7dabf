"""settlekit jobs."""
