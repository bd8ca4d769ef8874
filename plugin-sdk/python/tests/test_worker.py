# Tests of the worker package under CPython: the API against worker.testing's fake host, and the
# component adapter (worker.component) against componentize-py's generated bindings, whose
# imports are stood in for here. scripts/test-python.sh generates those bindings and puts them
# on the path; without them (WORKER_BINDINGS unset) the adapter tests are skipped.
import os
import unittest
from unittest import mock

import worker
from worker import registry
from worker import kv, sql
from worker.testing import FakeHost, FakeSql, message

try:
    import wit_world  # noqa: F401
    from componentize_py_types import Err
    from wit_world.imports import host as wit_host
    from wit_world.imports import kv as wit_kv
    from wit_world.imports import sql as wit_sql
    from wit_world.imports import types as wit_types

    HAVE_BINDINGS = True
except ImportError:
    HAVE_BINDINGS = False
    if os.environ.get("WORKER_BINDINGS"):
        raise


class OutcomeTest(unittest.TestCase):
    def test_equality_and_repr(self):
        self.assertEqual(worker.ok(), worker.ok())
        self.assertEqual(worker.retry("x", after_ms=5), worker.retry("x", 5))
        self.assertNotEqual(worker.retry("x"), worker.retry("x", 5))
        self.assertNotEqual(worker.retry("x"), worker.fail("x"))
        self.assertEqual(repr(worker.retry("x", after_ms=5)), "retry('x', after_ms=5)")
        self.assertTrue(
            worker.fail("x").is_fail and worker.ok().is_ok and worker.retry("").is_retry
        )

    def test_after_ms_only_for_retry(self):
        with self.assertRaises(ValueError):
            worker.Outcome("fail", "x", 5)
        with self.assertRaises(ValueError):
            worker.retry("x", after_ms=-1)


class HandlerTest(unittest.TestCase):
    def test_none_is_ok_raise_and_return_answer(self):
        host = FakeHost()
        self.assertEqual(host.run(lambda m: None).outcome, worker.ok())
        self.assertEqual(host.run(lambda m: worker.fail("f")).outcome, worker.fail("f"))

        def raises(m):
            raise worker.retry("later", after_ms=100)

        self.assertEqual(host.run(raises).outcome, worker.retry("later", 100))

    def test_other_exceptions_escape_and_bad_answers_are_errors(self):
        def boom(m):
            raise KeyError("x")

        with self.assertRaises(KeyError):
            FakeHost().run(boom)
        with self.assertRaises(TypeError):
            FakeHost().run(lambda m: "ok")

    def test_one_handler_per_plugin(self):
        saved = registry._handler
        try:
            registry._handler = None
            with self.assertRaises(RuntimeError):
                registry.registered()

            def first(m):
                return None

            self.assertIs(worker.handler(first), first)
            self.assertIs(worker.handler(first), first)  # the same one again is fine
            with self.assertRaises(RuntimeError):
                worker.handler(lambda m: None)
        finally:
            registry._handler = saved

    def test_no_host_outside_a_component(self):
        with self.assertRaises(RuntimeError):
            worker.info("nobody listens")


class MessageTest(unittest.TestCase):
    def test_fields(self):
        m = message({"a": 1}, routing_key="k", headers={"h": "v"}, attempt=2)
        self.assertEqual(m.json(), {"a": 1})
        self.assertEqual(m.text, '{"a": 1}')
        self.assertEqual((m.routing_key, m.original_routing_key, m.attempt), ("k", "k", 2))
        self.assertEqual(m.header("h"), "v")
        self.assertIsNone(m.header("nope"))
        self.assertEqual(message("é").body, "é".encode())
        self.assertEqual(message(b"\x00").body, b"\x00")


