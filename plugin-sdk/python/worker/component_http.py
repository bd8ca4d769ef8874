# worker.http inside a component: one request through wasi:http/outgoing-handler, driven with
# wasi:io pollables (a handler call is synchronous, so it blocks on them instead of running an
# asyncio loop as componentize-py's poll_loop does). The generated modules are named by
# scripts/python.sh (--import-interface-name); calls go through their attributes, so the native
# tests can stand in for them.
#
# Resources are dropped child first (a pollable before its future, a stream before its body):
# the host refuses to drop a resource whose children are alive, which would trap.
from typing import Any, List, Optional, Tuple

from componentize_py_types import Err, Ok
from wit_world.imports import http_types, monotonic_clock, outgoing_handler, poll, streams

from .http import ERROR_CODES, Headers, HttpError, Request, Response, split_url

_CODES = {c.lower().replace("-", ""): c for c in ERROR_CODES}
_METHODS = {
    "GET": http_types.Method_Get,
    "HEAD": http_types.Method_Head,
    "POST": http_types.Method_Post,
    "PUT": http_types.Method_Put,
    "DELETE": http_types.Method_Delete,
    "CONNECT": http_types.Method_Connect,
    "OPTIONS": http_types.Method_Options,
    "TRACE": http_types.Method_Trace,
    "PATCH": http_types.Method_Patch,
}
_BODY_METHODS = ("POST", "PUT", "PATCH")
_CHUNK = 4096  # blocking-write-and-flush takes at most 4096 bytes a call
_READ = 64 * 1024


def error_from_wit(code: Any) -> HttpError:
    """A generated error-code value (ErrorCode_HttpRequestDenied(), ErrorCode_DnsError(payload))
    as an HttpError named as the WIT names it, with the payload as detail."""
    name = type(code).__name__.split("_", 1)[-1].lower()
    value = getattr(code, "value", None)
    detail = "" if value is None else _payload(value)
    return HttpError(_CODES.get(name, "internal-error"), detail)


def _payload(value: Any) -> str:
    if isinstance(value, (str, int)):
        return str(value)
    fields = getattr(value, "__dict__", {})
    return ", ".join(f"{k}={v}" for k, v in fields.items() if v is not None)


class Deadline:
    """The request's time limit (monotonic nanoseconds), or none."""

    def __init__(self, timeout: Optional[float]):
        self.at = None if timeout is None else monotonic_clock.now() + int(timeout * 1e9)

    def wait(self, pollable: Any) -> bool:
        """Blocks until `pollable` is ready (True) or the deadline passes (False)."""
        if self.at is None:
            pollable.block()
            return True
        left = self.at - monotonic_clock.now()
        if left <= 0:
            return pollable.ready()
        with monotonic_clock.subscribe_duration(left) as timer:
            return 0 in poll.poll([pollable, timer])


def send(req: Request) -> Response:
    """Sends `req` and reads the whole answer; HttpError when there is none."""
    scheme, authority, path = split_url(req.url)
    deadline = Deadline(req.timeout)
    outgoing = _outgoing(req, scheme, authority, path)
    body = outgoing.body()
    try:
        future = outgoing_handler.handle(outgoing, _options(req.timeout))
    except Err as e:
        body.__exit__(None, None, None)
        raise error_from_wit(e.value) from None
    with future:
        _write_body(body, req.body)
        with _await(future, deadline) as response:
            status = response.status()
            with response.headers() as fields:
                headers = Headers([(n, v.decode("latin-1")) for n, v in fields.entries()])
            data = _read_body(response.consume(), deadline)
    return Response(status, headers, data, url=req.url)


