"""settlekit: event-sourced settlement engine for delegated work."""

__version__ = "0.1.0"
