// Outcomes: what a handler answers (ok, retry, fail), and their WIT `outcome` variant.

/** Done: the message is acked and the buffered publishes are sent. */
export function ok() {
  return Object.freeze({ kind: "ok" });
}

/**
 * Try again later: the message comes back to its queue. `afterMs` asks for at least that delay;
 * without it the subscription's retry_delays apply. Counts against max_retries.
 */
export function retry(reason = "retry", { afterMs } = {}) {
  if (afterMs !== undefined && !(Number.isInteger(afterMs) && afterMs >= 0)) {
    throw new TypeError(`retry afterMs must be a whole number of milliseconds >= 0, not ${afterMs}`);
  }
  return Object.freeze({ kind: "retry", reason: String(reason), afterMs });
}

/** Give up on this message: it is parked, with the reason. */
export function fail(reason = "failed") {
  return Object.freeze({ kind: "fail", reason: String(reason) });
}

/** The WIT variant for an outcome; `undefined` (a handler that returns nothing) is ok. */
export function toWit(outcome) {
  if (outcome === undefined || outcome === null) return { tag: "ok" };
  switch (outcome.kind) {
    case "ok":
      return { tag: "ok" };
    case "retry":
      return {
        tag: "retry",
        val: {
          reason: outcome.reason,
          afterMs: outcome.afterMs === undefined ? undefined : BigInt(outcome.afterMs),
        },
      };
    case "fail":
      return { tag: "fail", val: outcome.reason };
  }
  throw new TypeError(
    `a handler returns ok(), retry(reason) or fail(reason) (or nothing), not ${describe(outcome)}`,
  );
}

/** The outcome for a WIT variant: the reverse of toWit, for tests. */
export function fromWit(variant) {
  switch (variant?.tag) {
    case "ok":
      return ok();
    case "retry": {
      const ms = variant.val.afterMs;
      return retry(variant.val.reason, { afterMs: ms === undefined ? undefined : Number(ms) });
    }
    case "fail":
      return fail(variant.val);
  }
  throw new TypeError(`not a WIT outcome: ${describe(variant)}`);
}

function describe(value) {
  try {
    return JSON.stringify(value) ?? String(value);
  } catch {
    return String(value);
  }
}