def _outgoing(req: Request, scheme: str, authority: str, path: str) -> Any:
    entries = [(n, v.encode("utf-8")) for n, v in req.headers.pairs]
    if "content-length" not in req.headers and (req.body or req.method in _BODY_METHODS):
        # Else wasi:http sends the body chunked, which some servers refuse (411) or misread.
        entries.append(("content-length", str(len(req.body)).encode()))
    try:
        fields = http_types.Fields.from_list(entries)
    except Err as e:
        why = type(e.value).__name__.split("_", 1)[-1]
        raise ValueError(f"http: headers refused ({why}): {[n for n, _ in entries]}") from None
    outgoing = http_types.OutgoingRequest(fields)
    known = _METHODS.get(req.method)
    method = known() if known else http_types.Method_Other(req.method)
    wire_scheme = http_types.Scheme_Https() if scheme == "https" else http_types.Scheme_Http()
    steps: List[Tuple[str, Any, Any]] = [
        ("HTTP-request-method-invalid", outgoing.set_method, method),
        ("HTTP-request-URI-invalid", outgoing.set_scheme, wire_scheme),
        ("HTTP-request-URI-invalid", outgoing.set_authority, authority),
        ("HTTP-request-URI-invalid", outgoing.set_path_with_query, path),
    ]
    for code, setter, value in steps:
        try:
            setter(value)
        except Err:
            outgoing.__exit__(None, None, None)
            raise HttpError(code, f"{value!r} refused") from None
    return outgoing


def _options(timeout: Optional[float]) -> Any:
    if timeout is None:
        return None
    ns = int(timeout * 1e9)
    options = http_types.RequestOptions()
    for setter in (
        options.set_connect_timeout,
        options.set_first_byte_timeout,
        options.set_between_bytes_timeout,
    ):
        try:
            setter(ns)
        except Err:
            pass  # the host keeps its own limit; the deadline still holds
    return options


def _write_body(body: Any, data: bytes) -> None:
    try:
        with body.write() as stream:
            for i in range(0, len(data), _CHUNK):
                stream.blocking_write_and_flush(data[i : i + _CHUNK])
    except Err as e:
        body.__exit__(None, None, None)
        raise _stream_error(e.value, "connection-terminated") from None
    try:
        http_types.OutgoingBody.finish(body, None)
    except Err as e:
        raise error_from_wit(e.value) from None


def _await(future: Any, deadline: Deadline) -> Any:
    with future.subscribe() as ready:
        if not deadline.wait(ready):
            raise HttpError("HTTP-response-timeout", "no answer within the timeout")
    got = future.get()
    if got is None or isinstance(got, Err):
        raise HttpError("internal-error", "the answer was not there when ready")
    inner = got.value if isinstance(got, Ok) else got
    if isinstance(inner, Err):
        raise error_from_wit(inner.value)
    return inner.value if isinstance(inner, Ok) else inner


def _read_body(incoming: Any, deadline: Deadline) -> bytes:
    chunks: List[bytes] = []
    with incoming:
        with incoming.stream() as stream:
            while True:
                try:
                    chunk = stream.read(_READ)
                except Err as e:
                    if isinstance(e.value, streams.StreamError_Closed):
                        break
                    raise _stream_error(e.value, "HTTP-response-incomplete") from None
                if chunk:
                    chunks.append(chunk)
                    continue
                with stream.subscribe() as more:
                    if not deadline.wait(more):
                        raise HttpError("HTTP-response-timeout", "the answer's body is late")
    return b"".join(chunks)


# wasmtime-wasi-http 48 keeps its own error type in a body stream's io error, which
# `http-error-code` does not recognise (it looks for the WIT error-code), so a body cut at
# http_max_response or a read timeout comes with only its text, as wasmtime writes it.
_TEXT_CODES = (
    ("HTTP response body size exceeds limit", "HTTP-response-body-size"),
    ("HTTP request body size exceeds limit", "HTTP-request-body-size"),
    ("connection read timeout", "connection-read-timeout"),
    ("connection write timeout", "connection-write-timeout"),
    ("connection terminated", "connection-terminated"),
    ("incomplete HTTP response", "HTTP-response-incomplete"),
)


def _stream_error(err: Any, fallback: str) -> HttpError:
    """A stream's last-operation-failed as the HTTP error it carries, else `fallback`."""
    if not isinstance(err, streams.StreamError_LastOperationFailed):
        return HttpError(fallback, "the stream closed")
    with err.value as io_error:
        code = http_types.http_error_code(io_error)
        if code is not None:
            return error_from_wit(code)
        text = io_error.to_debug_string()
    named = [c for words, c in _TEXT_CODES if words in text]
    return HttpError(named[0] if named else fallback, text)
