# Tests of worker.http under CPython: the API against worker.testing's FakeHttp, and the component
# side (worker.component_http) against componentize-py's generated bindings, with the wasi:http
# resources stood in for by fakes that check they are dropped child first, as the host demands.
import os
import re
import unittest
from unittest import mock

import worker
from worker import http
from worker.http import Headers, HttpError, Request, Response
from worker.testing import FakeHost, FakeHttp

try:
    from componentize_py_types import Err, Ok
    from wit_world.imports import http_types, monotonic_clock, outgoing_handler, poll, streams

    HAVE_BINDINGS = True
except ImportError:
    HAVE_BINDINGS = False
    if os.environ.get("WORKER_BINDINGS"):
        raise


class ApiTest(unittest.TestCase):
    def test_get_json_and_the_request_recorded(self):
        web = FakeHttp().on("https://api.example/orders/7", {"id": 7})
        with FakeHost(http=web):
            answer = http.get("https://api.example/orders/7#frag", headers={"Accept": "x"})
        self.assertTrue(answer.ok)
        self.assertEqual((answer.status, answer.json()), (200, {"id": 7}))
        self.assertEqual(answer.headers["Content-Type"], "application/json")
        [req] = web.requests
        self.assertEqual((req.method, req.body, req.timeout), ("GET", b"", None))
        self.assertEqual(req.headers["accept"], "x")

    def test_post_body_json_and_timeout(self):
        web = FakeHttp().on("http://h/x", lambda req: Response(201, body=req.body[::-1]))
        with FakeHost(http=web):
            self.assertEqual(http.post("http://h/x", "abc").text, "cba")
            http.post("http://h/x", json={"é": 1}, timeout=2)
            http.put("http://h/x", b"\x00", headers=[("content-type", "a/b")])
            http.request("patch", "http://h/x", json=[1], headers={"Content-Type": "text/x"})
        second, third, fourth = web.requests[1:]
        self.assertEqual(second.json(), {"é": 1})
        self.assertEqual(second.headers["content-type"], "application/json")
        self.assertEqual(second.timeout, 2.0)
        self.assertEqual((third.method, third.body), ("PUT", b"\x00"))
        self.assertEqual(fourth.method, "PATCH")
        self.assertEqual(fourth.headers.get_all("content-type"), ["text/x"])

    def test_rules_method_pattern_last_wins_errors(self):
        web = (
            FakeHttp()
            .on(re.compile(r"^https://api\.example/"), 500)
            .on("https://api.example/a", "created", method="post")
            .on("https://down.example/", HttpError("connection-refused"))
        )
        with FakeHost(http=web):
            self.assertEqual(http.get("https://api.example/a").status, 500)
            answer = http.post("https://api.example/a")
            self.assertEqual((answer.status, answer.text), (200, "created"))
            with self.assertRaises(HttpError) as caught:
                http.get("https://down.example/")
            self.assertEqual(caught.exception.code, "connection-refused")
            with self.assertRaises(AssertionError):
                http.get("https://elsewhere.example/")
        self.assertEqual(len(web.requests), 4)

    def test_no_grant_is_denied(self):
        with FakeHost():
            with self.assertRaises(worker.HttpError) as caught:
                http.get("https://api.example/")
        self.assertTrue(caught.exception.denied)
        self.assertEqual(caught.exception.code, "HTTP-request-denied")

    def test_refused_before_sending(self):
        web = FakeHttp()
        with FakeHost(http=web):
            for url in ("api.example/x", "ftp://h/", "http:///x", "http://u:p@h/", "http://h/a b"):
                with self.assertRaises(HttpError) as caught:
                    http.get(url)
                self.assertEqual(caught.exception.code, "HTTP-request-URI-invalid", url)
            with self.assertRaises(HttpError) as caught:
                http.request("GE T", "http://h/")
            self.assertEqual(caught.exception.code, "HTTP-request-method-invalid")
            with self.assertRaises(ValueError):
                http.post("http://h/", "x", json=1)
            with self.assertRaises(ValueError):
                http.get("http://h/", timeout=0)
        self.assertEqual(web.requests, [])

    def test_split_url(self):
        self.assertEqual(
            http.split_url("HTTPS://api.example:8443/v1/o?id=7#top"),
            ("https", "api.example:8443", "/v1/o?id=7"),
        )
        self.assertEqual(http.split_url("http://h?x=1"), ("http", "h", "/?x=1"))
        self.assertEqual(http.split_url("http://h"), ("http", "h", "/"))

    def test_headers_response_and_errors(self):
        h = Headers([("Set-Cookie", "a"), ("set-cookie", "b"), ("X", "1")])
        self.assertEqual((h["SET-COOKIE"], h.get_all("set-cookie")), ("a, b", ["a", "b"]))
        self.assertEqual((list(h), len(h)), (["set-cookie", "x"], 2))
        self.assertEqual(("x" in h, h.get("nope")), (True, None))
        self.assertEqual(Headers({"A": "1"}), {"a": "1"})
        r = Response(404, {"A": "b"}, "nö")
        self.assertEqual((r.ok, r.text, r.body), (False, "nö", "nö".encode()))
        with self.assertRaises(ValueError):
            Response(99)
        with self.assertRaises(ValueError):
            Response(200, body=b"{").json()
        self.assertEqual(HttpError("http-request-denied").code, "HTTP-request-denied")
        self.assertTrue(HttpError("destination-IP-prohibited").denied)
        self.assertFalse(HttpError("connection-refused").denied)
        self.assertEqual(str(HttpError("DNS-error", "rcode=x")), "DNS-error: rcode=x")
        with self.assertRaises(ValueError):
            HttpError("teapot")
        self.assertEqual(len(set(http.ERROR_CODES)), 39)


