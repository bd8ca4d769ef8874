# Native (CPython) tests of the demo handler against worker.testing's fake host.
# Run: scripts/test-python.sh (or: PYTHONPATH=plugin-sdk/python python3 -m unittest -v, from here)
import contextlib
import io
import unittest

import app
import worker
from worker.testing import FakeHost, message


class DemoTest(unittest.TestCase):
    def setUp(self):
        app.count = 0  # a fresh instance

    def test_empty_object_is_ok(self):
        self.assertEqual(FakeHost().run(app.handle, {}).outcome, worker.ok())

    def test_not_an_object_fails(self):
        for body in (b"", b"[1]", b"42", b"nope", b"\xff"):
            run = FakeHost().run(app.handle, body)
            self.assertEqual(run.outcome, worker.fail("not a JSON object"), body)

    def test_log_and_print(self):
        out = io.StringIO()
        with contextlib.redirect_stdout(out):
            run = FakeHost().run(app.handle, {"log": "hello", "print": "printed"})
        self.assertEqual(run.logs, [("info", "hello")])
        self.assertEqual(out.getvalue(), "printed\n")

    def test_outcomes(self):
        host = FakeHost()
        cases = [
            ({"outcome": "ok"}, worker.ok()),
            ({"outcome": "retry"}, worker.retry("requested")),
            ({"outcome": "retry", "reason": "busy", "after_ms": 1500}, worker.retry("busy", 1500)),
            ({"outcome": "fail", "reason": "bad", "after_ms": 9}, worker.fail("bad")),
            ({"outcome": "maybe"}, worker.fail("unknown outcome: maybe")),
        ]
        for body, want in cases:
            self.assertEqual(host.run(app.handle, body).outcome, want, body)

    def test_echo_publishes_the_delivery_as_json(self):
        host = FakeHost(config={"greeting": "hi", "n": 2})
        body = {"echo": {"exchange": "out", "routing_key": "echoed"}}
        run = host.run(
            app.handle,
            body,
            routing_key="q.retry",
            original_routing_key="demo.key",
            attempt=3,
            message_id="m-1",
            headers={"x-trace": "abc"},
        )
        self.assertEqual(run.outcome, worker.ok())
        [p] = run.published
        self.assertEqual(
            (p.exchange, p.routing_key, p.content_type, p.delay_ms),
            ("out", "echoed", "application/json", 0),
        )
        self.assertEqual(
            p.json(),
            {
                "config": {"greeting": "hi", "n": 2},
                "count": 1,
                "attempt": 3,
                "routing_key": "q.retry",
                "original_routing_key": "demo.key",
                "message_id": "m-1",
                "headers": {"x-trace": "abc"},
                "body_len": len(message(body).body),
            },
        )

    def test_count_goes_up_per_call_and_message_id_may_be_null(self):
        host = FakeHost()
        body = {"echo": {"exchange": "out", "routing_key": "echoed"}}
        host.run(app.handle, {})
        echoed = host.run(app.handle, body).published[0].json()
        self.assertEqual(echoed["count"], 2)
        self.assertIsNone(echoed["message_id"])
        self.assertEqual(echoed["config"], {})

    def test_publish_each(self):
        body = {
            "publish": [
                {"exchange": "a", "routing_key": "k1", "body": "one"},
                {"exchange": "b", "routing_key": "k2", "body": "two", "delay_ms": 5000},
            ]
        }
        run = FakeHost().run(app.handle, body)
        self.assertEqual(run.outcome, worker.ok())
        self.assertEqual(
            [(p.exchange, p.routing_key, p.text, p.delay_ms) for p in run.published],
            [("a", "k1", "one", 0), ("b", "k2", "two", 5000)],
        )

    def test_refused_publish_fails_with_the_wit_name(self):
        body = {"publish": [{"exchange": "x", "routing_key": "k", "body": "b", "delay_ms": 10}]}
        for kind in ("not-allowed", "delay-refused", "too-many", "too-large", "invalid"):
            run = FakeHost(refuse_publish=kind).run(app.handle, body)
            self.assertEqual(run.outcome, worker.fail(f"publish refused: {kind}"))

    def test_publish_comes_before_the_outcome(self):
        body = {"publish": [{"exchange": "x", "routing_key": "k", "body": "b"}], "outcome": "retry"}
        run = FakeHost().run(app.handle, body)
        self.assertEqual(run.outcome, worker.retry("requested"))
        self.assertEqual(len(run.published), 1)

    def test_trap_raises(self):
        with self.assertRaises(RuntimeError):
            FakeHost().run(app.handle, {"trap": True, "outcome": "ok"})

    def test_grow_touches_every_page(self):
        block = app.grow(2)
        self.assertEqual(len(block), 2 * 1024 * 1024)
        self.assertEqual(sum(block), 512)
        self.assertEqual(FakeHost().run(app.handle, {"grow_mb": 1}).outcome, worker.ok())


if __name__ == "__main__":
    unittest.main()
