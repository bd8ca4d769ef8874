# Outbound HTTP, requests-style, over wasi:http/outgoing-handler (componentize-py's runtime has no
# urllib, no sockets). The host sends a request only to the subscription's allowed_hosts; it
# follows no redirect and caps the answer's size. Under plain CPython, worker.testing's FakeHost
# answers with canned responses.
#
#     answer = worker.http.post("https://api.example/orders", json={"id": 7}, timeout=5)
#     if not answer.ok:
#         return worker.retry(f"api answered {answer.status}")
#     order = answer.json()
import json as _json
from dataclasses import dataclass, field
from collections.abc import Mapping
from typing import Any, Dict, Iterable, Iterator, List, Optional, Tuple, Union

from . import backend

__all__ = [
    "HttpError",
    "Headers",
    "Request",
    "Response",
    "request",
    "get",
    "head",
    "delete",
    "options",
    "post",
    "put",
    "patch",
    "ERROR_CODES",
]

# The wasi:http `error-code` cases, as the WIT spells them (HttpError.code is one of these).
ERROR_CODES = (
    "DNS-timeout",
    "DNS-error",
    "destination-not-found",
    "destination-unavailable",
    "destination-IP-prohibited",
    "destination-IP-unroutable",
    "connection-refused",
    "connection-terminated",
    "connection-timeout",
    "connection-read-timeout",
    "connection-write-timeout",
    "connection-limit-reached",
    "TLS-protocol-error",
    "TLS-certificate-error",
    "TLS-alert-received",
    "HTTP-request-denied",
    "HTTP-request-length-required",
    "HTTP-request-body-size",
    "HTTP-request-method-invalid",
    "HTTP-request-URI-invalid",
    "HTTP-request-URI-too-long",
    "HTTP-request-header-section-size",
    "HTTP-request-header-size",
    "HTTP-request-trailer-section-size",
    "HTTP-request-trailer-size",
    "HTTP-response-incomplete",
    "HTTP-response-header-section-size",
    "HTTP-response-header-size",
    "HTTP-response-body-size",
    "HTTP-response-trailer-section-size",
    "HTTP-response-trailer-size",
    "HTTP-response-transfer-coding",
    "HTTP-response-content-coding",
    "HTTP-response-timeout",
    "HTTP-upgrade-failed",
    "HTTP-protocol-error",
    "loop-detected",
    "configuration-error",
    "internal-error",
)
_BY_LOWER = {c.lower(): c for c in ERROR_CODES}

HeadersIn = Union[Mapping[str, Any], Iterable[Tuple[str, Any]], None]
Body = Union[bytes, bytearray, memoryview, str, None]


class HttpError(Exception):
    """A request that got no answer. `code` is the wasi:http error-code name: "HTTP-request-denied"
    (no grant for this destination), "connection-refused", "HTTP-response-timeout",
    "HTTP-response-body-size" (answer larger than the host allows), ...; `detail` adds what is
    known ("" when nothing). An answer with a 4xx or 5xx status is not an error: see Response.ok."""

    def __init__(self, code: str, detail: str = ""):
        known = _BY_LOWER.get(code.lower())
        if known is None:
            raise ValueError(f"unknown wasi:http error code {code!r}")
        super().__init__(f"{known}: {detail}" if detail else known)
        self.code = known
        self.detail = detail

    @property
    def denied(self) -> bool:
        """Whether the host refused the destination: not in the subscription's allowed_hosts
        (HTTP-request-denied), or a name resolving to a loopback, private or link-local address
        that is not itself allowed (destination-IP-prohibited)."""
        return self.code in ("HTTP-request-denied", "destination-IP-prohibited")


class Headers(Mapping[str, str]):
    """Header fields, looked up without regard to case; a name given several times reads as its
    values joined with ", " (get_all() gives them one by one)."""

    def __init__(self, pairs: HeadersIn = None):
        self.pairs: List[Tuple[str, str]] = _pairs(pairs)

    def get_all(self, name: str) -> List[str]:
        name = name.lower()
        return [v for n, v in self.pairs if n.lower() == name]

    def __getitem__(self, name: str) -> str:
        values = self.get_all(name)
        if not values:
            raise KeyError(name)
        return ", ".join(values)

    def __iter__(self) -> Iterator[str]:
        seen: Dict[str, None] = {}
        for n, _ in self.pairs:
            seen.setdefault(n.lower())
        return iter(seen)

    def __len__(self) -> int:
        return len({n.lower() for n, _ in self.pairs})

    def __eq__(self, other: object) -> bool:
        if isinstance(other, Mapping):
            return dict(self.items()) == {str(k).lower(): v for k, v in other.items()}
        return NotImplemented

    def __repr__(self) -> str:
        return f"Headers({self.pairs!r})"


@dataclass
class Request:
    """A request as it goes to the host (and as FakeHost records it)."""

    method: str
    url: str
    headers: Headers = field(default_factory=Headers)
    body: bytes = b""
    timeout: Optional[float] = None

    @property
    def text(self) -> str:
        return self.body.decode("utf-8", errors="replace")

    def json(self) -> Any:
        return _json.loads(self.body)


