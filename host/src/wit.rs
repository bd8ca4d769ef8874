//! Host bindings of the component contract, generated from `wit/` (the one definition both the
//! host and the guest SDKs are built from).

wasmtime::component::bindgen!({
    path: "../wit",
    world: "worker:plugin/handler",
    imports: { default: async },
    exports: { default: async },
});
