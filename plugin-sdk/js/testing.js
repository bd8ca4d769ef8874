// Native tests of plugins under plain Node: a made-up delivery, a fake host that records what the
// handler logged and asked to publish, an in-memory kv store, a scripted SQL database and a fake
// `fetch` (fake-fetch.js).
//
//     import { TestMessage } from "worker/testing";
//     const run = await new TestMessage({ n: 1 }).routingKey("orders.new").run(handle);
//     assert.deepEqual(run.outcome, ok());
//
// The fakes speak the WIT interfaces exactly as the component's bindings do (BigInt for 64-bit
// numbers, errors thrown with a `payload`), so the SDK code under test is the code in the plugin.
import { bindHost } from "./bindings.js";
import { fromWit } from "./outcome.js";
import { KvError } from "./kv.js";
import { SqlError, toValue, fromValue } from "./sql.js";
import { FakeFetch, NETWORK_ERROR } from "./fake-fetch.js";

export { FakeFetch, FetchedRequest, NETWORK_ERROR } from "./fake-fetch.js";

const utf8 = new TextEncoder();
const fromUtf8 = new TextDecoder();

const PUBLISH_ERRORS = ["not-allowed", "delay-refused", "too-many", "too-large", "invalid"];

/**
 * A delivery to call a handler with. The body is a string (UTF-8), a Uint8Array, or any other
 * value, sent as JSON with content type application/json.
 *
 * Defaults: routing key `test.message` (also the original key unless set), exchange `master`,
 * queue `test@queue`, attempt 1, not redelivered, config `{}`, every exchange allowed, no kv or
 * SQL grant (their calls fail with `denied`, as in the host), no HTTP destination allowed (`fetch`
 * rejects with a TypeError, as in the component when the host refuses a request).
 */
export class TestMessage {
  constructor(body = "") {
    this.delivery = {
      body: new Uint8Array(),
      routingKey: "test.message",
      originalRoutingKey: undefined,
      exchange: "master",
      queue: "test@queue",
      messageId: undefined,
      correlationId: undefined,
      contentType: undefined,
      timestamp: undefined,
      attempt: 1,
      redelivered: false,
      headers: [],
    };
    if (typeof body === "string") this.delivery.body = utf8.encode(body);
    else if (body instanceof Uint8Array) this.delivery.body = body;
    else {
      this.delivery.body = utf8.encode(JSON.stringify(body));
      this.delivery.contentType = "application/json";
    }
    this.configJson = "{}";
    this.allowed = null;
    this.refusal = null;
    this.kvStore = null;
    this.sqlDb = null;
    this.web = null;
  }

  routingKey(key) {
    this.delivery.routingKey = key;
    return this;
  }
  originalRoutingKey(key) {
    this.delivery.originalRoutingKey = key;
    return this;
  }
  exchange(name) {
    this.delivery.exchange = name;
    return this;
  }
  queue(name) {
    this.delivery.queue = name;
    return this;
  }
  /** Which call this is: 1 on the first. */
  attempt(n) {
    this.delivery.attempt = n;
    return this;
  }
  redelivered(flag = true) {
    this.delivery.redelivered = flag;
    return this;
  }
  messageId(id) {
    this.delivery.messageId = id;
    return this;
  }
  correlationId(id) {
    this.delivery.correlationId = id;
    return this;
  }
  contentType(type) {
    this.delivery.contentType = type;
    return this;
  }
  /** Seconds since 1970. */
  timestamp(seconds) {
    this.delivery.timestamp = BigInt(seconds);
    return this;
  }
  /** An AMQP header, as the host hands it over: text (objects and arrays as JSON). */
  header(name, value) {
    const text = typeof value === "object" && value !== null ? JSON.stringify(value) : String(value);
    this.delivery.headers.push({ name, value: text });
    return this;
  }
  /** The subscription's config table (an object), or the host's JSON text of it (a string). */
  config(value) {
    this.configJson = typeof value === "string" ? value : JSON.stringify(value);
    return this;
  }
  /** Only these exchanges may be published to; others are refused with not-allowed. */
  allowPublish(exchanges) {
    this.allowed = [...exchanges];
    return this;
  }
  /** Every publish is refused with this WIT publish-error, e.g. "too-many". */
  refusePublish(kind) {
    if (!PUBLISH_ERRORS.includes(kind)) throw new TypeError(`publish errors are ${PUBLISH_ERRORS.join(", ")}`);
    this.refusal = kind;
    return this;
  }
  /** Grants this kv store (a MemoryKv); kept by the caller, so it carries over between runs. */
  kv(store) {
    this.kvStore = store;
    return this;
  }
  /** Grants this database (a ScriptedSql). */
  sql(db) {
    this.sqlDb = db;
    return this;
  }
  /** Answers the handler's `fetch` calls with this FakeFetch (kept by the caller). */
  fetch(web) {
    if (!(web instanceof FakeFetch)) throw new TypeError("fetch(web) takes a FakeFetch");
    this.web = web;
    return this;
  }

