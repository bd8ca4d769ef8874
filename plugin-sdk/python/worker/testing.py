# A fake host for plain CPython: runs a handler on a made-up message and records what it did
# (logs, publishes), with an in-memory kv store, a scripted SQL database and canned HTTP answers.
import json
import re
from dataclasses import dataclass, field
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple, Union

from . import backend
from .registry import Handler, dispatch
from .host import PUBLISH_ERRORS, PublishError
from .http import HttpError, Request, Response
from .kv import KvError
from .message import Message
from .outcome import Outcome
from .sql import Rows, SqlError

__all__ = ["FakeHost", "FakeSql", "FakeHttp", "Run", "Published", "message"]


@dataclass
class Published:
    """One publish the handler asked for (the real host sends it only if the answer is ok)."""

    exchange: str
    routing_key: str
    body: bytes
    content_type: Optional[str] = None
    headers: Dict[str, str] = field(default_factory=dict)
    delay_ms: int = 0

    @property
    def text(self) -> str:
        return self.body.decode("utf-8")

    def json(self) -> Any:
        return json.loads(self.body)


@dataclass
class Run:
    """What one handler call did."""

    outcome: Outcome
    logs: List[Tuple[str, str]]
    published: List[Published]

    def logged(self, needle: str, level: Optional[str] = None) -> bool:
        """Whether a log line (of `level`, if given) contains `needle`."""
        return any(needle in m and (level is None or lv == level) for lv, m in self.logs)


def _body(body: Any) -> bytes:
    if isinstance(body, (bytes, bytearray, memoryview)):
        return bytes(body)
    if isinstance(body, str):
        return body.encode("utf-8")
    return json.dumps(body).encode("utf-8")  # dict, list, number...: as JSON


def message(body: Any = b"", **fields: Any) -> Message:
    """A Message: body as bytes, str (UTF-8) or anything else as JSON; fields as in Message."""
    fields.setdefault("routing_key", "test.key")
    fields.setdefault("exchange", "test-exchange")
    fields.setdefault("queue", "test-queue")
    return Message(_body(body), **fields)


# A scripted answer: Rows or (columns, rows) for a query, an int for execute, an exception to
# raise, or a callable(params) returning one of those.
Answer = Union[
    Rows, Tuple[Sequence[str], Sequence[Sequence[Any]]], int, Exception, Callable[[List[Any]], Any]
]


class FakeSql:
    """A database that answers statements as scripted; records every statement it ran.

        db = FakeSql()
        db.on("SELECT name FROM users WHERE id = $1", (["name"], [["ann"]]))
        db.on("INSERT INTO seen (id) VALUES ($1)", 1)
        db.on("INSERT INTO dup (id) VALUES ($1)", SqlError("constraint", "duplicate key"))

    Statements match exactly, with runs of whitespace counted as one space. An unscripted
    statement fails the test (AssertionError), as it means the script is incomplete.
    """

    def __init__(self) -> None:
        self._answers: Dict[str, Answer] = {}
        self.statements: List[Tuple[str, List[Any]]] = []

    @staticmethod
    def _key(statement: str) -> str:
        return " ".join(statement.split())

    def on(self, statement: str, answer: Answer) -> "FakeSql":
        self._answers[self._key(statement)] = answer
        return self

    def _answer(self, statement: str, params: List[Any]) -> Any:
        self.statements.append((statement, list(params)))
        key = self._key(statement)
        if key not in self._answers:
            raise AssertionError(f"FakeSql: no answer scripted for {key!r}")
        answer = self._answers[key]
        if callable(answer) and not isinstance(answer, (Rows, Exception)):
            answer = answer(list(params))
        if isinstance(answer, Exception):
            raise answer
        return answer

    def query(self, statement: str, params: List[Any]) -> Rows:
        answer = self._answer(statement, params)
        if isinstance(answer, Rows):
            return answer
        if isinstance(answer, tuple) and len(answer) == 2:
            return Rows(answer[0], answer[1])
        raise AssertionError(f"FakeSql: {statement!r} is scripted with {answer!r}, not rows")

    def execute(self, statement: str, params: List[Any]) -> int:
        answer = self._answer(statement, params)
        if isinstance(answer, bool) or not isinstance(answer, int):
            raise AssertionError(f"FakeSql: {statement!r} is scripted with {answer!r}, not a count")
        return answer


# A canned HTTP answer: a Response; an int (that status, no body); bytes or str (200 with that
# body); a dict or list (200 with it as JSON); an HttpError to raise; or a callable(Request)
# returning one of those.
HttpAnswer = Union[Response, int, bytes, str, Dict[str, Any], List[Any], HttpError, Callable]