class Response:
    """An answer, whatever its status: `status`, `headers` (Headers), `body` (bytes), `text`,
    `json()`, `ok` (2xx)."""

    def __init__(
        self,
        status: int = 200,
        headers: HeadersIn = None,
        body: Body = b"",
        *,
        json: Any = None,
        url: str = "",
    ):
        if not 100 <= int(status) <= 999:
            raise ValueError(f"an HTTP status is 100..999, not {status}")
        self.status = int(status)
        self.headers = headers if isinstance(headers, Headers) else Headers(headers)
        if json is not None:
            body = _json.dumps(json, separators=(",", ":")).encode("utf-8")
            if "content-type" not in self.headers:
                self.headers.pairs.append(("content-type", "application/json"))
        self.body = _bytes(body)
        self.url = url

    @property
    def ok(self) -> bool:
        return 200 <= self.status < 300

    @property
    def text(self) -> str:
        """The body decoded as UTF-8 (bytes that are not become U+FFFD)."""
        return self.body.decode("utf-8", errors="replace")

    def json(self) -> Any:
        """The body parsed as JSON (ValueError if it is not)."""
        return _json.loads(self.body)

    def __repr__(self) -> str:
        return f"<Response {self.status} {len(self.body)} bytes>"


def request(
    method: str,
    url: str,
    *,
    headers: HeadersIn = None,
    body: Body = None,
    json: Any = None,
    timeout: Optional[float] = None,
) -> Response:
    """Sends a request and reads the whole answer. `body` is bytes or str (UTF-8); `json` a value
    sent as JSON (content-type application/json unless headers set one). `timeout` in seconds
    bounds the whole exchange, up to the answer's last byte; the handler's own timeout bounds it
    in any case. Raises HttpError when no answer comes; a 4xx or 5xx answer is returned."""
    method = method.upper()
    if not method or not all(c.isalnum() or c in "!#$%&'*+-.^_`|~" for c in method):
        raise HttpError("HTTP-request-method-invalid", repr(method))
    split_url(url)
    hdrs = Headers(headers)
    if json is not None:
        if body is not None:
            raise ValueError("give body or json, not both")
        body = _json.dumps(json, separators=(",", ":"), ensure_ascii=False)
        if "content-type" not in hdrs:
            hdrs.pairs.append(("content-type", "application/json"))
    if timeout is not None and not timeout > 0:
        raise ValueError(f"timeout must be > 0 seconds, not {timeout!r}")
    req = Request(method, url, hdrs, _bytes(body), None if timeout is None else float(timeout))
    return backend.current().http_send(req)


def get(url: str, **kw: Any) -> Response:
    return request("GET", url, **kw)


def head(url: str, **kw: Any) -> Response:
    return request("HEAD", url, **kw)


def delete(url: str, **kw: Any) -> Response:
    return request("DELETE", url, **kw)


def options(url: str, **kw: Any) -> Response:
    return request("OPTIONS", url, **kw)


def post(url: str, body: Body = None, **kw: Any) -> Response:
    return request("POST", url, body=body, **kw)


def put(url: str, body: Body = None, **kw: Any) -> Response:
    return request("PUT", url, body=body, **kw)


def patch(url: str, body: Body = None, **kw: Any) -> Response:
    return request("PATCH", url, body=body, **kw)


def split_url(url: str) -> Tuple[str, str, str]:
    """(scheme, authority, path with query) of an absolute http:// or https:// URL, as wasi:http
    takes them; the fragment is not sent. HttpError HTTP-request-URI-invalid otherwise."""

    def invalid(why: str) -> HttpError:
        return HttpError("HTTP-request-URI-invalid", f"{why}: {url!r}")

    scheme, sep, rest = url.partition("://")
    if not sep:
        raise invalid("not an absolute URL")
    scheme = scheme.lower()
    if scheme not in ("http", "https"):
        raise invalid("not http or https")
    rest = rest.split("#", 1)[0]
    end = min([i for i in (rest.find("/"), rest.find("?")) if i >= 0], default=len(rest))
    authority, path = rest[:end], rest[end:]
    if not authority or "@" in authority or any(c.isspace() for c in url):
        raise invalid("no host, credentials or spaces in the URL")
    return scheme, authority, path if path.startswith("/") else "/" + path


def _pairs(headers: HeadersIn) -> List[Tuple[str, str]]:
    if headers is None:
        return []
    if isinstance(headers, Headers):
        return list(headers.pairs)
    items = headers.items() if isinstance(headers, Mapping) else headers
    out = []
    for name, value in items:
        if isinstance(value, (bytes, bytearray)):
            value = bytes(value).decode("latin-1")
        out.append((str(name), str(value)))
    return out


def _bytes(body: Body) -> bytes:
    if body is None:
        return b""
    if isinstance(body, str):
        return body.encode("utf-8")
    return bytes(body)
