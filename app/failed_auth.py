"""Failed authentication, limited per client address: guessing the API token is not free.

Every wrong credential (a bearer token, a login form's token, a run's token, a stale login cookie on a page that
needs the token) counts against the address it came from. After ``TINYGPT_AUTH_FAILURES_ALLOWED`` of them, that
address is answered 429 with ``Retry-After`` for any request whose credential would decide it: 1 s, then twice as
long after each further failure (up to 15 minutes); a right credential from it ends the count, and so do
``FORGET_AFTER_SEC`` without a failure. Other addresses are never slowed. Each failure is logged with the address,
never what was presented. The counts live in the app's process (one per app process: behind several, each
counts its own), for at most ``MAX_ADDRESSES`` addresses (the oldest forgotten first).

>>> limits = FailedAuth(allowed=2, clock=lambda: 0.0)
>>> limits.failed("10.0.0.9"), limits.failed("10.0.0.9"), limits.retry_after("10.0.0.9"), limits.retry_after("10.0.0.8")
(None, 1, 1, None)
"""

from __future__ import annotations

import logging
import math
import time
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass

from .errors import TooManyRequests

log = logging.getLogger("tinygpt.auth")
FORGET_AFTER_SEC = 3600.0  # an address with no failure for an hour starts afresh
MAX_BLOCK_SEC = 900.0
MAX_ADDRESSES = 10_000


@dataclass
class Failures:
    count: int = 0
    last: float = 0.0
    blocked_until: float = 0.0


class FailedAuth:
    """Failed authentications per client address (see the module docstring)."""

    def __init__(self, *, allowed: int, clock: Callable[[], float] = time.monotonic) -> None:
        self.allowed = allowed
        self.clock = clock
        self.addresses: OrderedDict[str, Failures] = OrderedDict()

    def _current(self, address: str) -> Failures | None:
        seen = self.addresses.get(address)
        if seen is not None and self.clock() - seen.last > FORGET_AFTER_SEC:
            del self.addresses[address]
            return None
        return seen

    def retry_after(self, address: str) -> int | None:
        """Whole seconds until ``address`` may try again; None when it may now."""
        seen = self._current(address)
        wait = 0.0 if seen is None else seen.blocked_until - self.clock()
        return math.ceil(wait) if wait > 0 else None

    def check(self, address: str) -> None:
        """429 with ``Retry-After`` while ``address`` is blocked."""
        wait = self.retry_after(address)
        if wait is not None:
            raise TooManyRequests(f"too many failed authentications from {address}: try again in {wait} s",
                                  retry_after=wait)

    def failed(self, address: str) -> int | None:
        """Count a failure; the seconds ``address`` is now blocked for, None while it has failures left."""
        seen = self._current(address) or Failures()
        now = self.clock()
        seen.count += 1
        seen.last = now
        self.addresses[address] = seen
        self.addresses.move_to_end(address)
        while len(self.addresses) > MAX_ADDRESSES:
            self.addresses.popitem(last=False)
        block = None
        if seen.count >= self.allowed:
            block = min(MAX_BLOCK_SEC, 2.0 ** (seen.count - self.allowed))
            seen.blocked_until = now + block
        log.warning("failed authentication from %s (%d in a row)%s", address, seen.count,
                    f"; refused for {block:g} s" if block is not None else "")
        return None if block is None else math.ceil(block)

    def succeeded(self, address: str) -> None:
        """A right credential from ``address``: its count starts afresh."""
        self.addresses.pop(address, None)
