"""The application layer: every use case of settlekit, one module per subsystem. The HTTP API (`api/`) and the
command line (`cli/`) call these (and the pure domain, for offline tools); they never reach the store themselves.
"""
