# Native (CPython) tests of order-service: worker.testing's FakeHost, with the plugin's SQL run on
# a real SQLite database in memory (one transaction per message, committed only on ok, as in the
# host), and FakeSql for the errors a database may answer.
# Run: scripts/test-python.sh (or: PYTHONPATH=.:../../plugin-sdk/python python3 -m unittest -v)
import sqlite3
import unittest

import app
import worker
from worker.testing import FakeHost, FakeSql

EXCHANGE = "order-event-exchange"


class SqliteDb:
    """The FakeSql interface on sqlite3: `$1` placeholders are SQLite's own named parameters."""

    def __init__(self):
        self.conn = sqlite3.connect(":memory:", isolation_level=None)
        self.statements = []

    @staticmethod
    def _params(params):
        return {str(i + 1): p for i, p in enumerate(params)}

    def _run(self, statement, params):
        self.statements.append((statement, list(params)))
        try:
            return self.conn.execute(statement, self._params(params))
        except sqlite3.IntegrityError as e:
            raise worker.SqlError("constraint", str(e)) from None
        except sqlite3.OperationalError as e:
            raise worker.SqlError("invalid", str(e)) from None

    def query(self, statement, params):
        cur = self._run(statement, params)
        return worker.Rows([d[0] for d in cur.description or []], cur.fetchall())

    def execute(self, statement, params):
        return self._run(statement, params).rowcount

    def status(self, order_id):
        rows = self.conn.execute("SELECT status FROM orders WHERE order_id = ?", (order_id,))
        row = rows.fetchone()
        return row and row[0]


class Shop:
    """The order service on one database: deliver() is one message, in its own transaction."""

    def __init__(self):
        self.db = SqliteDb()
        self.host = FakeHost(sql=self.db)

    def deliver(self, key, body, **fields):
        self.db.conn.execute("BEGIN")
        run = self.host.run(app.handle, body, routing_key=key, exchange=EXCHANGE, **fields)
        self.db.conn.execute("COMMIT" if run.outcome == worker.ok() else "ROLLBACK")
        return run

    def create(self, order_id="o-1", sku="book", qty=2):
        return self.deliver("order.create.order", {"order_id": order_id, "sku": sku, "qty": qty})

    def pay(self, order_id="o-1"):
        return self.deliver("order.pay", {"order_id": order_id})

    def release(self, order_id="o-1"):
        # As order.delay.queue dead-letters it: the create message with the key replaced.
        body = {"order_id": order_id, "sku": "book", "qty": 2}
        return self.deliver("order.release.order", body, queue="order@release")


class OrderFlowTest(unittest.TestCase):
    def setUp(self):
        self.shop = Shop()

    def test_create_stores_an_unpaid_order(self):
        run = self.shop.create()
        self.assertEqual(run.outcome, worker.ok())
        self.assertTrue(run.logged("order o-1 created: 2 x book, unpaid", level="info"))
        row = self.shop.db.conn.execute("SELECT order_id, sku, qty, status FROM orders").fetchall()
        self.assertEqual(row, [("o-1", "book", 2, "unpaid")])
        self.assertEqual(run.published, [])

    def test_create_twice_keeps_the_first(self):
        self.shop.create(qty=2)
        self.shop.pay()
        run = self.shop.create(qty=5)
        self.assertEqual(run.outcome, worker.ok())
        self.assertTrue(run.logged("order o-1 exists already (paid): create ignored"))
        rows = self.shop.db.conn.execute("SELECT qty, status FROM orders").fetchall()
        self.assertEqual(rows, [(2, "paid")])

    def test_an_unpaid_order_is_closed_and_its_stock_released_once(self):
        self.shop.create()
        run = self.shop.release()
        self.assertEqual(run.outcome, worker.ok())
        self.assertEqual(self.shop.db.status("o-1"), "closed")
        [p] = run.published
        self.assertEqual((p.exchange, p.routing_key), (EXCHANGE, "order.release.other"))
        self.assertEqual(p.json(), {"order_id": "o-1"})
        self.assertTrue(run.logged("order o-1 closed: not paid in time"))
        again = self.shop.release()  # a redelivery: nothing more
        self.assertEqual((again.outcome, again.published), (worker.ok(), []))
        self.assertTrue(again.logged("order o-1 is closed: nothing to close"))

    def test_a_paid_order_is_kept(self):
        self.shop.create()
        self.assertTrue(self.shop.pay().logged("order o-1 paid"))
        run = self.shop.release()
        self.assertEqual((run.outcome, run.published), (worker.ok(), []))
        self.assertEqual(self.shop.db.status("o-1"), "paid")
        self.assertTrue(run.logged("order o-1 is paid: nothing to close"))

    def test_paying_twice_is_ok(self):
        self.shop.create()
        self.shop.pay()
        run = self.shop.pay()
        self.assertEqual(run.outcome, worker.ok())
        self.assertTrue(run.logged("order o-1 was paid already"))

    def test_paying_a_closed_order_fails_for_a_person_to_refund(self):
        self.shop.create()
        self.shop.release()
        run = self.shop.pay()
        self.assertEqual(
            run.outcome, worker.fail("order o-1 is closed: the payment came too late, refund it")
        )
        self.assertEqual(self.shop.db.status("o-1"), "closed")

    def test_paying_an_order_not_created_yet_retries(self):
        run = self.shop.pay("o-2")
        self.assertEqual(run.outcome, worker.retry("order o-2 not found (yet)"))
        self.shop.create("o-2")
        self.assertEqual(self.shop.pay("o-2").outcome, worker.ok())

    def test_releasing_an_unknown_order_warns_and_publishes_nothing(self):
        run = self.shop.release("o-9")
        self.assertEqual((run.outcome, run.published), (worker.ok(), []))
        self.assertTrue(run.logged("order o-9 not found: nothing to close", level="warn"))

    def test_the_release_exchange_comes_from_the_config(self):
        self.shop.host.config_text = '{"exchange": "other"}'
        self.shop.create()
        self.assertEqual(self.shop.release().published[0].exchange, "other")


