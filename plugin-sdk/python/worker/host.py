# The WIT `host` interface as functions: logging, the subscription's config, publishing.
import json
from typing import Any, Dict, Optional, Union

from . import backend

LEVELS = ("trace", "debug", "info", "warn", "error")

# The WIT `publish-error` names, as the host and the logs spell them.
PUBLISH_ERRORS = ("not-allowed", "delay-refused", "too-many", "too-large", "invalid")

Body = Union[bytes, bytearray, memoryview, str]


class PublishError(Exception):
    """The host refused a publish; `kind` is the WIT name (e.g. "not-allowed")."""

    def __init__(self, kind: str):
        if kind not in PUBLISH_ERRORS:
            raise ValueError(f"unknown publish error {kind!r}")
        super().__init__(kind)
        self.kind = kind


def log(level: str, message: Any) -> None:
    """A log line in the host, tagged with the plugin; level is one of LEVELS."""
    if level not in LEVELS:
        raise ValueError(f"log level must be one of {LEVELS}, not {level!r}")
    backend.current().log(level, str(message))


def trace(message: Any) -> None:
    log("trace", message)


def debug(message: Any) -> None:
    log("debug", message)


def info(message: Any) -> None:
    log("info", message)


def warn(message: Any) -> None:
    log("warn", message)


def error(message: Any) -> None:
    log("error", message)


def config() -> Dict[str, Any]:
    """The subscription's `config` table, parsed ({} when it has none)."""
    text = backend.current().config()
    return json.loads(text) if text.strip() else {}


def publish(
    exchange: str,
    routing_key: str,
    body: Body,
    *,
    content_type: Optional[str] = None,
    headers: Optional[Dict[str, Any]] = None,
    delay_ms: int = 0,
) -> None:
    """Buffers a message, sent only if the handler answers ok. Raises PublishError if refused.

    A str body is sent as UTF-8; header values are sent as text (str() of each).
    """
    if isinstance(body, str):
        body = body.encode("utf-8")
    if delay_ms < 0:
        raise ValueError("delay_ms must not be negative")
    pairs = [(str(k), str(v)) for k, v in (headers or {}).items()]
    backend.current().publish(
        exchange, routing_key, bytes(body), content_type, pairs, int(delay_ms)
    )


def publish_json(
    exchange: str,
    routing_key: str,
    value: Any,
    *,
    headers: Optional[Dict[str, Any]] = None,
    delay_ms: int = 0,
) -> None:
    """publish() of `value` as compact JSON with content type application/json."""
    body = json.dumps(value, separators=(",", ":"), ensure_ascii=False)
    publish(
        exchange,
        routing_key,
        body,
        content_type="application/json",
        headers=headers,
        delay_ms=delay_ms,
    )
