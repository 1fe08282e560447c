"""Exponential backoff with jitter, shared by every retrying component (Java's ``ExponentialBackoff``).

Sans-I/O: the caller counts attempts and adds the result to its own ``now_ms``.
"""

from __future__ import annotations

import math
import random
from collections.abc import Callable

__all__ = ["ExponentialBackoff"]


class ExponentialBackoff:
    """``initial * multiplier**attempts`` capped at ``max_ms``, times a jitter factor in [1-j, 1+j)."""

    def __init__(
        self,
        initial_ms: int,
        max_ms: int,
        *,
        multiplier: float = 2.0,
        jitter: float = 0.2,
        rand: Callable[[], float] = random.random,
    ) -> None:
        self.initial_ms = max(0, initial_ms)
        self.max_ms = max(self.initial_ms, max_ms)
        self.multiplier = multiplier
        self.jitter = jitter
        self._rand = rand
        if self.initial_ms > 0 and self.max_ms > self.initial_ms:
            self._exp_max = math.log(self.max_ms / self.initial_ms) / math.log(multiplier)
        else:
            self._exp_max = 0.0

    def backoff_ms(self, attempts: int) -> int:
        """Backoff after ``attempts + 1`` consecutive failures (``attempts`` = 0 for the first)."""
        if self.initial_ms == 0:
            return 0
        exp = min(float(max(0, attempts)), self._exp_max)
        term = self.initial_ms * self.multiplier**exp
        factor = 1.0 if self.jitter <= 0 else 1.0 - self.jitter + 2.0 * self.jitter * self._rand()
        return min(self.max_ms, int(term * factor))

    def after_failures(self, failures: int) -> int:
        """Backoff after ``failures`` consecutive failures (1 = the first failure); 0 when none."""
        return 0 if failures <= 0 else self.backoff_ms(failures - 1)
