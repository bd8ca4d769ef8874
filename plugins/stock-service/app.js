// stock-service: the stock side of the example order flow (worker.toml; README "The order flow").
// It branches on the delivery's original routing key:
//   order.create.order {"order_id", "sku", "qty"} (queue stock@reserve): reserves the stock: a
//     row in stock_locks ('locked'), stock.available - qty, and publishes stock.locked
//     {"order_id"} to the config's `exchange` (default order-event-exchange); stock.delay.queue
//     holds it for its TTL and dead-letters it back as stock.release
//   order.release.other (the order service closed the order) and stock.release (the stock's own
//     timeout) {"order_id"}: settles the lock exactly once, whichever comes first:
//       order closed or unknown -> 'released', the qty goes back to stock.available
//       order paid              -> 'deducted' (the stock stays sold)
//       order still unpaid      -> nothing: the order's own release comes later
//     The guard is `UPDATE stock_locks ... WHERE order_id = $1 AND status = 'locked'`: the stock
//     is given back only by the call whose update changed the row.
// Every statement runs in the message's one transaction (committed only on ok). The SQL suits
// SQLite and PostgreSQL: `$1` placeholders, numbered in the order they first appear. The tables
// are made with CREATE TABLE IF NOT EXISTS on every call; `stock` starts with SEED.
import { handler, ok, retry, fail, info, warn, config, publishJson, sql, SqlError } from "worker";

const EXCHANGE = "order-event-exchange";
const LOCKED_KEY = "stock.locked";

export const STOCK_TABLE = `CREATE TABLE IF NOT EXISTS stock (
    sku VARCHAR(64) PRIMARY KEY,
    available INTEGER NOT NULL
)`;
export const LOCKS_TABLE = `CREATE TABLE IF NOT EXISTS stock_locks (
    order_id VARCHAR(64) PRIMARY KEY,
    sku VARCHAR(64) NOT NULL,
    qty INTEGER NOT NULL,
    status VARCHAR(16) NOT NULL,
    created_at TIMESTAMP DEFAULT CURRENT_TIMESTAMP,
    updated_at TIMESTAMP DEFAULT CURRENT_TIMESTAMP
)`;
// The order service's table (plugins/order-service, same DDL), made here too so that a release
// never finds it missing.
export const ORDERS_TABLE = `CREATE TABLE IF NOT EXISTS orders (
    order_id VARCHAR(64) PRIMARY KEY,
    sku VARCHAR(64) NOT NULL,
    qty INTEGER NOT NULL,
    status VARCHAR(16) NOT NULL,
    created_at TIMESTAMP DEFAULT CURRENT_TIMESTAMP,
    updated_at TIMESTAMP DEFAULT CURRENT_TIMESTAMP
)`;
// The skus a new database starts with, 100 of each; a sku already there keeps its count.
export const SEED = `INSERT INTO stock (sku, available) VALUES
    ('book', 100), ('pen', 100), ('lamp', 100)
    ON CONFLICT (sku) DO NOTHING`;

export const INSERT_LOCK = `INSERT INTO stock_locks (order_id, sku, qty, status)
    VALUES ($1, $2, $3, 'locked') ON CONFLICT (order_id) DO NOTHING`;
export const TAKE_STOCK = "UPDATE stock SET available = available - $1 WHERE sku = $2 AND available >= $1";
export const GIVE_BACK = "UPDATE stock SET available = available + $1 WHERE sku = $2";
export const AVAILABLE = "SELECT available FROM stock WHERE sku = $1";
export const LOCK = "SELECT sku, qty, status FROM stock_locks WHERE order_id = $1";
export const ORDER_STATUS = "SELECT status FROM orders WHERE order_id = $1";
// The exactly-once guard: only a lock still 'locked' moves on, to 'released' or 'deducted'.
export const SETTLE_LOCK = `UPDATE stock_locks SET status = $1, updated_at = CURRENT_TIMESTAMP
    WHERE order_id = $2 AND status = 'locked'`;

const ACTIONS = {
  "order.create.order": reserve,
  "order.release.other": release,
  "stock.release": release,
};

