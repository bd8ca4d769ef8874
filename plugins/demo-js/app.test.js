// Native tests of demo-js's logic (node --test): the fake host of `worker/testing`, no wasm.
import { test } from "node:test";
import assert from "node:assert/strict";
import { ok, retry, fail, KvError, SqlError } from "worker";
import { TestMessage, MemoryKv, ScriptedSql, FakeFetch } from "worker/testing";
import { handle, AUDIT_TABLE, AUDIT_ROW, AUDIT_COUNT } from "./app.js";

const ECHO = { echo: { exchange: "out", routing_key: "echoed" } };

// A database that takes the audit statements and counts `rows` rows.
function auditDb(rows = 1) {
  return new ScriptedSql()
    .on(AUDIT_TABLE, 0)
    .on(AUDIT_ROW, 1)
    .on(AUDIT_COUNT, { columns: ["COUNT(*)"], rows: [[rows]] });
}

test("a body that is not a JSON object fails", () => {
  for (const body of ["", "nope", "[1]", "3", "null"]) {
    assert.deepEqual(new TestMessage(body).run(handle).outcome, fail("not a JSON object"), body);
  }
});

test("an empty object is ok", () => {
  const run = new TestMessage({}).run(handle);
  assert.deepEqual(run.outcome, ok());
  assert.deepEqual(run.published, []);
});

test("log goes to the host", () => {
  const run = new TestMessage({ log: "hello" }).run(handle);
  assert.deepEqual(run.logs.filter((l) => l.level !== "debug"), [{ level: "info", message: "hello" }]);
});

test("outcomes, reasons and after_ms", () => {
  const outcome = (body) => new TestMessage(body).run(handle).outcome;
  assert.deepEqual(outcome({ outcome: "retry" }), retry("requested"));
  assert.deepEqual(outcome({ outcome: "retry", reason: "later", after_ms: 250 }), retry("later", { afterMs: 250 }));
  assert.deepEqual(new TestMessage({ outcome: "retry", after_ms: 250 }).run(handle).wit, {
    tag: "retry",
    val: { reason: "requested", afterMs: 250n },
  });
  assert.deepEqual(outcome({ outcome: "fail", reason: "bad" }), fail("bad"));
  assert.deepEqual(outcome({ outcome: "ok", reason: "ignored" }), ok());
});

test("trap throws", () => {
  assert.throws(() => new TestMessage({ trap: true, log: "before" }).run(handle), /trap requested/);
});

test("grow_mb allocates and still answers", () => {
  assert.deepEqual(new TestMessage({ grow_mb: 2 }).run(handle).outcome, ok());
});

test("echo publishes what the call saw", () => {
  const run = new TestMessage({ echo: { exchange: "out", routing_key: "echo.k" } })
    .routingKey("q1")
    .originalRoutingKey("orders.new")
    .attempt(2)
    .messageId("m-7")
    .header("x-n", 5)
    .config({ greeting: "hi" })
    .run(handle);
  assert.deepEqual(run.outcome, ok());
  assert.equal(run.published.length, 1);
  const [echo] = run.published;
  assert.equal(echo.exchange, "out");
  assert.equal(echo.routingKey, "echo.k");
  assert.equal(echo.contentType, "application/json");
  // count is module-global: it grows with every call in this test process (1 in a fresh instance).
  const { count, ...seen } = echo.json();
  assert.ok(Number.isInteger(count) && count >= 1);
  assert.deepEqual(seen, {
    config: { greeting: "hi" },
    attempt: 2,
    routing_key: "q1",
    original_routing_key: "orders.new",
    message_id: "m-7",
    headers: { "x-n": "5" },
    body_len: JSON.stringify({ echo: { exchange: "out", routing_key: "echo.k" } }).length,
    seen: null,
    audited: null,
  });
  const again = new TestMessage({ echo: { exchange: "out", routing_key: "k" } }).run(handle);
  assert.equal(again.published[0].json().message_id, null);
  assert.equal(again.published[0].json().count, count + 1);
});

test("print writes to stdout", (t) => {
  const lines = [];
  t.mock.method(console, "log", (line) => lines.push(line));
  new TestMessage({ print: "to stdout" }).run(handle);
  assert.deepEqual(lines, ["to stdout"]);
});

