// The SDK's own tests: the API over the fake host, as a plugin sees it.
import { test } from "node:test";
import assert from "node:assert/strict";
import { runInNewContext } from "node:vm";
import {
  handler, ok, retry, fail, info, log, config, publish, publishJson, PublishError,
  kv, KvError, sql, SqlError,
} from "worker";
import { TestMessage, MemoryKv, ScriptedSql } from "worker/testing";

test("a message carries the delivery with JS types", () => {
  let seen;
  const handle = handler((msg) => {
    seen = msg;
  });
  const run = new TestMessage("héllo")
    .routingKey("q")
    .originalRoutingKey("orders.new")
    .attempt(3)
    .redelivered()
    .messageId("m-1")
    .timestamp(1700000000)
    .header("x-count", 5)
    .header("x-table", { a: 1 })
    .run(handle);
  assert.deepEqual(run.outcome, ok());
  assert.deepEqual(run.wit, { tag: "ok" });
  assert.equal(seen.text(), "héllo");
  assert.deepEqual([...seen.body.subarray(0, 2)], [0x68, 0xc3]);
  assert.equal(seen.routingKey, "q");
  assert.equal(seen.originalRoutingKey, "orders.new");
  assert.equal(seen.attempt, 3);
  assert.equal(seen.redelivered, true);
  assert.equal(seen.messageId, "m-1");
  assert.equal(seen.correlationId, null);
  assert.equal(seen.timestamp, 1700000000);
  assert.deepEqual(seen.headers, { "x-count": "5", "x-table": '{"a":1}' });
});

// componentize-js lifts list<u8> into a Uint8Array of the bindings' own global: the body must
// come out as a Uint8Array of the plugin's realm, without a byte-by-byte Uint8Array.from.
test("a body from another realm becomes a Uint8Array of this one", () => {
  let seen;
  const handle = handler((msg) => {
    seen = msg;
  });
  const run = new TestMessage("");
  run.delivery.body = runInNewContext('new Uint8Array([0x7b, 0x22, 0x61, 0x22, 0x3a, 0x31, 0x7d]).subarray(1, 6)');
  assert.equal(run.delivery.body instanceof Uint8Array, false);
  run.run(handle);
  assert.ok(seen.body instanceof Uint8Array);
  assert.equal(seen.text(), '"a":1');
});

test("json bodies and bad bodies", () => {
  const handle = handler((msg) => {
    try {
      return msg.json().n === 1 ? ok() : fail("wrong n");
    } catch (e) {
      return fail(`${e.name}`);
    }
  });
  assert.deepEqual(new TestMessage({ n: 1 }).run(handle).outcome, ok());
  assert.deepEqual(new TestMessage("{").run(handle).outcome, fail("SyntaxError"));
  assert.deepEqual(new TestMessage(new Uint8Array([0xff])).run(handle).outcome, fail("TypeError"));
});

test("outcomes reach the WIT variant", () => {
  const answer = (o) => new TestMessage("").run(handler(() => o));
  assert.deepEqual(answer(retry("later", { afterMs: 1500 })).wit, {
    tag: "retry",
    val: { reason: "later", afterMs: 1500n },
  });
  assert.deepEqual(answer(retry("later")).outcome, retry("later"));
  assert.deepEqual(answer(fail("bad")).wit, { tag: "fail", val: "bad" });
  assert.deepEqual(answer(undefined).outcome, ok());
  assert.throws(() => answer("yes"), /returns ok\(\), retry\(reason\) or fail\(reason\)/);
  assert.throws(() => retry("x", { afterMs: -1 }), TypeError);
});

test("async handlers", async () => {
  const handle = handler(async (msg) => {
    await null;
    info("async", msg.attempt);
    return retry("soon");
  });
  const run = await new TestMessage("").run(handle);
  assert.deepEqual(run.outcome, retry("soon"));
  assert.ok(run.logged("async 1", "info"));
});

test("a throwing handler throws from run", () => {
  const handle = handler(() => {
    throw new Error("boom");
  });
  assert.throws(() => new TestMessage("").run(handle), /boom/);
});

test("log lines and config", () => {
  const handle = handler(() => {
    const cfg = config({ greeting: "hello", n: 0 });
    log("warn", cfg.greeting, { n: cfg.n });
  });
  const run = new TestMessage("").config({ n: 2 }).run(handle);
  assert.deepEqual(run.logs, [{ level: "warn", message: 'hello {"n":2}' }]);
  assert.throws(() => new TestMessage("").run(handler(() => log("loud", "x"))), /log level/);
});

