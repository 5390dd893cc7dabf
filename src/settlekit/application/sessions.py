"""The operator console's sign-in sessions: the server-side row behind the signed cookie (its API key, expiry
and one-time flash message), kept by store/console_sessions.py."""

from __future__ import annotations

from settlekit.store.console_sessions import delete, find, insert, set_flash, take_flash

__all__ = ["delete", "find", "insert", "set_flash", "take_flash"]