class HostTest(unittest.TestCase):
    def test_logs_config_and_publishes(self):
        def handle(m):
            worker.trace("t")
            worker.warn(3)
            worker.log("error", "e")
            cfg = worker.config()
            worker.publish("ex", "k", "text", headers={"n": 1}, delay_ms=20)
            worker.publish_json("ex", "j", {"greeting": cfg["greeting"], "é": True})

        run = FakeHost(config={"greeting": "hi"}).run(handle)
        self.assertEqual(run.logs, [("trace", "t"), ("warn", "3"), ("error", "e")])
        self.assertTrue(run.logged("3", level="warn"))
        self.assertFalse(run.logged("3", level="info"))
        first, second = run.published
        self.assertEqual(
            (first.body, first.headers, first.delay_ms, first.content_type),
            (b"text", {"n": "1"}, 20, None),
        )
        self.assertEqual(second.content_type, "application/json")
        self.assertEqual(second.json(), {"greeting": "hi", "é": True})
        self.assertEqual(second.body, '{"greeting":"hi","é":true}'.encode())

    def test_config_text_and_empty(self):
        with FakeHost(config='{"a": [1]}'):
            self.assertEqual(worker.config(), {"a": [1]})
        with FakeHost(config=""):
            self.assertEqual(worker.config(), {})

    def test_bad_level_and_delay(self):
        with FakeHost():
            with self.assertRaises(ValueError):
                worker.log("fatal", "x")
            with self.assertRaises(ValueError):
                worker.publish("e", "k", b"", delay_ms=-1)

    def test_refusals(self):
        host = FakeHost(refuse_publish=lambda p: "too-large" if len(p.body) > 3 else None)
        with host:
            worker.publish("e", "k", b"abc")
            with self.assertRaises(worker.PublishError) as caught:
                worker.publish("e", "k", b"abcd")
        self.assertEqual(caught.exception.kind, "too-large")
        self.assertEqual(len(host.published), 1)

    def test_runs_keep_kv_but_not_logs(self):
        host = FakeHost(kv={})

        def handle(m):
            worker.info("n=%d" % kv.increment("n"))

        host.run(handle)
        run = host.run(handle)
        self.assertEqual(run.logs, [("info", "n=2")])


class KvTest(unittest.TestCase):
    def test_store(self):
        host = FakeHost(kv={"a": "1"})
        with host:
            self.assertEqual(kv.get("a"), b"1")
            self.assertEqual(kv.get_text("a"), "1")
            self.assertIsNone(kv.get("b"))
            kv.set("b", "x", ttl_ms=1000)
            self.assertEqual(host.kv["b"], b"x")
            self.assertEqual(host.kv_ttls["b"], 1000)
            self.assertEqual(kv.increment("a", 4), 5)
            self.assertEqual(kv.increment("c"), 1)
            self.assertFalse(kv.compare_and_swap("b", "y", "z"))
            self.assertTrue(kv.compare_and_swap("b", b"x", "z"))
            self.assertTrue(kv.compare_and_swap("new", None, "1"))
            self.assertFalse(kv.compare_and_swap("new", None, "2"))
            self.assertTrue(kv.delete("b"))
            self.assertFalse(kv.delete("b"))
            kv.set("word", "w")
            with self.assertRaises(worker.KvError) as caught:
                kv.increment("word")
            self.assertEqual(caught.exception.kind, "unavailable")

    def test_no_grant_is_denied(self):
        with FakeHost():
            with self.assertRaises(worker.KvError) as caught:
                kv.get("a")
        self.assertEqual((caught.exception.kind, str(caught.exception)), ("denied", "denied"))


