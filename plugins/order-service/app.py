# order-service: the order side of the example order flow (worker.toml; README "The order flow").
# One plugin serves three subscriptions and branches on the delivery's original routing key:
#   order.create.order {"order_id", "sku", "qty"} -> a row in `orders`, status 'unpaid'
#   order.pay          {"order_id"}               -> 'paid', if it is still 'unpaid'
#   order.release.order (the create message, dead-lettered by order.delay.queue after its TTL)
#       -> 'closed' if it is still unpaid, and only then publishes order.release.other
#          {"order_id"} to the config's `exchange` (default order-event-exchange): the stock
#          service gives the order's stock back
# Every statement runs in the message's one transaction, committed only when it answers ok, so a
# retried message finds the table as it was. The SQL suits SQLite and PostgreSQL: `$1`
# placeholders, numbered in the order they first appear (SQLite numbers them that way).
# A database that is down answers retry; a body without what its key needs answers fail.

from typing import Optional

import worker
from worker import sql

EXCHANGE = "order-event-exchange"
RELEASE_KEY = "order.release.other"

ORDERS_TABLE = """CREATE TABLE IF NOT EXISTS orders (
    order_id VARCHAR(64) PRIMARY KEY,
    sku VARCHAR(64) NOT NULL,
    qty INTEGER NOT NULL,
    status VARCHAR(16) NOT NULL,
    created_at TIMESTAMP DEFAULT CURRENT_TIMESTAMP,
    updated_at TIMESTAMP DEFAULT CURRENT_TIMESTAMP
)"""
INSERT_ORDER = (
    "INSERT INTO orders (order_id, sku, qty, status) VALUES ($1, $2, $3, 'unpaid') "
    "ON CONFLICT (order_id) DO NOTHING"
)
# Moves an order on from 'unpaid' only: the WHERE makes pay and close exclusive.
SET_STATUS_IF_UNPAID = (
    "UPDATE orders SET status = $1, updated_at = CURRENT_TIMESTAMP "
    "WHERE order_id = $2 AND status = 'unpaid'"
)
ORDER_STATUS = "SELECT status FROM orders WHERE order_id = $1"


@worker.handler
def handle(msg: worker.Message):
    key = msg.original_routing_key
    action = ACTIONS.get(key)
    if action is None:
        return worker.fail(f"unexpected routing key {key!r}: this plugin handles {sorted(ACTIONS)}")
    body = json_object(msg)
    order_id = text_field(body, "order_id")
    try:
        sql.execute(ORDERS_TABLE)
        return action(order_id, body)
    except worker.SqlError as e:
        return sql_answer(e)


def create(order_id: str, body: dict) -> worker.Outcome:
    sku = text_field(body, "sku")
    qty = body.get("qty")
    if not isinstance(qty, int) or isinstance(qty, bool) or qty <= 0:
        return worker.fail(f"order {order_id}: qty must be a positive integer, not {qty!r}")
    if sql.execute(INSERT_ORDER, order_id, sku, qty) == 0:
        worker.info(f"order {order_id} exists already ({status_of(order_id)}): create ignored")
    else:
        worker.info(f"order {order_id} created: {qty} x {sku}, unpaid")
    return worker.ok()


def pay(order_id: str, body: dict) -> worker.Outcome:
    if sql.execute(SET_STATUS_IF_UNPAID, "paid", order_id) == 1:
        worker.info(f"order {order_id} paid")
        return worker.ok()
    status = status_of(order_id)
    if status is None:  # its create may still be on the way: order@create is another queue
        return worker.retry(f"order {order_id} not found (yet)")
    if status == "paid":
        worker.info(f"order {order_id} was paid already")
        return worker.ok()
    # Paid after the payment window closed: parked in order@pay@failed for a person (a refund).
    return worker.fail(f"order {order_id} is {status}: the payment came too late, refund it")


def release(order_id: str, body: dict) -> worker.Outcome:
    if sql.execute(SET_STATUS_IF_UNPAID, "closed", order_id) == 1:
        worker.info(f"order {order_id} closed: not paid in time; releasing its stock")
        exchange = worker.config().get("exchange", EXCHANGE)
        worker.publish_json(exchange, RELEASE_KEY, {"order_id": order_id})
        return worker.ok()
    status = status_of(order_id)
    if status is None:
        worker.warn(f"order {order_id} not found: nothing to close")
    else:
        worker.info(f"order {order_id} is {status}: nothing to close")
    return worker.ok()


ACTIONS = {"order.create.order": create, "order.pay": pay, "order.release.order": release}


def status_of(order_id: str) -> Optional[str]:
    status = sql.query(ORDER_STATUS, order_id).scalar()
    return None if status is None else str(status)


def json_object(msg: worker.Message) -> dict:
    try:
        body = msg.json()
    except ValueError:  # also UnicodeDecodeError
        body = None
    if not isinstance(body, dict):
        raise worker.fail("the body is not a JSON object")
    return body


def text_field(body: dict, name: str) -> str:
    value = body.get(name)
    if not isinstance(value, str) or not value:
        raise worker.fail(f"{name} must be a non-empty string, not {value!r}")
    return value


def sql_answer(e: worker.SqlError) -> worker.Outcome:
    if e.kind == "unavailable":
        return worker.retry(f"sql unavailable: {e.detail}")
    if e.kind == "constraint":  # PostgreSQL: two first messages creating the table at once
        return worker.retry(f"sql: {e}")
    if e.kind == "denied":
        return worker.fail('no database granted: set sql = "NAME" on this subscription')
    return worker.fail(f"sql: {e}")
