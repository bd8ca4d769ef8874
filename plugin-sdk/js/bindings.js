// The host functions the API calls: the component's WIT imports inside a plugin, a fake in tests.
//
// The SDK never imports `worker:plugin/...` itself, so it loads under plain Node; component.js
// (bundled only into the .wasm) or testing.js hands the functions over with bindHost().

let current = null;

/** Installs `{ host, kv, sql }` (the three WIT interfaces) and returns the previous ones. */
export function bindHost(bindings) {
  const previous = current;
  current = bindings;
  return previous;
}

/** The installed WIT interfaces; throws outside a handler call when none are bound. */
export function bound() {
  if (current === null) {
    throw new Error(
      "worker: no host bound (in a test, run the handler with TestMessage from 'worker/testing'; " +
        "in a plugin, host functions cannot run at module top level, which runs at build time)",
    );
  }
  return current;
}
