# Native (CPython) tests of the demo handler against worker.testing's fake host.
# Run: scripts/test-python.sh (or: PYTHONPATH=plugin-sdk/python python3 -m unittest -v, from here)
import contextlib
import io
import unittest

import app
import worker
from worker.http import HttpError, Response
from worker.testing import FakeHost, FakeHttp, FakeSql, message

ECHO = {"echo": {"exchange": "out", "routing_key": "echoed"}}


def audit_db(rows_after=1):
    """A database that takes the audit statements and counts rows_after rows."""
    return (
        FakeSql()
        .on(app.AUDIT_TABLE, 0)
        .on(app.AUDIT_ROW, 1)
        .on(app.AUDIT_COUNT, (["COUNT(*)"], [[rows_after]]))
    )


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
        self.assertEqual([line for line in run.logs if line[0] != "debug"], [("info", "hello")])
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
                "seen": None,
                "audited": None,
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



class CapabilitiesTest(unittest.TestCase):
    def setUp(self):
        app.count = 0

    def test_without_grants_it_answers_ok_and_says_so_at_debug(self):
        run = FakeHost().run(app.handle, {})
        self.assertEqual(run.outcome, worker.ok())
        self.assertTrue(run.logged("kv not granted", level="debug"))
        self.assertTrue(run.logged("sql not granted", level="debug"))

    def test_kv_counts_messages_per_original_routing_key(self):
        host = FakeHost(kv={})
        for key in ("a", "b", "a"):
            host.run(app.handle, {}, routing_key="q", original_routing_key=key)
        echoed = host.run(app.handle, ECHO, original_routing_key="a").published[0].json()
        self.assertEqual(echoed["seen"], 3)
        self.assertEqual(host.kv, {"seen:a": b"3", "seen:b": b"1"})

    def test_sql_writes_one_audit_row_per_message(self):
        db = audit_db(rows_after=5)
        run = FakeHost(sql=db).run(app.handle, ECHO, original_routing_key="k", message_id="m-1")
        self.assertEqual(run.published[0].json()["audited"], 5)
        self.assertEqual(
            [(s.split()[0], p) for s, p in db.statements],
            [("CREATE", []), ("INSERT", ["k", "m-1", 1, len(message(ECHO).body)]), ("SELECT", [])],
        )

    def test_a_store_or_database_down_is_a_retry(self):
        host = FakeHost(kv={})

        def down(key, delta):
            raise worker.KvError("unavailable", "connection refused")

        host.kv_increment = down
        self.assertEqual(
            host.run(app.handle, {}).outcome, worker.retry("kv unavailable: connection refused")
        )
        db = FakeSql().on(app.AUDIT_TABLE, worker.SqlError("unavailable", "db restarting"))
        run = FakeHost(sql=db).run(app.handle, {})
        self.assertEqual(run.outcome, worker.retry("sql unavailable: db restarting"))

    def test_a_broken_audit_table_fails(self):
        db = audit_db().on(app.AUDIT_ROW, worker.SqlError("invalid", "no column attempt"))
        run = FakeHost(sql=db).run(app.handle, {})
        self.assertEqual(run.outcome, worker.fail("audit: invalid: no column attempt"))
        raced = FakeSql().on(app.AUDIT_TABLE, worker.SqlError("constraint", "pg_type"))
        run = FakeHost(sql=raced).run(app.handle, {})
        self.assertEqual(run.outcome, worker.retry("audit: constraint: pg_type"))

    def test_http_answers_and_errors_go_into_the_echo(self):
        web = (
            FakeHttp()
            .on("http://api.test/ok", Response(201, body="made"), method="POST")
            .on("http://api.test/down", HttpError("connection-refused"))
        )
        host = FakeHost(http=web)
        req = {"url": "http://api.test/ok", "method": "POST", "body": "b", "headers": {"x": "1"}}
        run = host.run(app.handle, {**ECHO, "http": req})
        self.assertEqual(run.published[0].json()["http"], {"status": 201, "body": "made"})
        self.assertTrue(run.logged("http POST http://api.test/ok: 201", level="info"))
        self.assertEqual((web.requests[0].body, web.requests[0].headers["x"]), (b"b", "1"))
        run = host.run(app.handle, {**ECHO, "http": {"url": "http://api.test/down"}})
        self.assertEqual(run.published[0].json()["http"]["error"], "connection-refused")
        denied = FakeHost().run(app.handle, {**ECHO, "http": {"url": "http://api.test/ok"}})
        self.assertEqual(denied.published[0].json()["http"]["error"], "HTTP-request-denied")
        self.assertEqual(denied.outcome, worker.ok())


if __name__ == "__main__":
    unittest.main()
