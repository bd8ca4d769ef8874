// A fake `fetch` for native tests: canned answers per URL, and a record of every request. In the
// component, `fetch` is componentize-js's own over wasi:http/outgoing-handler and the host decides
// each request against the subscription's allowed_hosts; TestMessage.fetch(web) installs this one
// as the global `fetch` for one handler call.
//
//     const web = new FakeFetch()
//       .on("https://api.example/orders/7", { json: { id: 7 } })
//       .on(/^https:\/\/api\.example\/orders$/, (req) => ({ status: 201, json: req.json() }), { method: "POST" })
//       .on("https://down.example/", FakeFetch.networkError());
//     const run = await new TestMessage({ id: 7 }).fetch(web).run(handle);
//     assert.equal(web.requests[0].url, "https://api.example/orders/7");

/**
 * What the component's fetch rejects with when the host refuses a request (a destination outside
 * allowed_hosts) or cannot reach it: a TypeError with this message, as StarlingMonkey words it.
 */
export const NETWORK_ERROR = "NetworkError when attempting to fetch resource";

/** One request the handler made: method, url, headers (lower-case names), body bytes. */
export class FetchedRequest {
  constructor(method, url, headers, body) {
    this.method = method;
    this.url = url;
    this.headers = headers;
    this.body = body;
  }
  text() {
    return new TextDecoder().decode(this.body);
  }
  json() {
    return JSON.parse(this.text());
  }
}

/**
 * Answers requests as scripted. A rule is a URL (matched exactly, without the fragment) or a
 * RegExp (tested against the URL), optionally narrowed to `{ method }`; the last rule added that
 * matches answers. An answer is a Response, a status number, a string (200 with that body), an
 * object `{ status, headers, body, json }`, an Error (fetch rejects with it), or a function of the
 * FetchedRequest returning one of those (or a Promise of one).
 *
 * A request no rule matches rejects, and is kept in `unscripted`: TestMessage.run then throws, so
 * a plugin that catches fetch errors cannot hide an incomplete script.
 */
export class FakeFetch {
  constructor() {
    this.rules = [];
    /** Every request, in order (FetchedRequest). */
    this.requests = [];
    /** Requests no rule matched. */
    this.unscripted = [];
  }

  /** A network failure as the component sees one (a refused or unreachable destination). */
  static networkError() {
    return new TypeError(NETWORK_ERROR);
  }

  on(pattern, answer, { method } = {}) {
    this.rules.push({ pattern, answer, method: method?.toUpperCase() });
    return this;
  }

  /** The `fetch` function this fake stands for. */
  get fetch() {
    return (input, init) => this.#answer(input, init);
  }

  async #answer(input, init = {}) {
    const request = new Request(input, init);
    if (init.signal?.aborted) throw init.signal.reason;
    const body = request.body === null ? new Uint8Array() : new Uint8Array(await request.arrayBuffer());
    const headers = Object.fromEntries(request.headers);
    const seen = new FetchedRequest(request.method, request.url, headers, body);
    this.requests.push(seen);
    const url = request.url.split("#")[0];
    const rule = this.rules.findLast(
      (r) =>
        (r.method === undefined || r.method === seen.method) &&
        (r.pattern instanceof RegExp ? r.pattern.test(url) : normalize(r.pattern) === url),
    );
    if (!rule) {
      this.unscripted.push(seen);
      throw new Error(`FakeFetch: no answer scripted for ${seen.method} ${url}`);
    }
    const answer = typeof rule.answer === "function" ? await rule.answer(seen) : rule.answer;
    return response(answer, url);
  }
}

function normalize(url) {
  return new URL(url).href.split("#")[0];
}

function response(answer, url) {
  if (answer instanceof Error) throw answer;
  if (answer instanceof Response) return answer;
  if (typeof answer === "number") return new Response(null, { status: answer });
  if (typeof answer === "string" || answer instanceof Uint8Array) return new Response(answer);
  if (answer !== null && typeof answer === "object") {
    const headers = new Headers(answer.headers ?? {});
    let body = answer.body ?? null;
    if (answer.json !== undefined) {
      body = JSON.stringify(answer.json);
      if (!headers.has("content-type")) headers.set("content-type", "application/json");
    }
    return new Response(body, { status: answer.status ?? 200, headers });
  }
  throw new TypeError(`FakeFetch: ${url} is scripted with ${String(answer)}, not an answer`);
}
