// Message: the delivery a handler gets, with JS types (numbers, null, a headers object).
import { ownBytes } from "./bytes.js";

const utf8 = new TextDecoder("utf-8", { fatal: true });

export class Message {
  /** From the WIT `delivery` record (u64 as BigInt, absent options as undefined). */
  constructor(delivery) {
    const d = delivery;
    /** The body bytes. */
    this.body = ownBytes(d.body);
    /** The routing key of this delivery: the queue itself for a retried or replayed message. */
    this.routingKey = d.routingKey;
    /** The key the message was first published with. */
    this.originalRoutingKey = d.originalRoutingKey;
    this.exchange = d.exchange;
    this.queue = d.queue;
    this.messageId = d.messageId ?? null;
    this.correlationId = d.correlationId ?? null;
    this.contentType = d.contentType ?? null;
    /** Seconds since 1970, or null. */
    this.timestamp = d.timestamp == null ? null : Number(d.timestamp);
    /** 1 on the first call. */
    this.attempt = d.attempt;
    this.redelivered = d.redelivered;
    /** AMQP headers by name; numbers and booleans as text, tables and arrays as JSON text. */
    this.headers = Object.fromEntries((d.headers ?? []).map((h) => [h.name, h.value]));
    Object.freeze(this.headers);
    Object.freeze(this);
  }

  /** The body as UTF-8 text; throws a TypeError when it is not valid UTF-8. */
  text() {
    return utf8.decode(this.body);
  }

  /** The body parsed as JSON; throws a SyntaxError when it is not JSON. */
  json() {
    return JSON.parse(this.text());
  }
}