class BadInputTest(unittest.TestCase):
    def setUp(self):
        self.shop = Shop()

    def test_an_unexpected_routing_key_fails(self):
        run = self.shop.deliver("order.refund", {"order_id": "o-1"})
        self.assertTrue(run.outcome.is_fail)
        self.assertIn("unexpected routing key 'order.refund'", run.outcome.reason)

    def test_bad_bodies_fail_and_store_nothing(self):
        qty = "order o-1: qty must be a positive integer, not"
        cases = [
            (b"nope", "the body is not a JSON object"),
            ({"sku": "book", "qty": 1}, "order_id must be a non-empty string, not None"),
            ({"order_id": "", "sku": "b", "qty": 1}, "order_id must be a non-empty string, not ''"),
            ({"order_id": "o-1", "qty": 1}, "sku must be a non-empty string, not None"),
            ({"order_id": "o-1", "sku": "book", "qty": 0}, f"{qty} 0"),
            ({"order_id": "o-1", "sku": "book", "qty": True}, f"{qty} True"),
        ]
        for body, reason in cases:
            run = self.shop.deliver("order.create.order", body)
            self.assertEqual(run.outcome, worker.fail(reason), body)
        # Rolled back, the table made by the same messages included.
        tables = self.shop.db.conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")
        self.assertEqual(tables.fetchall(), [])


class DatabaseErrorsTest(unittest.TestCase):
    BODY = {"order_id": "o-1", "sku": "book", "qty": 1}

    def run_with(self, db):
        return FakeHost(sql=db).run(app.handle, self.BODY, routing_key="order.create.order")

    def test_a_database_that_is_down_is_a_retry(self):
        db = FakeSql().on(app.ORDERS_TABLE, worker.SqlError("unavailable", "connection refused"))
        want = worker.retry("sql unavailable: connection refused")
        self.assertEqual(self.run_with(db).outcome, want)

    def test_a_table_made_meanwhile_is_a_retry(self):
        db = FakeSql().on(app.ORDERS_TABLE, worker.SqlError("constraint", "pg_type_typname"))
        self.assertTrue(self.run_with(db).outcome.is_retry)

    def test_without_a_grant_or_with_broken_sql_it_fails(self):
        run = FakeHost().run(app.handle, self.BODY, routing_key="order.create.order")
        self.assertEqual(
            run.outcome, worker.fail('no database granted: set sql = "NAME" on this subscription')
        )
        broken = worker.SqlError("invalid", "no column qty")
        db = FakeSql().on(app.ORDERS_TABLE, 0).on(app.INSERT_ORDER, broken)
        self.assertEqual(self.run_with(db).outcome, worker.fail("sql: invalid: no column qty"))
        self.assertEqual(db.statements[1], (app.INSERT_ORDER, ["o-1", "book", 1]))


if __name__ == "__main__":
    unittest.main()
