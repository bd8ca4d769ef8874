// How a WIT `result` error reaches JS: the bindings throw an Error whose `payload` is the error
// value (as jco does: `{ tag, val }` for a variant, the case name for an enum).

/** The error value a failed host call threw, as `{ tag, val }`; null when `e` is not one. */
export function hostError(e) {
  if (e === null || e === undefined) return null;
  const payload = typeof e === "object" && "payload" in e ? e.payload : e;
  if (typeof payload === "string") return { tag: payload, val: undefined };
  if (typeof payload === "object" && payload !== null && typeof payload.tag === "string") {
    return { tag: payload.tag, val: payload.val };
  }
  return null;
}
