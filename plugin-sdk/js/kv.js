// Key-value state in the store the subscription is granted (`kv = "NAME"`); writes apply at once.
import { bound } from "./bindings.js";
import { ownBytes } from "./bytes.js";
import { hostError } from "./errors.js";
import { number } from "./numbers.js";

const utf8 = new TextEncoder();
const fromUtf8 = new TextDecoder();

/** A refused kv call: `kind` is denied, unavailable, too-large or invalid-key. */
export class KvError extends Error {
  constructor(kind, detail) {
    super(detail ? `kv ${kind}: ${detail}` : `kv ${kind}`);
    this.name = "KvError";
    this.kind = kind;
    /** The text of `unavailable`, else undefined. */
    this.detail = detail;
  }
}

/** The value of `key` as bytes, or null when absent. */
export function get(key) {
  const value = call((kv) => kv.get(key));
  return value === undefined || value === null ? null : ownBytes(value);
}

/** The value of `key` as UTF-8 text, or null when absent. */
export function getText(key) {
  const value = get(key);
  return value === null ? null : fromUtf8.decode(value);
}

/** Sets `key` to `value` (a string, stored as UTF-8, or a Uint8Array); `ttlMs` expires it. */
export function set(key, value, { ttlMs } = {}) {
  call((kv) => kv.set(key, bytes(value), ms(ttlMs)));
}

/** Deletes `key`; true if it existed. */
function remove(key) {
  return call((kv) => kv.delete(key));
}
export { remove as delete };

/** Adds `delta` (default 1) to the integer at `key` (absent: 0) and returns the new value. */
export function increment(key, delta = 1) {
  return number(call((kv) => kv.increment(key, BigInt(delta))));
}

/**
 * Writes `value` only if the current value equals `expected` (null: only if `key` is absent);
 * true if it wrote.
 */
export function compareAndSwap(key, expected, value, { ttlMs } = {}) {
  const before = expected === null || expected === undefined ? undefined : bytes(expected);
  return call((kv) => kv.compareAndSwap(key, before, bytes(value), ms(ttlMs)));
}

function call(f) {
  try {
    return f(bound().kv);
  } catch (e) {
    const err = hostError(e);
    if (err === null) throw e;
    throw new KvError(err.tag, err.val);
  }
}

function bytes(value) {
  if (typeof value === "string") return utf8.encode(value);
  if (value instanceof Uint8Array) return value;
  throw new TypeError("a kv value is a string or a Uint8Array");
}

function ms(ttl) {
  if (ttl === undefined || ttl === null) return undefined;
  if (!(Number.isInteger(ttl) && ttl > 0)) throw new TypeError(`ttlMs must be a whole number > 0, not ${ttl}`);
  return BigInt(ttl);
}