test("publishes are recorded, refusals thrown", () => {
  const handle = handler(() => {
    try {
      publish("out", "a.b", "text", { headers: { n: 1 }, delayMs: 500 });
      publishJson("out", "c", { x: [1] });
      publish("elsewhere", "k", new Uint8Array([1]));
    } catch (e) {
      assert.ok(e instanceof PublishError);
      return fail(e.message);
    }
  });
  const run = new TestMessage("").allowPublish(["out"]).run(handle);
  assert.deepEqual(run.outcome, fail("publish refused: not-allowed"));
  assert.equal(run.published.length, 2);
  const [first, second] = run.published;
  assert.equal(first.text(), "text");
  assert.deepEqual(first.headers, { n: "1" });
  assert.equal(first.delayMs, 500);
  assert.equal(first.contentType, null);
  assert.deepEqual(second.json(), { x: [1] });
  assert.equal(second.contentType, "application/json");

  const tooMany = new TestMessage("").refusePublish("too-many").run(handle);
  assert.deepEqual(tooMany.outcome, fail("publish refused: too-many"));
});

test("kv: in-memory store, denied without a grant", () => {
  const store = new MemoryKv({ seen: "yes" });
  const handle = handler(() => {
    assert.equal(kv.getText("seen"), "yes");
    assert.equal(kv.get("absent"), null);
    kv.set("bytes", new Uint8Array([1, 2]), { ttlMs: 1000 });
    assert.equal(kv.increment("hits"), 1);
    assert.equal(kv.increment("hits", 5), 6);
    assert.equal(kv.compareAndSwap("lock", null, "me"), true);
    assert.equal(kv.compareAndSwap("lock", "you", "me"), false);
    assert.equal(kv.compareAndSwap("lock", "me", "free"), true);
    assert.equal(kv.delete("seen"), true);
    assert.equal(kv.delete("seen"), false);
  });
  assert.deepEqual(new TestMessage("").kv(store).run(handle).outcome, ok());
  assert.equal(store.text("hits"), "6");
  assert.equal(store.text("lock"), "free");
  assert.equal(store.ttls.get("bytes"), 1000);

  const denied = handler(() => {
    try {
      kv.get("x");
    } catch (e) {
      assert.ok(e instanceof KvError);
      return fail(`${e.kind}`);
    }
  });
  assert.deepEqual(new TestMessage("").run(denied).outcome, fail("denied"));
  store.failWith("unavailable", "redis down");
  assert.throws(() => new TestMessage("").kv(store).run(handler(() => kv.get("x"))), /kv unavailable: redis down/);
});

test("sql: scripted answers, recorded statements, errors", () => {
  const db = new ScriptedSql()
    .on(/^select/i, (params) => [{ id: params[0], name: "ann", big: 2n ** 60n }])
    .on("insert", () => {
      throw new SqlError("constraint", "duplicate key");
    })
    .on("update", 3);
  const handle = handler(() => {
    assert.deepEqual(sql.query("select * from t where id = $1", [7]), {
      columns: ["id", "name", "big"],
      rows: [[7, "ann", 2n ** 60n]],
    });
    assert.deepEqual(sql.queryObjects("select 1", [1]), [{ id: 1, name: "ann", big: 2n ** 60n }]);
    assert.equal(sql.execute("update t set x = $1", [sql.float(1), null, true, "s"]), 3);
    try {
      sql.execute("insert into t values (1)");
    } catch (e) {
      assert.ok(e instanceof SqlError);
      return fail(e.message);
    }
  });
  const run = new TestMessage("").sql(db).run(handle);
  assert.deepEqual(run.outcome, fail("sql constraint: duplicate key"));
  assert.deepEqual(db.statements[2], {
    kind: "execute",
    statement: "update t set x = $1",
    params: [1, null, true, "s"],
  });
  assert.throws(() => new TestMessage("").sql(db).run(handler(() => sql.query("delete"))), /no rule matches/);
  assert.throws(() => new TestMessage("").run(handler(() => sql.execute("x"))), /sql denied/);
});

test("host functions outside a handler call say why they fail", () => {
  assert.throws(() => config(), /no host bound/);
});
