// WIT 64-bit integers (BigInt in the bindings) as JS numbers where that loses nothing.

/** `big` as a number while it is exact, else the BigInt itself. */
export function number(big) {
  const n = Number(big);
  return Number.isSafeInteger(n) ? n : big;
}
