"""What the last connection attempts say about the database server: reachable, or known to be unreachable.

A failed connection attempt (refused, reset, timed out, the server starting or stopping) starts a short window
in which operations fail at once with DatabaseUnavailableError instead of each waiting for a connection that
cannot come. When the window ends, ONE caller tries again (the probe) while the others keep failing at once; a
success (a connection made, or an operation that reached the server) ends the state, a failure starts a new
window. A probe that does not return within `probe_allowance` seconds no longer holds the others back, and one
that ends with an error of its own (no verdict on the server) lets the next caller probe at once.
"""

from __future__ import annotations

import math
import threading
import time
from collections.abc import Callable

from settlekit.errors import DatabaseUnavailableError

FAST_FAILURE_CAUSE = "recent connection failure"


class Reachability:
    """See the module docstring. `hold`: seconds of fast failure after a failed attempt (0: never fail fast)."""

    def __init__(self, hold: float = 1.0, *, probe_allowance: float = 5.0,
                 clock: Callable[[], float] = time.monotonic):
        self.hold = hold
        self.probe_allowance = probe_allowance
        self.clock = clock
        self._retry_at: float | None = None  # None: reachable; else when the next probe may go
        self._probe_until: float | None = None  # the _retry_at the current probe set (see probe_ended)
        self._lock = threading.Lock()

    @property
    def known_unreachable(self) -> bool:
        return self._retry_at is not None

    def check(self) -> None:
        """Raise DatabaseUnavailableError while the database is known to be unreachable and no caller may probe
        now (it does not take the probe: for a caller that only asks)."""
        retry_at = self._retry_at
        if retry_at is not None and self.clock() < retry_at:
            raise self._unavailable(retry_at)

    def admit(self) -> bool:
        """Let an operation go to the database: at once when reachable (False); while known unreachable, only
        the one caller that becomes the probe (True; DatabaseUnavailableError for the others)."""
        if self._retry_at is None:
            return False
        with self._lock:
            retry_at = self._retry_at
            if retry_at is None:
                return False
            now = self.clock()
            if now < retry_at:
                raise self._unavailable(retry_at)
            self._retry_at = now + self.probe_allowance  # this caller probes; the others still fail at once
            self._probe_until = self._retry_at
            return True

    def probe_ended(self) -> None:
        """The probe's operation ended without a verdict (it failed for a reason that says nothing of the server,
        such as an error of its own): the next caller probes at once instead of after `probe_allowance`, unless a
        failed attempt has started a new hold since."""
        with self._lock:
            if self._retry_at is not None and self._retry_at == self._probe_until:
                self._retry_at = self.clock()

    def failed(self) -> None:
        """A connection attempt failed: fail fast for the next `hold` seconds."""
        if self.hold <= 0:
            return
        with self._lock:
            self._retry_at = self.clock() + self.hold

    def reached(self) -> None:
        """The server answered: operations go to it again."""
        if self._retry_at is not None:
            with self._lock:
                self._retry_at = None

    def _unavailable(self, retry_at: float) -> DatabaseUnavailableError:
        wait = max(1, math.ceil(min(retry_at - self.clock(), self.hold)))
        return DatabaseUnavailableError(retry_after=wait, cause=FAST_FAILURE_CAUSE)