test("publish each message, with delays", () => {
  const run = new TestMessage({
    publish: [
      { exchange: "a", routing_key: "k1", body: "one" },
      { exchange: "b", routing_key: "k2", body: "two", delay_ms: 5000 },
    ],
  }).run(handle);
  assert.deepEqual(run.outcome, ok());
  assert.deepEqual(
    run.published.map((p) => [p.exchange, p.routingKey, p.text(), p.delayMs]),
    [["a", "k1", "one", 0], ["b", "k2", "two", 5000]],
  );
});

test("a refused publish fails with the WIT error name", () => {
  const body = { publish: [{ exchange: "a", routing_key: "k", body: "x" }, { exchange: "nope", routing_key: "k", body: "y" }] };
  const run = new TestMessage(body).allowPublish(["a"]).run(handle);
  assert.deepEqual(run.outcome, fail("publish refused: not-allowed"));
  assert.deepEqual(new TestMessage(body).refusePublish("delay-refused").run(handle).outcome, fail("publish refused: delay-refused"));
});

test("without grants it answers ok and says so at debug", () => {
  const run = new TestMessage({}).run(handle);
  assert.deepEqual(run.outcome, ok());
  assert.ok(run.logged("kv not granted", "debug"));
  assert.ok(run.logged("sql not granted", "debug"));
});

test("kv counts messages per original routing key", () => {
  const store = new MemoryKv();
  for (const key of ["a", "b", "a"]) new TestMessage({}).routingKey("q").originalRoutingKey(key).kv(store).run(handle);
  const run = new TestMessage(ECHO).originalRoutingKey("a").kv(store).run(handle);
  assert.equal(run.published[0].json().seen, 3);
  assert.equal(store.text("seen:a"), "3");
  assert.equal(store.text("seen:b"), "1");
});

test("sql writes one audit row per message", () => {
  const db = auditDb(5);
  const run = new TestMessage(ECHO).originalRoutingKey("k").messageId("m-1").sql(db).run(handle);
  assert.equal(run.published[0].json().audited, 5);
  assert.deepEqual(
    db.statements.map((s) => [s.kind, s.statement.split(" ")[0], s.params]),
    [["execute", "CREATE", []], ["execute", "INSERT", ["k", "m-1", 1, JSON.stringify(ECHO).length]], ["query", "SELECT", []]],
  );
});

test("a store or database that is down is a retry; a broken audit table fails", () => {
  const down = new MemoryKv().failWith("unavailable", "connection refused");
  assert.deepEqual(new TestMessage({}).kv(down).run(handle).outcome, retry("kv unavailable: connection refused"));
  const restarting = new ScriptedSql().on(AUDIT_TABLE, () => {
    throw new SqlError("unavailable", "db restarting");
  });
  assert.deepEqual(new TestMessage({}).sql(restarting).run(handle).outcome, retry("sql unavailable: db restarting"));
  const broken = new ScriptedSql().on(AUDIT_TABLE, 0).on(AUDIT_ROW, () => {
    throw new SqlError("invalid", "no column attempt");
  });
  assert.deepEqual(new TestMessage({}).sql(broken).run(handle).outcome, fail("audit: invalid: no column attempt"));
  const raced = new ScriptedSql().on(AUDIT_TABLE, () => {
    throw new SqlError("constraint", "pg_type");
  });
  assert.deepEqual(new TestMessage({}).sql(raced).run(handle).outcome, retry("audit: constraint: pg_type"));
  assert.ok(new KvError("denied") instanceof Error);
});

test("http answers and errors go into the echo", async () => {
  const web = new FakeFetch()
    .on("http://api.test/ok", (req) => ({ status: 201, body: `made ${req.text()} ${req.headers.x}` }), { method: "POST" })
    .on("http://api.test/down", FakeFetch.networkError());
  const req = { url: "http://api.test/ok", method: "POST", body: "b", headers: { x: "1" } };
  const run = await new TestMessage({ ...ECHO, http: req }).fetch(web).run(handle);
  assert.deepEqual(run.outcome, ok());
  assert.deepEqual(run.published[0].json().http, { status: 201, body: "made b 1" });
  assert.ok(run.logged("http POST http://api.test/ok: 201", "info"));
  const down = await new TestMessage({ ...ECHO, http: { url: "http://api.test/down" } }).fetch(web).run(handle);
  assert.match(down.published[0].json().http.error, /^TypeError: NetworkError/);
  const denied = await new TestMessage({ ...ECHO, http: { url: "http://api.test/ok" } }).run(handle);
  assert.match(denied.published[0].json().http.error, /^TypeError: NetworkError/);
  assert.deepEqual(denied.outcome, ok());
});
