"""A circuit breaker that stops a run whose judge server keeps failing.

Without it, a server that went down mid-run costs every remaining item its full retry schedule
(tens of seconds each) and fills the cache with failures. The breaker counts items (one criterion
score, one likelihood, one generation) and trips on either of two rules:

- **consecutive outages**: ``max_consecutive`` items in a row failed because the server could not
  be used at all: connection errors, timeouts and HTTP 5xx/408/409/429 after the client's retries,
  and HTTP 401/403/404 (bad key, unknown model or wrong URL), which no retry fixes. Any other
  reply shows the server is up and resets this count: a reply that cannot be read as a score, or
  the refusal of a prompt longer than the context, is a problem of that item, not of the server.
- **failure share**: more than ``max_share`` of all items failed, for any reason (outages and bad
  replies alike) but a prompt longer than the context, once at least ``min_items`` were tried.
  This catches a server that answers but whose answers are mostly unusable.

A server that answers nothing at all for ``llm.timeout`` seconds trips it at once (:meth:`trip`).

Once tripped it stays tripped: :meth:`CircuitBreaker.check` raises
:class:`~hdeval.errors.JudgeUnavailableError` on every later call, so no further work is sent.

The count of outages in a row is reset when the server answers again: it may have been restarted,
maybe on other weights. :attr:`CircuitBreaker.resets` counts these resets, so that the backend
checks the server's identity again after each one before it keeps any answer.
"""

from __future__ import annotations

import threading

from hdeval.errors import ConfigError, JudgeUnavailableError

MIN_ITEMS_FOR_SHARE = 20


class CircuitBreaker:
    """Thread-safe failure counters of one judge server, and the two rules that trip on them."""

    def __init__(
        self,
        server: str,
        max_consecutive: int = 8,
        max_share: float = 0.5,
        min_items: int = MIN_ITEMS_FOR_SHARE,
    ) -> None:
        if max_consecutive < 1:
            raise ConfigError(
                f"llm.max_consecutive_failures must be at least 1, got {max_consecutive}"
            )
        if not 0 < max_share <= 1:
            raise ConfigError(f"llm.max_failure_share must be in (0, 1], got {max_share}")
        self.server = server
        self.max_consecutive = max_consecutive
        self.max_share = max_share
        self.min_items = min_items
        self.items = self.succeeded = self.failed = self.consecutive = 0
        self.last_failure: str | None = None
        self._message: str | None = None
        self.resets = 0  # times the server answered again after at least one outage
        self._lock = threading.Lock()

    @property
    def tripped(self) -> bool:
        return self._message is not None

    def record(self, failure: str | None, outage: bool = False) -> None:
        """Count one finished item: ``failure`` None for a success; ``outage`` when the server
        could not be used at all (see the module docstring)."""
        with self._lock:
            self.items += 1
            if failure is None:
                self.succeeded += 1
                self._answered()
                return
            self.failed += 1
            self.last_failure = failure
            if outage:
                self.consecutive += 1
            else:
                self._answered()
            why = self._rule_broken()
            if why is not None and self._message is None:
                self._message = self._compose(why, failure)

    def record_refusal(self) -> None:
        """An item the server refused as longer than its context: it answered, so the count of
        outages in a row starts again, and the item is that item's problem, not the server's:
        it counts towards neither rule."""
        with self._lock:
            self._answered()

    def _answered(self) -> None:
        """The server answered: the count of outages in a row is reset (called under the lock)."""
        if self.consecutive:
            self.resets += 1
        self.consecutive = 0

    def _rule_broken(self) -> str | None:
        if self.consecutive >= self.max_consecutive:
            return (
                f"{self.consecutive} items in a row failed without a usable answer from the "
                f"server (llm.max_consecutive_failures is {self.max_consecutive})"
            )
        share = self.failed / self.items
        if self.items >= self.min_items and share > self.max_share:
            return (
                f"{self.failed} of {self.items} items failed ({share:.0%}, more than "
                f"llm.max_failure_share {self.max_share:g})"
            )
        return None

    def trip(self, why: str, failure: str) -> None:
        """Trip now, for a reason found outside the counters (the server cannot be reached)."""
        with self._lock:
            self.last_failure = failure
            if self._message is None:
                self._message = self._compose(why, failure)

    def _compose(self, why: str, failure: str) -> str:
        return (
            f"the judge at {self.server} is unavailable: {why}; last error: {failure}; "
            f"{self.succeeded} of {self.items} items succeeded before this "
            "(results returned before this error are kept); no further requests are sent"
        )

    def check(self) -> None:
        """Raise :class:`JudgeUnavailableError` if the breaker has tripped."""
        if self._message is not None:
            raise JudgeUnavailableError(self._message)
