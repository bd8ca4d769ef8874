// Native tests of stock-service (node --test): the fake host of `worker/testing`, no wasm. The
// database is a small in-memory model of the plugin's tables behind ScriptedSql, one transaction
// per message (rolled back unless the answer is ok, as in the host).
import { test } from "node:test";
import assert from "node:assert/strict";
import { ok, retry, fail, SqlError } from "worker";
import { TestMessage, ScriptedSql } from "worker/testing";
import {
  handle, STOCK_TABLE, LOCKS_TABLE, ORDERS_TABLE, SEED, INSERT_LOCK, TAKE_STOCK, GIVE_BACK,
  AVAILABLE, LOCK, ORDER_STATUS, SETTLE_LOCK,
} from "./app.js";

const EXCHANGE = "order-event-exchange";

// The tables `stock`, `stock_locks` and `orders` (the order service's, set by the tests).
class ShopDb {
  constructor() {
    this.state = { stock: {}, locks: {}, orders: {} };
    const s = () => this.state;
    this.sql = new ScriptedSql()
      .on(STOCK_TABLE, 0)
      .on(LOCKS_TABLE, 0)
      .on(ORDERS_TABLE, 0)
      .on(SEED, () => ["book", "pen", "lamp"].filter((sku) => !(sku in s().stock) && (s().stock[sku] = 100)).length)
      .on(INSERT_LOCK, ([id, sku, qty]) => {
        if (id in s().locks) return 0;
        s().locks[id] = { sku, qty, status: "locked" };
        return 1;
      })
      .on(TAKE_STOCK, ([qty, sku]) => {
        if (!(sku in s().stock) || s().stock[sku] < qty) return 0;
        s().stock[sku] -= qty;
        return 1;
      })
      .on(GIVE_BACK, ([qty, sku]) => {
        s().stock[sku] += qty;
        return 1;
      })
      .on(AVAILABLE, ([sku]) => (sku in s().stock ? [{ available: s().stock[sku] }] : []))
      .on(LOCK, ([id]) => (id in s().locks ? [{ ...s().locks[id] }] : []))
      .on(ORDER_STATUS, ([id]) => (id in s().orders ? [{ status: s().orders[id] }] : []))
      .on(SETTLE_LOCK, ([status, id]) => {
        if (s().locks[id]?.status !== "locked") return 0;
        s().locks[id].status = status;
        return 1;
      });
  }

  // One message in its own transaction.
  deliver(key, body) {
    const before = structuredClone(this.state);
    const run = new TestMessage(body).routingKey(key).exchange(EXCHANGE).sql(this.sql).run(handle);
    if (run.outcome.kind !== "ok") this.state = before;
    return run;
  }

  reserve(order_id = "o-1", sku = "book", qty = 2) {
    return this.deliver("order.create.order", { order_id, sku, qty });
  }

  // The order service closed the order; or the stock's own timeout came round.
  releaseOther(order_id = "o-1") {
    return this.deliver("order.release.other", { order_id });
  }

  releaseTimeout(order_id = "o-1") {
    return this.deliver("stock.release", { order_id });
  }
}

test("a new order locks its stock and starts the stock's timeout", () => {
  const db = new ShopDb();
  const run = db.reserve("o-1", "book", 2);
  assert.deepEqual(run.outcome, ok());
  assert.deepEqual(db.state.locks, { "o-1": { sku: "book", qty: 2, status: "locked" } });
  assert.deepEqual(db.state.stock, { book: 98, pen: 100, lamp: 100 });
  assert.equal(run.published.length, 1);
  const [p] = run.published;
  assert.deepEqual([p.exchange, p.routingKey, p.json()], [EXCHANGE, "stock.locked", { order_id: "o-1" }]);
  assert.ok(run.logged("stock: locked 2 x book for order o-1; book available: 98", "info"));
});

test("a second create of the same order reserves nothing more", () => {
  const db = new ShopDb();
  db.reserve();
  const again = db.reserve();
  assert.deepEqual([again.outcome, again.published], [ok(), []]);
  assert.equal(db.state.stock.book, 98);
  assert.ok(again.logged("has its lock already"));
});

test("not enough stock or an unknown sku fails and locks nothing", () => {
  const db = new ShopDb();
  assert.deepEqual(db.reserve("o-1", "book", 101).outcome, fail("order o-1: 101 x book wanted, 100 available"));
  assert.deepEqual(db.reserve("o-2", "sofa", 1).outcome, fail("order o-2: unknown sku sofa"));
  assert.deepEqual(db.state, { stock: {}, locks: {}, orders: {} }); // rolled back, seed included
});

