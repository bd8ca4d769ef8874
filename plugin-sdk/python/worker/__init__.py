# worker: write a worker-host handler in Python (world worker:plugin/handler@2.0.0).
"""Handlers for worker-host in Python.

    import worker

    @worker.handler
    def handle(msg: worker.Message):
        order = msg.json()
        worker.info(f"order {order['id']} on {msg.routing_key}")
        worker.publish_json("events", "order.seen", {"id": order["id"]})
        return worker.ok()  # or None; worker.retry(reason, after_ms=...), worker.fail(reason)

Inside a component the calls go to the host; under plain CPython to a worker.testing.FakeHost.
"""

from . import http, kv, sql
from .registry import handler
from .host import (
    LEVELS,
    PublishError,
    config,
    debug,
    error,
    info,
    log,
    publish,
    publish_json,
    trace,
    warn,
)
from .http import HttpError
from .kv import KvError
from .message import Message
from .outcome import Outcome, fail, ok, retry
from .sql import Rows, SqlError

__all__ = [
    "handler",
    "Message",
    "Outcome",
    "ok",
    "retry",
    "fail",
    "publish",
    "publish_json",
    "PublishError",
    "config",
    "log",
    "trace",
    "debug",
    "info",
    "warn",
    "error",
    "LEVELS",
    "kv",
    "KvError",
    "sql",
    "SqlError",
    "Rows",
    "http",
    "HttpError",
]
