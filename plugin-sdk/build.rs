//! Picks the SDK's backend once, as `cfg(worker_backend = "...")`, so the sources say which one
//! they belong to instead of repeating target expressions: `v1` (the `worker_v1` core-module
//! ABI), `component` (the WIT world `worker:plugin/handler@2.0.0`) or `native` (the test
//! harness's in-process host).

fn main() {
    println!(
        "cargo::rustc-check-cfg=cfg(worker_backend, values(\"v1\", \"component\", \"native\"))"
    );
    println!("cargo::rerun-if-changed=build.rs");
    println!("cargo::rerun-if-changed=../wit");
    let var = |name: &str| std::env::var(name).unwrap_or_default();
    let backend = if var("CARGO_CFG_TARGET_FAMILY")
        .split(',')
        .all(|f| f != "wasm")
    {
        "native"
    } else if var("CARGO_CFG_TARGET_OS") == "wasi"
        && std::env::var_os("CARGO_FEATURE_ABI_V1").is_none()
    {
        "component"
    } else {
        "v1"
    };
    println!("cargo::rustc-cfg=worker_backend=\"{backend}\"");
}