class SqlTest(unittest.TestCase):
    def test_scripted_answers(self):
        db = (
            FakeSql()
            .on("SELECT name, age FROM users WHERE id = $1", (["name", "age"], [["ann", 41]]))
            .on("INSERT INTO seen (id) VALUES ($1)", 1)
            .on("INSERT INTO dup (id) VALUES ($1)", worker.SqlError("constraint", "dup key"))
            .on("SELECT $1", lambda params: (["v"], [params]))
        )
        with FakeHost(sql=db):
            rows = sql.query("SELECT name, age\n  FROM users WHERE id = $1", 7)
            self.assertEqual(rows.columns, ["name", "age"])
            self.assertEqual(list(rows), [("ann", 41)])
            self.assertEqual(rows.dicts(), [{"name": "ann", "age": 41}])
            self.assertEqual(rows.scalar(), "ann")
            self.assertEqual(len(rows), 1)
            self.assertEqual(sql.execute("INSERT INTO seen (id) VALUES ($1)", 7), 1)
            with self.assertRaises(worker.SqlError) as caught:
                sql.execute("INSERT INTO dup (id) VALUES ($1)", 7)
            self.assertEqual(
                (caught.exception.kind, caught.exception.detail), ("constraint", "dup key")
            )
            self.assertEqual(sql.query("SELECT $1", b"\x01").scalar(), b"\x01")
            with self.assertRaises(AssertionError):
                sql.query("SELECT 1")
        self.assertEqual(db.statements[0], ("SELECT name, age\n  FROM users WHERE id = $1", [7]))

    def test_params(self):
        self.assertEqual(
            sql.check_params([None, True, 1, 1.5, "s", bytearray(b"b")]),
            [None, True, 1, 1.5, "s", b"b"],
        )
        with self.assertRaises(TypeError):
            sql.check_params([object()])
        with self.assertRaises(OverflowError):
            sql.check_params([2**63])

    def test_no_grant_is_denied(self):
        with FakeHost():
            with self.assertRaises(worker.SqlError) as caught:
                sql.execute("DELETE FROM t")
        self.assertEqual(caught.exception.kind, "denied")