  /**
   * Calls `handle` (the plugin's export) with this delivery under a fake host and returns a
   * TestRun, or a Promise of one when the handler is async: `await` suits both. An exception the
   * handler throws (a crash in the host) is thrown from here, and so is a `fetch` of a URL the
   * FakeFetch has no answer for.
   */
  run(handle) {
    const run = new TestRun();
    const delivery = {
      ...this.delivery,
      originalRoutingKey: this.delivery.originalRoutingKey ?? this.delivery.routingKey,
      headers: this.delivery.headers.map((h) => ({ ...h })),
    };
    const previous = bindHost({
      host: fakeHost(this, run),
      kv: this.kvStore ? this.kvStore.bindings() : deniedKv,
      sql: this.sqlDb ? this.sqlDb.bindings() : deniedSql,
    });
    const previousFetch = globalThis.fetch;
    globalThis.fetch = this.web ? this.web.fetch : deniedFetch;
    const unscripted = this.web ? this.web.unscripted.length : 0;
    const restore = () => {
      bindHost(previous);
      globalThis.fetch = previousFetch;
    };
    const done = (wit) => {
      const missing = this.web ? this.web.unscripted.slice(unscripted) : [];
      if (missing.length > 0) {
        const list = missing.map((r) => `${r.method} ${r.url}`).join(", ");
        throw new Error(`FakeFetch: no answer scripted for ${list}`);
      }
      return run.finish(wit);
    };
    let answer;
    try {
      answer = handle(delivery);
    } catch (e) {
      restore();
      throw e;
    }
    if (answer !== null && typeof answer?.then === "function") {
      return answer.then(
        (wit) => {
          restore();
          return done(wit);
        },
        (e) => {
          restore();
          throw e;
        },
      );
    }
    restore();
    return done(answer);
  }
}

/** What one handler call did. */
export class TestRun {
  constructor() {
    /** ok(), retry(..) or fail(..), comparable with assert.deepEqual. */
    this.outcome = undefined;
    /** The WIT outcome variant the export returned. */
    this.wit = undefined;
    /** Messages asked for, in order (the host sends them only when the outcome is ok). */
    this.published = [];
    /** `{ level, message }` lines logged through the host. */
    this.logs = [];
  }

  finish(wit) {
    this.wit = wit;
    this.outcome = fromWit(wit);
    return this;
  }

  /** Whether a logged line (at `level`, if given) contains `text`. */
  logged(text, level) {
    return this.logs.some((l) => l.message.includes(text) && (level === undefined || l.level === level));
  }
}

/** One message the handler asked to publish. */
export class Published {
  constructor(out) {
    this.exchange = out.exchange;
    this.routingKey = out.routingKey;
    this.body = out.body;
    this.contentType = out.contentType ?? null;
    this.headers = Object.fromEntries(out.headers.map((h) => [h.name, h.value]));
    this.delayMs = Number(out.delayMs);
  }
  text() {
    return fromUtf8.decode(this.body);
  }
  json() {
    return JSON.parse(this.text());
  }
}

function fakeHost(msg, run) {
  return {
    log(level, message) {
      run.logs.push({ level, message });
    },
    config() {
      return msg.configJson;
    },
    publish(out) {
      if (!(out.body instanceof Uint8Array) || typeof out.delayMs !== "bigint") throw refused("invalid");
      if (msg.refusal !== null) throw refused(msg.refusal);
      if (msg.allowed !== null && !msg.allowed.includes(out.exchange)) throw refused("not-allowed");
      run.published.push(new Published(out));
    },
  };
}

// A failed WIT call as the bindings report it: an Error carrying the error value.
function refused(payload) {
  const e = new Error(`host error: ${JSON.stringify(payload)}`);
  e.payload = payload;
  return e;
}

function denying(names) {
  return Object.fromEntries(names.map((n) => [n, () => { throw refused({ tag: "denied" }); }]));
}
const deniedKv = denying(["get", "set", "delete", "increment", "compareAndSwap"]);
const deniedSql = denying(["query", "execute"]);
const deniedFetch = async () => {
  throw new TypeError(NETWORK_ERROR);
};

