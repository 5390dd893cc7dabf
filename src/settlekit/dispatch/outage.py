"""Retries of a background loop whose passes fail while something it needs is down (the database, a LISTEN
session): how long to wait before the next try, and what to log.

The wait grows exponentially from `base` to `cap` with jitter (a random point in the upper half of the step), so
workers that lost the database together do not retry in step. The log has one line per change of state: down (the
first failure: a traceback unless it is DATABASE_UNAVAILABLE, which says all there is), still down every
`remind` seconds (how long, how many failures, the last error), a different error while down, and back (how long
it lasted). Before, every failed pass logged its traceback and was retried after 0.1 s: about 16 lines (19 KB) a
second for as long as an outage lasted.
"""

from __future__ import annotations

import logging
import random
import time
from collections.abc import Callable

from settlekit.errors import DatabaseUnavailableError


def _describe(exc: BaseException) -> str:
    return f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__


# its own generator: jitter never draws from (nor moves) the process's global random state
_JITTER = random.Random()


class OutageBackoff:
    """See the module docstring. `what` names the loop in the log lines ("dispatcher pass", "LISTEN session")."""

    def __init__(self, log: logging.Logger, what: str, *, base: float = 0.2, cap: float = 2.0,
                 remind: float = 30.0, clock: Callable[[], float] = time.monotonic,
                 jitter: Callable[[], float] = _JITTER.random):
        self.log = log
        self.what = what
        self.base = base
        self.cap = cap
        self.remind = remind
        self.clock = clock
        self.jitter = jitter
        self.failures = 0  # in a row; 0: working
        self._since = 0.0  # when the first of them happened
        self._reminded = 0.0  # when the last line about it was logged
        self._kind: type[BaseException] | None = None  # the class of the error last logged

    @property
    def down(self) -> bool:
        return self.failures > 0

    def failed(self, exc: BaseException) -> float:
        """Note a failed try; log it if it changes the state (or a reminder is due). Returns the seconds to wait
        before the next try."""
        now = self.clock()
        self.failures += 1
        if self.failures == 1:
            self._since = now
            self._logged(exc, now, f"{self.what} failed; retrying with backoff")
        elif type(exc) is not self._kind:
            self._logged(exc, now, f"{self.what} failed again, another way; still retrying")
        elif now - self._reminded >= self.remind:
            self._reminded = now
            self.log.warning("%s still failing after %.0f s (%d failures): %s", self.what, now - self._since,
                             self.failures, _describe(exc))
        step = min(self.cap, self.base * 2 ** min(self.failures - 1, 30))
        return step / 2 + step / 2 * self.jitter()

    def succeeded(self) -> None:
        """Note a try that worked; logs "back" after an outage."""
        if not self.failures:
            return
        self.log.info("%s works again after %.1f s (%d failures)", self.what, self.clock() - self._since,
                      self.failures)
        self.failures = 0
        self._kind = None

    def _logged(self, exc: BaseException, now: float, message: str) -> None:
        self._kind = type(exc)
        self._reminded = now
        if isinstance(exc, DatabaseUnavailableError):
            self.log.warning("%s: %s", message, _describe(exc))
        else:
            self.log.error("%s: %s", message, _describe(exc), exc_info=exc)
