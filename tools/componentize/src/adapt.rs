//! A wasm32-wasip1 core module made a component: wit-component reads the world from the custom
//! section wit-bindgen left in the module and replaces the module's `wasi_snapshot_preview1`
//! imports with the preview1 adapter, which implements them on WASI 0.2. This is what rustup's
//! wasm32-wasip2 linker does, for toolchains (Debian's) that only build wasip1.

use anyhow::Context;
use wasi_preview1_component_adapter_provider::{
    WASI_SNAPSHOT_PREVIEW1_ADAPTER_NAME, WASI_SNAPSHOT_PREVIEW1_REACTOR_ADAPTER,
};
use wit_component::ComponentEncoder;

/// The component of a plugin module. Plugins are libraries (`cdylib`, no `main`), so the
/// reactor adapter: it exports no `wasi:cli/run`.
pub fn component(module: &[u8]) -> anyhow::Result<Vec<u8>> {
    ComponentEncoder::default()
        .module(module)
        .context("not a core module with the world's component type (built with the SDK?)")?
        .adapter(
            WASI_SNAPSHOT_PREVIEW1_ADAPTER_NAME,
            WASI_SNAPSHOT_PREVIEW1_REACTOR_ADAPTER,
        )
        .context("the preview1 adapter")?
        .validate(true)
        .encode()
        .context("cannot make a component of it")
}