@unittest.skipUnless(
    HAVE_BINDINGS, "componentize-py bindings not on the path (scripts/test-python.sh)"
)
class ComponentAdapterTest(unittest.TestCase):
    """worker.component against the generated types, with the WIT imports stood in for."""

    def setUp(self):
        from worker import backend, component

        self.component = component
        self.previous = backend.install(component.Bindings())
        self.saved_handler = registry._handler
        self.calls = []

    def tearDown(self):
        from worker import backend

        backend.install(self.previous)
        registry._handler = self.saved_handler

    def delivery(self, body=b"{}"):
        return wit_types.Delivery(
            body=body,
            routing_key="q",
            original_routing_key="orig",
            exchange="ex",
            queue="q",
            message_id=None,
            correlation_id="c",
            content_type="application/json",
            timestamp=7,
            attempt=2,
            redelivered=True,
            headers=[wit_types.Header("a", "1"), wit_types.Header("b", "x")],
        )

    def test_handle_maps_delivery_and_outcomes(self):
        seen = []

        def handle(m):
            seen.append(m)
            return m.json()["answer"]

        registry._handler = handle
        export = self.component.WitWorld()
        answers = [
            (worker.ok(), wit_types.Outcome_Ok()),
            (worker.fail("bad"), wit_types.Outcome_Fail("bad")),
            (worker.retry("later"), wit_types.Outcome_Retry(wit_types.RetryRequest("later", None))),
            (
                worker.retry("soon", 250),
                wit_types.Outcome_Retry(wit_types.RetryRequest("soon", 250)),
            ),
        ]
        for ours, theirs in answers:
            with mock.patch.object(worker.Message, "json", lambda self, o=ours: {"answer": o}):
                self.assertEqual(export.handle(self.delivery()), theirs)
        m = seen[0]
        self.assertEqual(
            (m.routing_key, m.original_routing_key, m.attempt, m.redelivered, m.timestamp),
            ("q", "orig", 2, True, 7),
        )
        self.assertEqual(m.headers, {"a": "1", "b": "x"})
        self.assertIsNone(m.message_id)

    def test_host_calls(self):
        with (
            mock.patch.object(wit_host, "log", lambda lv, msg: self.calls.append((lv, msg))),
            mock.patch.object(wit_host, "config", lambda: '{"x": 1}'),
            mock.patch.object(wit_host, "publish", lambda o: self.calls.append(o)),
        ):
            worker.warn("careful")
            self.assertEqual(worker.config(), {"x": 1})
            worker.publish("ex", "k", "b", headers={"h": 2}, delay_ms=5)
        self.assertEqual(self.calls[0], (wit_host.Level.WARN, "careful"))
        self.assertEqual(
            self.calls[1],
            wit_types.Outgoing("ex", "k", b"b", None, [wit_types.Header("h", "2")], 5),
        )

    def test_publish_error_names(self):
        for member in wit_types.PublishError:

            def refuse(o, member=member):
                raise Err(member)

            with mock.patch.object(wit_host, "publish", refuse):
                with self.assertRaises(worker.PublishError) as caught:
                    worker.publish("ex", "k", b"")
            self.assertEqual(caught.exception.kind, member.name.lower().replace("_", "-"))
            self.assertIn(caught.exception.kind, worker.host.PUBLISH_ERRORS)

    def test_kv_calls_and_errors(self):
        with (
            mock.patch.object(wit_kv, "get", lambda k: b"v" if k == "a" else None),
            mock.patch.object(wit_kv, "compare_and_swap", lambda *a: self.calls.append(a) or True),
        ):
            self.assertEqual(kv.get("a"), b"v")
            self.assertIsNone(kv.get("b"))
            self.assertTrue(kv.compare_and_swap("a", None, "w", ttl_ms=3))
        self.assertEqual(self.calls, [("a", None, b"w", 3)])
        cases = [
            (wit_kv.KvError_Denied(), "denied", ""),
            (wit_kv.KvError_Unavailable("down"), "unavailable", "down"),
            (wit_kv.KvError_TooLarge(), "too-large", ""),
            (wit_kv.KvError_InvalidKey(), "invalid-key", ""),
        ]
        for err, kind, detail in cases:

            def refuse(*a, err=err):
                raise Err(err)

            with mock.patch.object(wit_kv, "increment", refuse):
                with self.assertRaises(worker.KvError) as caught:
                    kv.increment("n")
            self.assertEqual((caught.exception.kind, caught.exception.detail), (kind, detail))

    def test_sql_values_rows_and_errors(self):
        def query(statement, params):
            self.calls.append(params)
            return wit_sql.Rows(["a", "b"], [params, [wit_sql.Value_Null(), wit_sql.Value_Int(3)]])

        with (
            mock.patch.object(wit_sql, "query", query),
            mock.patch.object(wit_sql, "execute", lambda s, p: len(p)),
        ):
            rows = sql.query("SELECT", None, True, 2, 2.5, "t", b"b")
            self.assertEqual(sql.execute("UPDATE", 1, 2), 2)
        self.assertEqual(
            self.calls[0],
            [
                wit_sql.Value_Null(),
                wit_sql.Value_Boolean(True),
                wit_sql.Value_Int(2),
                wit_sql.Value_Float(2.5),
                wit_sql.Value_Text("t"),
                wit_sql.Value_Bytes(b"b"),
            ],
        )
        self.assertEqual(rows.rows, [(None, True, 2, 2.5, "t", b"b"), (None, 3)])
        for err, kind in [
            (wit_sql.SqlError_Denied(), "denied"),
            (wit_sql.SqlError_Unavailable("x"), "unavailable"),
            (wit_sql.SqlError_Constraint("x"), "constraint"),
            (wit_sql.SqlError_Invalid("x"), "invalid"),
            (wit_sql.SqlError_Other("x"), "other"),
        ]:

            def refuse(s, p, err=err):
                raise Err(err)

            with mock.patch.object(wit_sql, "execute", refuse):
                with self.assertRaises(worker.SqlError) as caught:
                    sql.execute("X")
            self.assertEqual(caught.exception.kind, kind)


if __name__ == "__main__":
    unittest.main()
