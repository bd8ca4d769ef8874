# The handler's answer: ok, retry (with an optional delay) or fail, as in the WIT `outcome`.
from typing import Optional

OK = "ok"
RETRY = "retry"
FAIL = "fail"


class Outcome(Exception):
    """What a handler answers for one message.

    An exception too, so code deep in a call stack can `raise worker.fail("...")` instead of
    threading a return value back up; `return` works the same.
    """

    def __init__(self, kind: str, reason: str = "", after_ms: Optional[int] = None):
        if kind not in (OK, RETRY, FAIL):
            raise ValueError(f"outcome kind must be ok, retry or fail, not {kind!r}")
        if after_ms is not None and (kind != RETRY or after_ms < 0):
            raise ValueError("after_ms is a non-negative delay, only for retry")
        super().__init__(kind, reason, after_ms)
        self.kind = kind
        self.reason = reason
        self.after_ms = after_ms

    @property
    def is_ok(self) -> bool:
        return self.kind == OK

    @property
    def is_retry(self) -> bool:
        return self.kind == RETRY

    @property
    def is_fail(self) -> bool:
        return self.kind == FAIL

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Outcome):
            return NotImplemented
        return (self.kind, self.reason, self.after_ms) == (other.kind, other.reason, other.after_ms)

    def __hash__(self) -> int:
        return hash((self.kind, self.reason, self.after_ms))

    def __repr__(self) -> str:
        if self.kind == OK:
            return "ok()"
        if self.kind == FAIL:
            return f"fail({self.reason!r})"
        if self.after_ms is None:
            return f"retry({self.reason!r})"
        return f"retry({self.reason!r}, after_ms={self.after_ms})"

    __str__ = __repr__


def ok() -> Outcome:
    """Done: the message is acked, buffered publishes are sent, the SQL transaction commits."""
    return Outcome(OK)


def retry(reason: str, after_ms: Optional[int] = None) -> Outcome:
    """Try again later: after `after_ms`, or the subscription's retry_delays when None."""
    return Outcome(RETRY, str(reason), after_ms)


def fail(reason: str) -> Outcome:
    """Give up on this message: it goes to the dead-letter path, no retry."""
    return Outcome(FAIL, str(reason))
