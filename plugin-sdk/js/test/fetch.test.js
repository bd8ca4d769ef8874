// The fake `fetch` of worker/testing: canned answers, the requests recorded, denial by default.
import { test } from "node:test";
import assert from "node:assert/strict";
import { handler, ok, retry } from "worker";
import { TestMessage, FakeFetch, NETWORK_ERROR } from "worker/testing";

// Calls one URL and answers with what came back, as a plugin would.
const handle = handler(async (msg) => {
  const { url, method, body, headers } = msg.json();
  try {
    const answer = await fetch(url, { method, body, headers });
    return answer.ok ? ok() : retry(`answered ${answer.status}`);
  } catch (e) {
    return retry(`${e.name}: ${e.message}`);
  }
});
const said = (run) => run.outcome;

test("canned answers by URL, pattern and method; requests recorded", async () => {
  const bodies = [];
  const seen = handler(async (msg) => {
    const { url, method, body } = msg.json();
    const answer = await fetch(url, { method, body, headers: { "X-Trace": "t1" } });
    bodies.push([answer.status, await answer.text(), answer.headers.get("content-type")]);
  });
  const web = new FakeFetch()
    .on(/^https:\/\/api\.example\//, 503)
    .on("https://api.example/orders/7", { json: { id: 7 } })
    .on("https://api.example/orders", (req) => ({ status: 201, body: req.text().toUpperCase() }), { method: "post" })
    .on("http://h", "plain")
    .on("http://h/r", new Response("made", { status: 202 }));
  const send = (body) => new TestMessage(body).fetch(web).run(seen);
  await send({ url: "https://api.example/orders/7#x" });
  await send({ url: "https://api.example/orders", method: "POST", body: "abc" });
  await send({ url: "https://api.example/orders" });
  await send({ url: "http://h" });
  await send({ url: "http://h/r" });
  assert.deepEqual(bodies, [
    [200, '{"id":7}', "application/json"],
    [201, "ABC", "text/plain;charset=UTF-8"],
    [503, "", null],
    [200, "plain", "text/plain;charset=UTF-8"],
    [202, "made", "text/plain;charset=UTF-8"],
  ]);
  assert.equal(web.requests.length, 5);
  const post = web.requests[1];
  assert.equal(post.method, "POST");
  assert.equal(post.url, "https://api.example/orders");
  assert.equal(post.headers["x-trace"], "t1");
  assert.equal(post.text(), "abc");
  assert.deepEqual(web.requests[0].body, new Uint8Array());
});

test("without a FakeFetch, fetch is refused as in the component", async () => {
  const run = await new TestMessage({ url: "https://api.example/" }).run(handle);
  assert.deepEqual(said(run), retry(`TypeError: ${NETWORK_ERROR}`));
  assert.equal(typeof globalThis.fetch, "function");
});

test("errors, statuses and JSON bodies reach the plugin", async () => {
  const web = new FakeFetch()
    .on("https://down.example/", FakeFetch.networkError())
    .on("https://api.example/missing", 404)
    .on("https://api.example/echo", (req) => ({ json: req.json() }), { method: "PUT" });
  const call = async (body) => said(await new TestMessage(body).fetch(web).run(handle));
  assert.deepEqual(await call({ url: "https://down.example/" }), retry(`TypeError: ${NETWORK_ERROR}`));
  assert.deepEqual(await call({ url: "https://api.example/missing" }), retry("answered 404"));
  assert.deepEqual(await call({ url: "https://api.example/echo", method: "PUT", body: '{"a":1}' }), ok());
  assert.deepEqual(web.requests[2].json(), { a: 1 });
});

test("an unscripted URL fails the test even when the plugin catches the error", async () => {
  const web = new FakeFetch().on("https://api.example/a", 200);
  await assert.rejects(
    new TestMessage({ url: "https://api.example/b" }).fetch(web).run(handle),
    /FakeFetch: no answer scripted for GET https:\/\/api.example\/b/,
  );
  assert.equal(web.unscripted.length, 1);
  // The next run starts clean: only its own unscripted requests count.
  const again = await new TestMessage({ url: "https://api.example/a" }).fetch(web).run(handle);
  assert.deepEqual(said(again), ok());
});

test("the global fetch is put back after every run, also after a crash", async () => {
  const original = globalThis.fetch;
  const crash = handler(async () => {
    await fetch("https://api.example/a");
    throw new Error("boom");
  });
  const web = new FakeFetch().on("https://api.example/a", 200);
  await assert.rejects(new TestMessage({}).fetch(web).run(crash), /boom/);
  assert.equal(globalThis.fetch, original);
  assert.throws(() => new TestMessage({}).fetch({}), /FakeFetch/);
});
