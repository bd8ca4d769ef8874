// SQL on the database the subscription is granted (`sql = "NAME"`): one transaction per handler
// call, committed only when it answers ok. Placeholders are the backend's own ($1 or ?).
import { bound } from "./bindings.js";
import { ownBytes } from "./bytes.js";
import { hostError } from "./errors.js";
import { number } from "./numbers.js";

/** A refused or failed statement: `kind` is denied, unavailable, constraint, invalid or other. */
export class SqlError extends Error {
  constructor(kind, detail) {
    super(detail ? `sql ${kind}: ${detail}` : `sql ${kind}`);
    this.name = "SqlError";
    this.kind = kind;
    /** The database's message, when the kind carries one. */
    this.detail = detail;
  }
}

/** Marks a number as a SQL float even when it is whole (a whole number is sent as an integer). */
export function float(x) {
  return { [FLOAT]: Number(x) };
}
const FLOAT = Symbol("sql float");

/**
 * Runs a query; returns `{ columns, rows }`, each row an array of values (null, boolean, number,
 * BigInt for integers beyond 2^53, string, Uint8Array).
 */
export function query(statement, params = []) {
  const result = call((sql) => sql.query(statement, params.map(toValue)));
  return { columns: result.columns, rows: result.rows.map((row) => row.map(fromValue)) };
}

/** query() with each row as an object keyed by column name. */
export function queryObjects(statement, params = []) {
  const { columns, rows } = query(statement, params);
  return rows.map((row) => Object.fromEntries(columns.map((c, i) => [c, row[i]])));
}

/** Runs a statement; returns the number of rows affected. */
export function execute(statement, params = []) {
  return number(call((sql) => sql.execute(statement, params.map(toValue))));
}

function call(f) {
  try {
    return f(bound().sql);
  } catch (e) {
    const err = hostError(e);
    if (err === null) throw e;
    throw new SqlError(err.tag, err.val);
  }
}

/** A JS value as the WIT `value` variant. */
export function toValue(v) {
  if (v === null || v === undefined) return { tag: "null" };
  if (typeof v === "boolean") return { tag: "boolean", val: v };
  if (typeof v === "bigint") return { tag: "int", val: v };
  if (typeof v === "number") {
    return Number.isInteger(v) ? { tag: "int", val: BigInt(v) } : { tag: "float", val: v };
  }
  if (typeof v === "string") return { tag: "text", val: v };
  if (v instanceof Uint8Array) return { tag: "bytes", val: v };
  if (typeof v === "object" && FLOAT in v) return { tag: "float", val: v[FLOAT] };
  throw new TypeError(`a SQL parameter is null, a boolean, a number, a BigInt, a string or a Uint8Array, not ${typeof v}`);
}

/** A WIT `value` variant as a JS value. */
export function fromValue(v) {
  switch (v.tag) {
    case "null":
      return null;
    case "int":
      return number(v.val);
    case "bytes":
      return ownBytes(v.val);
    default:
      return v.val;
  }
}