export const handle = handler((msg) => {
  const key = msg.originalRoutingKey;
  const action = ACTIONS[key];
  if (!action) {
    return fail(`unexpected routing key ${JSON.stringify(key)}: this plugin handles ${Object.keys(ACTIONS).join(", ")}`);
  }
  try {
    const body = jsonObject(msg);
    const orderId = textField(body, "order_id");
    for (const ddl of [STOCK_TABLE, LOCKS_TABLE, ORDERS_TABLE, SEED]) sql.execute(ddl);
    return action(orderId, body, key);
  } catch (e) {
    if (e instanceof Answer) return e.outcome;
    if (e instanceof SqlError) return sqlAnswer(e);
    throw e;
  }
});

// order.create.order: lock the order's stock and start the stock's own timeout.
function reserve(orderId, body) {
  const sku = textField(body, "sku");
  const qty = body.qty;
  if (!Number.isInteger(qty) || qty <= 0) {
    return fail(`order ${orderId}: qty must be a positive integer, not ${JSON.stringify(qty)}`);
  }
  if (sql.execute(INSERT_LOCK, [orderId, sku, qty]) === 0) {
    info(`stock: order ${orderId} has its lock already: reserve ignored`);
    return ok();
  }
  if (sql.execute(TAKE_STOCK, [qty, sku]) === 0) {
    // Answering fail rolls the lock back too; the order parks in stock@reserve@failed.
    const left = available(sku);
    if (left === null) return fail(`order ${orderId}: unknown sku ${sku}`);
    return fail(`order ${orderId}: ${qty} x ${sku} wanted, ${left} available`);
  }
  publishJson(config().exchange ?? EXCHANGE, LOCKED_KEY, { order_id: orderId });
  info(`stock: locked ${qty} x ${sku} for order ${orderId}; ${sku} available: ${available(sku)}`);
  return ok();
}

// order.release.other or stock.release: settle the lock by the order's status, once.
function release(orderId, _body, key) {
  const [lock] = sql.queryObjects(LOCK, [orderId]);
  if (!lock) {
    warn(`stock: no lock for order ${orderId} (${key}): nothing to release`);
    return ok();
  }
  const [order] = sql.queryObjects(ORDER_STATUS, [orderId]);
  const status = order?.status ?? null;
  if (status === "unpaid") {
    info(`stock: order ${orderId} is still unpaid (${key}): its own release comes later`);
    return ok();
  }
  const settled = status === "paid" ? "deducted" : "released";
  if (sql.execute(SETTLE_LOCK, [settled, orderId]) === 0) {
    info(`stock: lock of order ${orderId} is ${lock.status} already (${key}): nothing to do`);
    return ok();
  }
  if (settled === "deducted") {
    info(`stock: order ${orderId} is paid: ${lock.qty} x ${lock.sku} deducted (${key})`);
    return ok();
  }
  sql.execute(GIVE_BACK, [lock.qty, lock.sku]);
  info(
    `stock: released ${lock.qty} x ${lock.sku} of order ${orderId} (order ${status ?? "unknown"}, ${key}); ` +
      `${lock.sku} available: ${available(lock.sku)}`,
  );
  return ok();
}

function available(sku) {
  const [row] = sql.queryObjects(AVAILABLE, [sku]);
  return row ? row.available : null;
}

// An answer thrown from deep in a call, returned by the handler.
class Answer {
  constructor(outcome) {
    this.outcome = outcome;
  }
}

function jsonObject(msg) {
  let body;
  try {
    body = msg.json();
  } catch {
    body = undefined;
  }
  if (body === null || typeof body !== "object" || Array.isArray(body)) {
    throw new Answer(fail("the body is not a JSON object"));
  }
  return body;
}

function textField(body, name) {
  const value = body[name];
  if (typeof value !== "string" || value === "") {
    throw new Answer(fail(`${name} must be a non-empty string, not ${JSON.stringify(value ?? null)}`));
  }
  return value;
}

function sqlAnswer(e) {
  if (e.kind === "unavailable") return retry(`sql unavailable: ${e.detail}`);
  // PostgreSQL: two first messages creating a table at once.
  if (e.kind === "constraint") return retry(`sql constraint: ${e.detail}`);
  if (e.kind === "denied") return fail('no database granted: set sql = "NAME" on this subscription');
  return fail(`sql ${e.kind}: ${e.detail}`);
}
