"""The lifecycle of a signer key: which status may sign a new event, and which status changes are allowed."""

from __future__ import annotations

from typing import Final

ACTIVE: Final = "active"
ROTATED: Final = "rotated"
REVOKED: Final = "revoked"

# the statuses a key may be moved to, with the statuses it may come from. Revocation is final: a revoked key is
# never rotated (its status would no longer say that it must not be trusted). Rotating or revoking again keeps the
# time of the first change.
KEY_TRANSITIONS: Final[dict[str, frozenset[str]]] = {
    ROTATED: frozenset({ACTIVE, ROTATED}),
    REVOKED: frozenset({ACTIVE, ROTATED, REVOKED}),
}
