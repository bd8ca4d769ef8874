// handler(): turns a plugin's function of a Message into the component's `handle` export.
import { Message } from "./message.js";
import { toWit } from "./outcome.js";

/**
 * The `handle` export for `fn(message)`, which returns ok(), retry(..), fail(..) or nothing (ok),
 * or a Promise of one. An exception it throws is a crash: the host retries the message with
 * worker-error, as for a trap.
 *
 *     export const handle = handler((msg) => { ...; return ok(); });
 */
export function handler(fn) {
  if (typeof fn !== "function") throw new TypeError("handler(fn) takes the function that handles a message");
  return function handle(delivery) {
    const answer = fn(new Message(delivery));
    return isPromise(answer) ? answer.then(toWit) : toWit(answer);
  };
}

function isPromise(value) {
  return value !== null && typeof value === "object" && typeof value.then === "function";
}
