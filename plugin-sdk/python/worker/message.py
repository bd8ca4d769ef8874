# The delivery a handler receives: body and AMQP properties as plain Python values.
import json
from typing import Any, Dict, Iterable, Optional


class Message:
    """One delivery. Attributes mirror the WIT `delivery` record; `headers` is a dict."""

    __slots__ = (
        "body",
        "routing_key",
        "original_routing_key",
        "exchange",
        "queue",
        "message_id",
        "correlation_id",
        "content_type",
        "timestamp",
        "attempt",
        "redelivered",
        "headers",
    )

    def __init__(
        self,
        body: bytes = b"",
        routing_key: str = "",
        original_routing_key: Optional[str] = None,
        exchange: str = "",
        queue: str = "",
        message_id: Optional[str] = None,
        correlation_id: Optional[str] = None,
        content_type: Optional[str] = None,
        timestamp: Optional[int] = None,
        attempt: int = 1,
        redelivered: bool = False,
        headers: Optional[Dict[str, str]] = None,
    ):
        self.body = bytes(body)
        self.routing_key = routing_key
        # A first delivery's original key is its own key.
        self.original_routing_key = (
            routing_key if original_routing_key is None else original_routing_key
        )
        self.exchange = exchange
        self.queue = queue
        self.message_id = message_id
        self.correlation_id = correlation_id
        self.content_type = content_type
        self.timestamp = timestamp
        self.attempt = attempt
        self.redelivered = redelivered
        self.headers = dict(headers or {})

    @classmethod
    def from_delivery(cls, d: Any) -> "Message":
        """From the generated `Delivery` (or anything with its attributes)."""
        return cls(
            body=d.body,
            routing_key=d.routing_key,
            original_routing_key=d.original_routing_key,
            exchange=d.exchange,
            queue=d.queue,
            message_id=d.message_id,
            correlation_id=d.correlation_id,
            content_type=d.content_type,
            timestamp=d.timestamp,
            attempt=d.attempt,
            redelivered=d.redelivered,
            headers=headers_dict(d.headers),
        )

    @property
    def text(self) -> str:
        """The body as UTF-8 text (UnicodeDecodeError if it is not)."""
        return self.body.decode("utf-8")

    def json(self) -> Any:
        """The body parsed as JSON (json.JSONDecodeError / ValueError if it is not)."""
        return json.loads(self.body)

    def header(self, name: str, default: Optional[str] = None) -> Optional[str]:
        return self.headers.get(name, default)

    def __repr__(self) -> str:
        return (
            f"Message(routing_key={self.routing_key!r}, attempt={self.attempt}, "
            f"body={self.body[:64]!r}{'...' if len(self.body) > 64 else ''})"
        )


def headers_dict(headers: Iterable[Any]) -> Dict[str, str]:
    """WIT `list<header>` to a dict (AMQP header names are unique; a repeat keeps the last)."""
    return {h.name: h.value for h in headers}
