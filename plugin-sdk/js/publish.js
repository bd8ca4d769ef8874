// Publishing: buffered by the host and sent (confirmed) only when the handler answers ok.
import { bound } from "./bindings.js";
import { hostError } from "./errors.js";

const utf8 = new TextEncoder();

/** Why the host refused a publish: `kind` is the WIT publish-error name, e.g. "not-allowed". */
export class PublishError extends Error {
  constructor(kind) {
    super(`publish refused: ${kind}`);
    this.name = "PublishError";
    /** not-allowed, delay-refused, too-many, too-large or invalid. */
    this.kind = kind;
  }
}

/**
 * Asks the host to publish `body` (a string, sent as UTF-8, or a Uint8Array) to `exchange` with
 * `routingKey`. Options: `contentType`, `headers` (an object of name: value; values become text),
 * `delayMs` (0: now). Throws a PublishError when the host refuses it.
 */
export function publish(exchange, routingKey, body, options = {}) {
  const { contentType, headers = {}, delayMs = 0 } = options;
  if (!(Number.isInteger(delayMs) && delayMs >= 0)) {
    throw new TypeError(`publish delayMs must be a whole number of milliseconds >= 0, not ${delayMs}`);
  }
  const message = {
    exchange: String(exchange),
    routingKey: String(routingKey),
    body: typeof body === "string" ? utf8.encode(body) : bytes(body),
    contentType: contentType ?? undefined,
    headers: Object.entries(headers).map(([name, value]) => ({ name, value: headerText(value) })),
    delayMs: BigInt(delayMs),
  };
  try {
    bound().host.publish(message);
  } catch (e) {
    const err = hostError(e);
    if (err === null) throw e;
    throw new PublishError(err.tag);
  }
}

/** publish() of `value` as JSON, with content type application/json unless options say otherwise. */
export function publishJson(exchange, routingKey, value, options = {}) {
  const body = JSON.stringify(value);
  if (body === undefined) throw new TypeError(`publishJson: ${value} has no JSON form`);
  publish(exchange, routingKey, body, { contentType: "application/json", ...options });
}

function bytes(body) {
  if (body instanceof Uint8Array) return body;
  if (ArrayBuffer.isView(body)) return new Uint8Array(body.buffer, body.byteOffset, body.byteLength);
  if (body instanceof ArrayBuffer) return new Uint8Array(body);
  throw new TypeError("a message body is a string or a Uint8Array");
}

// AMQP header values as the host carries them: text; objects and arrays as JSON text.
function headerText(value) {
  return typeof value === "object" && value !== null ? JSON.stringify(value) : String(value);
}
