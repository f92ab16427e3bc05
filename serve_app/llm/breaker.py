"""A small circuit breaker: stop calling an LLM that keeps failing, probe it later.

closed -> (``failures`` consecutive failures) -> open -> (``reset_s`` later) ->
half-open: one trial call; success closes it, failure opens it again.
"""

from __future__ import annotations

import time
from collections.abc import Callable


class CircuitOpen(RuntimeError):
    """The breaker refuses calls for now (the LLM failed repeatedly)."""


class CircuitBreaker:
    def __init__(
        self, failures: int, reset_s: float, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self.failures = max(1, failures)
        self.reset_s = reset_s
        self._clock = clock
        self._consecutive = 0
        self._opened_at: float | None = None
        self._trial_in_flight = False

    @property
    def state(self) -> str:
        if self._opened_at is None:
            return "closed"
        if self._clock() - self._opened_at >= self.reset_s:
            return "half-open"
        return "open"

    def before_call(self) -> None:
        """Raise :class:`CircuitOpen` unless a call may go out now."""
        state = self.state
        if state == "open":
            raise CircuitOpen("LLM circuit open")
        if state == "half-open":
            if self._trial_in_flight:
                raise CircuitOpen("LLM circuit half-open, trial call in flight")
            self._trial_in_flight = True

    def success(self) -> None:
        self._consecutive = 0
        self._opened_at = None
        self._trial_in_flight = False

    def failure(self) -> None:
        self._consecutive += 1
        self._trial_in_flight = False
        if self._opened_at is not None or self._consecutive >= self.failures:
            self._opened_at = self._clock()

    def neutral(self) -> None:
        """The endpoint answered but refused this request (4xx): not an outage, so it
        neither counts toward opening nor closes; a half-open trial slot is freed."""
        self._trial_in_flight = False
