# The backend inside a component: componentize-py's generated bindings (wit_world, from
# wit/worker-plugin.wit and plugin-sdk/python/wit's wasi:http imports) behind worker's
# plain-Python calls, and the world's export. Calls go through the modules' attributes
# (wit_host.publish, not a bound name), so the native tests can stand in for the imports.
from typing import Any, List, Optional, Sequence, Tuple

import wit_world
from componentize_py_types import Err
from wit_world.imports import host as wit_host
from wit_world.imports import kv as wit_kv
from wit_world.imports import sql as wit_sql
from wit_world.imports import types

from . import component_http, registry
from .host import PublishError
from .http import Request, Response
from .kv import KvError
from .message import Message
from .outcome import FAIL, OK, Outcome
from .sql import Rows, SqlError

_LEVELS = {
    "trace": wit_host.Level.TRACE,
    "debug": wit_host.Level.DEBUG,
    "info": wit_host.Level.INFO,
    "warn": wit_host.Level.WARN,
    "error": wit_host.Level.ERROR,
}


def _wit_name(enum_member: Any) -> str:
    return enum_member.name.lower().replace("_", "-")


def _case(variant: Any) -> Tuple[str, str]:
    """A generated variant value (KvError_InvalidKey(), SqlError_Other("x")) as (kind, text)."""
    name = type(variant).__name__.split("_", 1)[1]
    kind = "".join("-" + c.lower() if c.isupper() else c for c in name).lstrip("-")
    return kind, str(getattr(variant, "value", ""))


def to_sql_value(v: Any) -> Any:
    if v is None:
        return wit_sql.Value_Null()
    if isinstance(v, bool):
        return wit_sql.Value_Boolean(v)
    if isinstance(v, int):
        return wit_sql.Value_Int(v)
    if isinstance(v, float):
        return wit_sql.Value_Float(v)
    if isinstance(v, str):
        return wit_sql.Value_Text(v)
    return wit_sql.Value_Bytes(bytes(v))


def from_sql_value(v: Any) -> Any:
    return None if isinstance(v, wit_sql.Value_Null) else v.value


def to_outcome(o: Outcome) -> Any:
    if o.kind == OK:
        return types.Outcome_Ok()
    if o.kind == FAIL:
        return types.Outcome_Fail(o.reason)
    return types.Outcome_Retry(types.RetryRequest(o.reason, o.after_ms))


class Bindings:
    """worker's backend interface over the WIT imports."""

    def log(self, level: str, message: str) -> None:
        wit_host.log(_LEVELS[level], message)

    def config(self) -> str:
        return wit_host.config()

    def publish(
        self,
        exchange: str,
        routing_key: str,
        body: bytes,
        content_type: Optional[str],
        headers: List[Tuple[str, str]],
        delay_ms: int,
    ) -> None:
        message = types.Outgoing(
            exchange,
            routing_key,
            body,
            content_type,
            [types.Header(n, v) for n, v in headers],
            delay_ms,
        )
        try:
            wit_host.publish(message)
        except Err as e:
            raise PublishError(_wit_name(e.value)) from None

    def kv_get(self, key: str) -> Optional[bytes]:
        return self._kv(wit_kv.get, key)

    def kv_set(self, key: str, value: bytes, ttl_ms: Optional[int]) -> None:
        self._kv(wit_kv.set, key, value, ttl_ms)

    def kv_delete(self, key: str) -> bool:
        return self._kv(wit_kv.delete, key)

    def kv_increment(self, key: str, delta: int) -> int:
        return self._kv(wit_kv.increment, key, delta)

    def kv_compare_and_swap(
        self, key: str, expected: Optional[bytes], value: bytes, ttl_ms: Optional[int]
    ) -> bool:
        return self._kv(wit_kv.compare_and_swap, key, expected, value, ttl_ms)

    def sql_query(self, statement: str, params: Sequence[Any]) -> Rows:
        rows = self._sql(wit_sql.query, statement, params)
        return Rows(rows.columns, [[from_sql_value(v) for v in r] for r in rows.rows])

    def sql_execute(self, statement: str, params: Sequence[Any]) -> int:
        return self._sql(wit_sql.execute, statement, params)

    def http_send(self, request: Request) -> Response:
        return component_http.send(request)

    @staticmethod
    def _kv(call: Any, *args: Any) -> Any:
        try:
            return call(*args)
        except Err as e:
            raise KvError(*_case(e.value)) from None

    @staticmethod
    def _sql(call: Any, statement: str, params: Sequence[Any]) -> Any:
        try:
            return call(statement, [to_sql_value(p) for p in params])
        except Err as e:
            raise SqlError(*_case(e.value)) from None


class WitWorld(wit_world.WitWorld):
    """The world's export `handle`: a delivery in, the registered handler's outcome out."""

    def handle(self, message: types.Delivery) -> types.Outcome:
        outcome = registry.dispatch(registry.registered(), Message.from_delivery(message))
        return to_outcome(outcome)
