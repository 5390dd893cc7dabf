"""Named SQL statement files (see settlekit.store.sql)."""
