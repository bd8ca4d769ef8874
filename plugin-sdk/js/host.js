// Host services of every handler: log lines and the subscription's config.
import { bound } from "./bindings.js";

const LEVELS = ["trace", "debug", "info", "warn", "error"];

/** Logs a line at `level` (trace, debug, info, warn, error), tagged with the plugin by the host. */
export function log(level, ...parts) {
  if (!LEVELS.includes(level)) {
    throw new TypeError(`log level is one of ${LEVELS.join(", ")}, not ${level}`);
  }
  bound().host.log(level, parts.map(text).join(" "));
}

export const trace = (...parts) => log("trace", ...parts);
export const debug = (...parts) => log("debug", ...parts);
export const info = (...parts) => log("info", ...parts);
export const warn = (...parts) => log("warn", ...parts);
export const error = (...parts) => log("error", ...parts);

// Like console.log: strings as they are, everything else as JSON when it can be.
function text(part) {
  if (typeof part === "string") return part;
  if (part instanceof Error) return part.stack ?? String(part);
  try {
    const json = JSON.stringify(part, (_, v) => (typeof v === "bigint" ? v.toString() : v));
    return json ?? String(part);
  } catch {
    return String(part);
  }
}

// The last config text and its parse: the host hands the same text on every call.
let parsed = { text: null, value: null };

/**
 * The subscription's `config` table, parsed from the host's JSON; `defaults` fills keys the table
 * does not set. Returns a fresh object each call, so changing it changes nothing else.
 */
export function config(defaults = {}) {
  const json = bound().host.config();
  if (json !== parsed.text) {
    parsed = { text: json, value: json.trim() === "" ? {} : JSON.parse(json) };
  }
  const value = structuredClone(parsed.value);
  if (value === null || typeof value !== "object" || Array.isArray(value)) return value;
  return { ...defaults, ...value };
}