class FakeHttp:
    """Answers HTTP requests as scripted; records every request (worker.http.Request) it got.

        web = FakeHttp()
        web.on("https://api.example/orders/7", {"id": 7, "state": "open"})
        web.on("https://api.example/orders", Response(201), method="POST")
        web.on(re.compile(r"^https://down\\.example/"), HttpError("connection-refused"))

    A URL matches exactly (without its fragment), or a compiled pattern matches with search();
    `method` (default: any) narrows a rule. The last rule added that matches answers. A request
    no rule matches fails the test (AssertionError): the script is incomplete.
    """

    def __init__(self) -> None:
        self._rules: List[Tuple[Any, Optional[str], HttpAnswer]] = []
        self.requests: List[Request] = []

    def on(self, url: Any, answer: HttpAnswer, *, method: Optional[str] = None) -> "FakeHttp":
        self._rules.append((url, None if method is None else method.upper(), answer))
        return self

    def _matches(self, rule: Any, method: Optional[str], req: Request) -> bool:
        if method is not None and method != req.method:
            return False
        if isinstance(rule, re.Pattern):
            return rule.search(req.url) is not None
        return rule == req.url.split("#", 1)[0]

    def send(self, req: Request) -> Response:
        self.requests.append(req)
        for url, method, answer in reversed(self._rules):
            if self._matches(url, method, req):
                break
        else:
            raise AssertionError(f"FakeHttp: no answer scripted for {req.method} {req.url}")
        if callable(answer) and not isinstance(answer, (Response, HttpError)):
            answer = answer(req)
        if isinstance(answer, HttpError):
            raise answer
        if isinstance(answer, Response):
            answer.url = answer.url or req.url
            return answer
        if isinstance(answer, bool) or answer is None:
            raise AssertionError(f"FakeHttp: {req.url} is scripted with {answer!r}")
        if isinstance(answer, int):
            return Response(answer, url=req.url)
        if isinstance(answer, (bytes, str)):
            return Response(200, body=answer, url=req.url)
        return Response(200, json=answer, url=req.url)


class FakeHost:
    """Stands in for worker-host under plain CPython.

    config: the subscription's config (a dict, or JSON text). kv: the granted store's contents
    ({key: bytes or str}); None means no kv grant, so every kv call raises KvError("denied"), as
    in the host. sql: a FakeSql; None means no grant (SqlError("denied")). http: a FakeHttp; None
    means no destination is allowed (HttpError("HTTP-request-denied")).
    refuse_publish: None, a WIT publish-error name ("not-allowed", ...) every publish gets, or a
    callable(Published) returning such a name or None.

    run() installs the host for one handler call; `with host:` installs it for any code.
    kv contents, kv_ttls, sql statements and http requests carry over between runs; logs and
    publishes are per run.
    """

    def __init__(
        self,
        config: Union[Dict[str, Any], str, None] = None,
        kv: Optional[Dict[str, Union[bytes, str]]] = None,
        sql: Optional[FakeSql] = None,
        refuse_publish: Union[str, Callable[[Published], Optional[str]], None] = None,
        http: Optional[FakeHttp] = None,
    ):
        self.config_text = config if isinstance(config, str) else json.dumps(config or {})
        self.kv: Optional[Dict[str, bytes]] = (
            None if kv is None else {k: _body(v) for k, v in kv.items()}
        )
        self.kv_ttls: Dict[str, Optional[int]] = {}
        self.sql = sql
        self.http = http
        self.refuse_publish = refuse_publish
        self.logs: List[Tuple[str, str]] = []
        self.published: List[Published] = []
        self._previous: List[Any] = []

    # --- running handlers -------------------------------------------------------------------
    def run(self, func: Handler, body: Any = b"", **fields: Any) -> Run:
        """Calls the handler with a message (a Message, or message(body, **fields)).

        An exception other than an Outcome escapes, as it would trap the component.
        """
        msg = body if isinstance(body, Message) else message(body, **fields)
        self.logs, self.published = [], []
        with self:
            outcome = dispatch(func, msg)
        return Run(outcome, self.logs, self.published)

    def __enter__(self) -> "FakeHost":
        self._previous.append(backend.install(self))
        return self

    def __exit__(self, *exc: Any) -> None:
        backend.install(self._previous.pop())

    # --- the backend interface (worker.backend) -----------------------------------------------
    def log(self, level: str, message: str) -> None:
        self.logs.append((level, message))

    def config(self) -> str:
        return self.config_text

    def publish(
        self,
        exchange: str,
        routing_key: str,
        body: bytes,
        content_type: Optional[str],
        headers: List[Tuple[str, str]],
        delay_ms: int,
    ) -> None:
        p = Published(exchange, routing_key, body, content_type, dict(headers), delay_ms)
        refusal = self.refuse_publish(p) if callable(self.refuse_publish) else self.refuse_publish
        if refusal is not None:
            if refusal not in PUBLISH_ERRORS:
                raise ValueError(f"refuse_publish: unknown publish error {refusal!r}")
            raise PublishError(refusal)
        self.published.append(p)

    def _store(self) -> Dict[str, bytes]:
        if self.kv is None:
            raise KvError("denied")
        return self.kv

    def kv_get(self, key: str) -> Optional[bytes]:
        return self._store().get(key)

    def kv_set(self, key: str, value: bytes, ttl_ms: Optional[int]) -> None:
        self._store()[key] = value
        self.kv_ttls[key] = ttl_ms

    def kv_delete(self, key: str) -> bool:
        self.kv_ttls.pop(key, None)
        return self._store().pop(key, None) is not None

    def kv_increment(self, key: str, delta: int) -> int:
        store = self._store()
        try:
            value = int(store.get(key, b"0")) + delta
        except ValueError:
            raise KvError("unavailable", f"{key} does not hold an integer") from None
        store[key] = str(value).encode()
        return value

    def kv_compare_and_swap(
        self, key: str, expected: Optional[bytes], value: bytes, ttl_ms: Optional[int]
    ) -> bool:
        store = self._store()
        if store.get(key) != expected:
            return False
        self.kv_set(key, value, ttl_ms)
        return True

    def _db(self) -> FakeSql:
        if self.sql is None:
            raise SqlError("denied")
        return self.sql

    def sql_query(self, statement: str, params: Sequence[Any]) -> Rows:
        return self._db().query(statement, list(params))

    def sql_execute(self, statement: str, params: Sequence[Any]) -> int:
        return self._db().execute(statement, list(params))

    def http_send(self, request: Request) -> Response:
        if self.http is None:
            raise HttpError("HTTP-request-denied", "no allowed_hosts in this FakeHost")
        return self.http.send(request)
