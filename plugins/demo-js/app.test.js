// Native tests of demo-js's logic (node --test): the fake host of `worker/testing`, no wasm.
import { test } from "node:test";
import assert from "node:assert/strict";
import { ok, retry, fail } from "worker";
import { TestMessage } from "worker/testing";
import { handle } from "./app.js";

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
  assert.deepEqual(run.logs, [{ level: "info", message: "hello" }]);
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
