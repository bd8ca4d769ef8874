# The WIT `kv` interface: key-value state in the store the subscription is granted (`kv = "NAME"`).
# Writes take effect at once; they are not part of the message's transaction.
from typing import Optional, Union

from . import backend

Value = Union[bytes, bytearray, memoryview, str]

# The WIT `kv-error` cases.
KV_ERRORS = ("denied", "unavailable", "too-large", "invalid-key")


class KvError(Exception):
    """A refused kv call. `kind` is the WIT case ("denied": no grant); `detail` the host's text
    for "unavailable", else ""."""

    def __init__(self, kind: str, detail: str = ""):
        if kind not in KV_ERRORS:
            raise ValueError(f"unknown kv error {kind!r}")
        super().__init__(f"{kind}: {detail}" if detail else kind)
        self.kind = kind
        self.detail = detail


def _bytes(value: Value) -> bytes:
    return value.encode("utf-8") if isinstance(value, str) else bytes(value)


def get(key: str) -> Optional[bytes]:
    """The value, or None when the key is absent."""
    return backend.current().kv_get(key)


def get_text(key: str) -> Optional[str]:
    value = get(key)
    return None if value is None else value.decode("utf-8")


def set(key: str, value: Value, ttl_ms: Optional[int] = None) -> None:  # noqa: A001 (WIT name)
    """Stores `value` (str as UTF-8), expiring after ttl_ms when given."""
    backend.current().kv_set(key, _bytes(value), ttl_ms)


def delete(key: str) -> bool:
    """Removes the key; whether it existed."""
    return backend.current().kv_delete(key)


def increment(key: str, delta: int = 1) -> int:
    """Adds delta to the counter (an absent key counts as 0); the new value."""
    return backend.current().kv_increment(key, delta)


def compare_and_swap(
    key: str, expected: Optional[Value], value: Value, ttl_ms: Optional[int] = None
) -> bool:
    """Writes `value` only if the current value is `expected` (None: only if absent)."""
    exp = None if expected is None else _bytes(expected)
    return backend.current().kv_compare_and_swap(key, exp, _bytes(value), ttl_ms)