// A thrown KvError/SqlError from a test's script, as the WIT error value.
function asPayload(e, ErrorClass) {
  if (e instanceof ErrorClass) return refused(e.detail === undefined ? { tag: e.kind } : { tag: e.kind, val: e.detail });
  return e;
}

/**
 * An in-memory kv store for tests: `new MemoryKv({ key: "value" })`. Values are kept as bytes;
 * increment keeps decimal text, as Redis does. TTLs are recorded in `ttls`, not enforced.
 */
export class MemoryKv {
  constructor(initial = {}) {
    this.values = new Map();
    this.ttls = new Map();
    this.failure = null;
    for (const [k, v] of Object.entries(initial)) this.values.set(k, typeof v === "string" ? utf8.encode(v) : v);
  }

  /** Every call fails with this kv error from now on (null: works again). */
  failWith(kind, detail) {
    this.failure = kind === null ? null : new KvError(kind, detail);
    return this;
  }

  /** The value of `key` as text, or null. */
  text(key) {
    const v = this.values.get(key);
    return v === undefined ? null : fromUtf8.decode(v);
  }

  bindings() {
    const store = this;
    const guard = (f) => (...args) => {
      if (store.failure) throw asPayload(store.failure, KvError);
      return f(...args);
    };
    const keep = (key, value, ttl) => {
      store.values.set(key, Uint8Array.from(value));
      if (ttl === undefined) store.ttls.delete(key);
      else store.ttls.set(key, Number(ttl));
    };
    return {
      get: guard((key) => store.values.get(key)),
      set: guard((key, value, ttl) => keep(key, value, ttl)),
      delete: guard((key) => {
        store.ttls.delete(key);
        return store.values.delete(key);
      }),
      increment: guard((key, delta) => {
        const text = store.text(key) ?? "0";
        if (!/^-?\d+$/.test(text)) throw refused({ tag: "unavailable", val: `value of ${key} is not an integer` });
        const next = BigInt(text) + delta;
        store.values.set(key, utf8.encode(next.toString()));
        return next;
      }),
      compareAndSwap: guard((key, expected, value, ttl) => {
        const current = store.values.get(key);
        const same = expected === undefined ? current === undefined : current !== undefined && equal(current, expected);
        if (same) keep(key, value, ttl);
        return same;
      }),
    };
  }
}

function equal(a, b) {
  return a.length === b.length && a.every((x, i) => x === b[i]);
}

/**
 * A scripted database for tests: each statement gets the answer of the first rule it matches.
 *
 *     const db = new ScriptedSql()
 *       .on(/^select balance/i, (params) => [{ balance: 10 }])   // rows as objects
 *       .on("update accounts", 1);                              // rows affected
 *
 * A rule is a RegExp or a substring of the statement; its answer a value or a function of
 * (params, statement) returning one: for query, `{ columns, rows }` or an array of row objects;
 * for execute, the rows affected. Throw a SqlError to answer with one. A statement no rule matches
 * fails with SqlError "other". Every call is kept in `statements` as `{ kind, statement, params }`.
 */
export class ScriptedSql {
  constructor() {
    this.rules = [];
    this.statements = [];
  }

  on(pattern, answer) {
    this.rules.push({ pattern, answer });
    return this;
  }

  answer(kind, statement, witParams) {
    const params = witParams.map(fromValue);
    this.statements.push({ kind, statement, params });
    const rule = this.rules.find(({ pattern }) =>
      pattern instanceof RegExp ? pattern.test(statement) : statement.includes(pattern),
    );
    if (!rule) throw refused({ tag: "other", val: `ScriptedSql: no rule matches ${JSON.stringify(statement)}` });
    try {
      return typeof rule.answer === "function" ? rule.answer(params, statement) : rule.answer;
    } catch (e) {
      throw asPayload(e, SqlError);
    }
  }

  bindings() {
    return {
      query: (statement, params) => witRows(this.answer("query", statement, params)),
      execute: (statement, params) => BigInt(this.answer("execute", statement, params) ?? 0),
    };
  }
}

function witRows(answer) {
  let columns = answer?.columns;
  let rows = answer?.rows;
  if (Array.isArray(answer)) {
    columns = answer.length > 0 ? Object.keys(answer[0]) : [];
    rows = answer.map((row) => columns.map((c) => row[c]));
  }
  if (!Array.isArray(columns) || !Array.isArray(rows)) {
    throw new TypeError("a scripted query answers { columns, rows } or an array of row objects");
  }
  return { columns, rows: rows.map((row) => row.map(toValue)) };
}