for (const [first, second] of [["releaseOther", "releaseTimeout"], ["releaseTimeout", "releaseOther"]]) {
  test(`a closed order's stock comes back exactly once (${first} first)`, () => {
    const db = new ShopDb();
    db.reserve("o-1", "book", 2);
    db.state.orders["o-1"] = "closed";
    const run = db[first]();
    assert.deepEqual(run.outcome, ok());
    assert.equal(db.state.stock.book, 100);
    assert.equal(db.state.locks["o-1"].status, "released");
    assert.ok(run.logged("stock: released 2 x book of order o-1 (order closed"));
    assert.ok(run.logged("book available: 100"));
    const late = db[second]();
    assert.deepEqual([late.outcome, late.published], [ok(), []]);
    assert.equal(db.state.stock.book, 100);
    assert.ok(late.logged("lock of order o-1 is released already"));
  });
}

test("a paid order's stock is deducted, never released", () => {
  const db = new ShopDb();
  db.reserve("o-1", "pen", 3);
  db.state.orders["o-1"] = "paid";
  const run = db.releaseTimeout();
  assert.deepEqual(run.outcome, ok());
  assert.equal(db.state.locks["o-1"].status, "deducted");
  assert.equal(db.state.stock.pen, 97);
  assert.ok(run.logged("order o-1 is paid: 3 x pen deducted"));
  db.releaseOther();
  assert.deepEqual([db.state.locks["o-1"].status, db.state.stock.pen], ["deducted", 97]);
});

test("an order still unpaid keeps its lock until its own release", () => {
  const db = new ShopDb();
  db.reserve();
  db.state.orders["o-1"] = "unpaid";
  const early = db.releaseTimeout();
  assert.deepEqual(early.outcome, ok());
  assert.ok(early.logged("order o-1 is still unpaid (stock.release)"));
  assert.deepEqual([db.state.locks["o-1"].status, db.state.stock.book], ["locked", 98]);
  db.state.orders["o-1"] = "closed";
  db.releaseOther();
  assert.deepEqual([db.state.locks["o-1"].status, db.state.stock.book], ["released", 100]);
});

test("a lock whose order never came is released; a release without a lock warns", () => {
  const db = new ShopDb();
  db.reserve("o-7", "lamp", 1);
  assert.ok(db.releaseTimeout("o-7").logged("(order unknown, stock.release)"));
  assert.deepEqual([db.state.locks["o-7"].status, db.state.stock.lamp], ["released", 100]);
  const none = db.releaseOther("o-8");
  assert.deepEqual(none.outcome, ok());
  assert.ok(none.logged("no lock for order o-8", "warn"));
});

test("the release uses the guard and gives back only when it changed a row", () => {
  const db = new ShopDb();
  db.reserve();
  db.state.orders["o-1"] = "closed";
  db.sql.statements.length = 0;
  db.releaseOther();
  db.releaseTimeout();
  const writes = db.sql.statements.filter((s) => s.kind === "execute" && !/^(CREATE|INSERT)/.test(s.statement));
  assert.deepEqual(
    writes.map((s) => [s.statement, s.params]),
    [[SETTLE_LOCK, ["released", "o-1"]], [GIVE_BACK, [2, "book"]], [SETTLE_LOCK, ["released", "o-1"]]],
  );
});

test("bad bodies, unknown keys and the config's exchange", () => {
  const db = new ShopDb();
  assert.deepEqual(db.deliver("order.create.order", "nope").outcome, fail("the body is not a JSON object"));
  assert.deepEqual(db.deliver("stock.release", {}).outcome, fail("order_id must be a non-empty string, not null"));
  assert.deepEqual(
    db.deliver("order.create.order", { order_id: "o-1", sku: "book", qty: 1.5 }).outcome,
    fail("order o-1: qty must be a positive integer, not 1.5"),
  );
  assert.match(db.deliver("order.pay", { order_id: "o-1" }).outcome.reason, /unexpected routing key "order.pay"/);
  const run = new TestMessage({ order_id: "o-1", sku: "book", qty: 1 })
    .routingKey("order.create.order").config({ exchange: "other" }).sql(db.sql).run(handle);
  assert.equal(run.published[0].exchange, "other");
});

test("a database that is down is a retry; no grant or broken SQL fails", () => {
  const body = { order_id: "o-1", sku: "book", qty: 1 };
  const down = new ScriptedSql().on(STOCK_TABLE, () => {
    throw new SqlError("unavailable", "connection refused");
  });
  const msg = () => new TestMessage(body).routingKey("order.create.order");
  assert.deepEqual(msg().sql(down).run(handle).outcome, retry("sql unavailable: connection refused"));
  const raced = new ScriptedSql().on(STOCK_TABLE, () => {
    throw new SqlError("constraint", "pg_type");
  });
  assert.deepEqual(msg().sql(raced).run(handle).outcome, retry("sql constraint: pg_type"));
  assert.deepEqual(msg().run(handle).outcome, fail('no database granted: set sql = "NAME" on this subscription'));
  const broken = new ScriptedSql().on("CREATE", 0).on(SEED, 0).on(INSERT_LOCK, () => {
    throw new SqlError("invalid", "no column qty");
  });
  assert.deepEqual(msg().sql(broken).run(handle).outcome, fail("sql invalid: no column qty"));
});
