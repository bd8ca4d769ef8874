// Bytes the host hands over (a list<u8> of the WIT world) as a Uint8Array of the plugin's realm.
//
// componentize-js's bindings run in a global of their own, so the Uint8Array they lift is of that
// realm: `instanceof Uint8Array` is false in the plugin's, and Uint8Array.from on it walks its
// iterator one byte at a time (~1.5 µs a byte in StarlingMonkey: 1.5 ms for a 1 KiB body). A view
// over its buffer is a Uint8Array of this realm, without a copy; the bindings already copied the
// bytes out of linear memory, so nothing else holds that buffer.
export function ownBytes(v) {
  if (v instanceof Uint8Array) return v;
  if (ArrayBuffer.isView(v)) return new Uint8Array(v.buffer, v.byteOffset, v.byteLength);
  return Uint8Array.from(v ?? []);
}