class Drops:
    """Records which fake resource is dropped when, to check children go before parents."""

    def __init__(self):
        self.order = []


class Res:
    """A fake resource: dropped by __exit__ once, after its children."""

    def __init__(self, drops, name, parent=None):
        self.drops, self.name, self.children, self.dropped = drops, name, [], False
        if parent is not None:
            parent.children.append(self)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        assert not self.dropped, f"{self.name} dropped twice"
        alive = [c.name for c in self.children if not c.dropped]
        assert not alive, f"{self.name} dropped before its children {alive}"
        self.dropped = True
        self.drops.order.append(self.name)


@unittest.skipUnless(
    HAVE_BINDINGS, "componentize-py bindings not on the path (scripts/test-python.sh)"
)
class ComponentHttpTest(unittest.TestCase):
    """worker.component_http.send against stand-ins for the wasi:http, io and clock imports."""

    def setUp(self):
        from worker import backend, component, component_http

        self.ch = component_http
        self.previous = backend.install(component.Bindings())
        self.drops = Drops()
        self.sent = {}

    def tearDown(self):
        from worker import backend

        backend.install(self.previous)

    def fakes(
        self,
        status=200,
        chunks=(b"he", b"", b"llo"),
        answer=None,
        read_error=None,
        write_error=None,
    ):
        """Patches the imports; `answer` replaces the future's result (e.g. Ok(Err(code)))."""
        test, drops = self, self.drops

        class Stream(Res):
            def blocking_write_and_flush(self, data):
                assert len(data) <= 4096
                if write_error is not None:
                    raise Err(write_error)
                test.sent.setdefault("body", b"")
                test.sent["body"] += data

            def read(self, n):
                if self.left:
                    return self.left.pop(0)
                if read_error is not None:
                    raise Err(read_error)
                raise Err(streams.StreamError_Closed())

            def subscribe(self):
                return Pollable(drops, "body-ready", self)

        class Pollable(Res):
            def block(self):
                pass

            def ready(self):
                return True

        class OutgoingRequest(Res):
            def __init__(self, fields):
                super().__init__(drops, "request")
                test.sent["headers"] = fields

            def set_method(self, m):
                test.sent["method"] = m

            def set_scheme(self, s):
                test.sent["scheme"] = s

            def set_authority(self, a):
                test.sent["authority"] = a

            def set_path_with_query(self, p):
                test.sent["path"] = p

            def body(self):
                return Body(drops, "out-body")

        class Body(Res):
            def write(self):
                return Stream(drops, "out-stream", self)

            def stream(self):
                s = Stream(drops, "in-stream", self)
                s.left = list(chunks)
                return s

        class Response(Res):
            def status(self):
                return status

            def headers(self):
                fields = Res(drops, "response-headers", self)
                fields.entries = lambda: [("content-type", b"text/plain"), ("x-a", b"1")]
                return fields

            def consume(self):
                return Body(drops, "in-body", self)

        class Future(Res):
            def subscribe(self):
                return Pollable(drops, "future-ready", self)

            def get(self):
                return answer if answer is not None else Ok(Ok(Response(drops, "response", self)))

        def handle(request, options):
            test.sent["options"] = options
            return Future(drops, "future")

        def finish(body, trailers):
            drops.order.append("out-body")

        patches = [
            mock.patch.object(http_types.Fields, "from_list", classmethod(lambda cls, e: e)),
            mock.patch.object(http_types, "OutgoingRequest", OutgoingRequest),
            mock.patch.object(http_types.OutgoingBody, "finish", staticmethod(finish)),
            mock.patch.object(outgoing_handler, "handle", handle),
        ]
        for p in patches:
            p.start()
            self.addCleanup(p.stop)

    def test_a_post_goes_out_and_its_answer_comes_back(self):
        self.fakes()
        answer = http.post("https://api.example:8443/o?x=1", b"a" * 5000, headers={"X": "é"})
        self.assertEqual((answer.status, answer.body, answer.headers["x-a"]), (200, b"hello", "1"))
        self.assertEqual(self.sent["method"], http_types.Method_Post())
        self.assertEqual(self.sent["scheme"], http_types.Scheme_Https())
        self.assertEqual(self.sent["authority"], "api.example:8443")
        self.assertEqual(self.sent["path"], "/o?x=1")
        self.assertEqual(self.sent["headers"], [("X", "é".encode()), ("content-length", b"5000")])
        self.assertEqual((self.sent["body"], self.sent["options"]), (b"a" * 5000, None))
        self.assertEqual(
            self.drops.order,
            ["out-stream", "out-body", "future-ready", "response-headers", "body-ready",
             "in-stream", "in-body", "response", "future"],
        )  # fmt: skip

    def test_content_length_unless_given_or_bodiless(self):
        self.fakes()
        http.get("http://h/")
        self.assertEqual(self.sent["headers"], [])
        http.post("http://h/")
        self.assertEqual(self.sent["headers"], [("content-length", b"0")])
        http.put("http://h/", "abc", headers={"Content-Length": "3"})
        self.assertEqual(self.sent["headers"], [("Content-Length", b"3")])

    def test_a_server_that_stops_reading_the_body(self):
        self.fakes(write_error=streams.StreamError_Closed())
        with self.assertRaises(HttpError) as caught:
            http.post("http://h/", b"x" * 10)
        self.assertEqual(caught.exception.code, "connection-terminated")
        self.assertEqual(self.drops.order, ["out-stream", "out-body", "future"])

    def test_an_error_code_becomes_http_error(self):
        self.fakes(answer=Ok(Err(http_types.ErrorCode_HttpRequestDenied())))
        with self.assertRaises(HttpError) as caught:
            http.get("http://h/")
        self.assertEqual(caught.exception.code, "HTTP-request-denied")
        self.assertEqual(self.drops.order[-1], "future")

    def test_a_broken_body_stream_names_the_http_error(self):
        io_error = Res(self.drops, "io-error")
        self.fakes(read_error=streams.StreamError_LastOperationFailed(io_error))
        size = http_types.ErrorCode_HttpResponseBodySize(1 << 20)
        with mock.patch.object(http_types, "http_error_code", lambda e: size):
            with self.assertRaises(HttpError) as caught:
                http.get("http://h/")
        self.assertEqual(caught.exception.code, "HTTP-response-body-size")
        self.assertEqual(caught.exception.detail, str(1 << 20))
        self.assertIn("io-error", self.drops.order)

    def test_a_body_error_known_only_by_its_text(self):
        io_error = Res(self.drops, "io-error")
        io_error.to_debug_string = lambda: "HTTP response body size exceeds limit: 5120 bytes"
        self.fakes(read_error=streams.StreamError_LastOperationFailed(io_error))
        with mock.patch.object(http_types, "http_error_code", lambda e: None):
            with self.assertRaises(HttpError) as caught:
                http.get("http://h/")
        self.assertEqual(caught.exception.code, "HTTP-response-body-size")
        self.assertIn("5120 bytes", caught.exception.detail)

    def test_timeout_sets_options_and_bounds_the_wait(self):
        self.fakes()
        options = []

        class Options:
            def __init__(self):
                options.append(self)

            def set_connect_timeout(self, ns):
                self.ns = ns

            def set_first_byte_timeout(self, ns):
                raise Err(None)  # refused: the deadline still holds

            set_between_bytes_timeout = set_connect_timeout

        def timer(ns):
            return Res(self.drops, f"timer {ns}")

        with (
            mock.patch.object(http_types, "RequestOptions", Options),
            mock.patch.object(monotonic_clock, "now", lambda: 0),
            mock.patch.object(monotonic_clock, "subscribe_duration", timer),
            mock.patch.object(poll, "poll", lambda ps: [1]),
        ):
            with self.assertRaises(HttpError) as caught:
                http.get("http://h/", timeout=1.5)
        self.assertEqual(caught.exception.code, "HTTP-response-timeout")
        self.assertEqual(options[0].ns, 1_500_000_000)
        self.assertIn("timer 1500000000", self.drops.order)
        self.assertEqual(self.drops.order[-1], "future")

    def test_every_wit_error_code_has_its_name(self):
        classes = [getattr(http_types, n) for n in dir(http_types) if n.startswith("ErrorCode_")]
        self.assertEqual(len(classes), len(http.ERROR_CODES))
        names = set()
        for cls in classes:
            try:
                value = cls()
            except TypeError:
                value = cls(None)
            names.add(self.ch.error_from_wit(value).code)
        self.assertEqual(names, set(http.ERROR_CODES))
        payload = http_types.DnsErrorPayload("NXDOMAIN", None)
        error = self.ch.error_from_wit(http_types.ErrorCode_DnsError(payload))
        self.assertEqual((error.code, error.detail), ("DNS-error", "rcode=NXDOMAIN"))


if __name__ == "__main__":
    unittest.main()
