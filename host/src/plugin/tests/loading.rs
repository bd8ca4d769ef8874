//! Loading a version: hashing, the ABI check, refusals with clear errors.

use super::*;

#[test]
fn version_identity() {
    let plugin = load("ok");
    assert_eq!(plugin.name(), "ok.wasm");
    assert_eq!(plugin.sha256().len(), 64);
    assert!(
        plugin
            .sha256()
            .chars()
            .all(|c| c.is_ascii_hexdigit() && !c.is_ascii_uppercase())
    );
    assert_eq!(plugin.short_sha(), &plugin.sha256()[..12]);
    assert!(!plugin.uses_wasi());
}

#[test]
fn missing_marker_is_refused() {
    let err = runtime()
        .load_bytes("old.wasm", &fixture_bytes("no_marker"))
        .unwrap_err();
    assert!(matches!(
        err,
        LoadError::MissingExport {
            export: "worker_abi_v1",
            ..
        }
    ));
    assert_eq!(
        err.to_string(),
        "old.wasm: missing export `worker_abi_v1` (a function () -> ()); is it built for worker ABI v1?"
    );
}

#[test]
fn missing_handle_is_refused() {
    let wasm =
        wat::parse_str(r#"(module (memory (export "memory") 1) (func (export "worker_abi_v1")))"#)
            .expect("wat");
    let err = runtime().load_bytes("x.wasm", &wasm).unwrap_err();
    assert!(
        matches!(
            err,
            LoadError::MissingExport {
                export: "worker_handle",
                ..
            }
        ),
        "{err}"
    );
}

#[test]
fn wrong_handle_type_is_refused() {
    let wasm = wat::parse_str(
        r#"(module (memory (export "memory") 1) (func (export "worker_abi_v1"))
           (func (export "worker_handle") (result i64) (i64.const 0)))"#,
    )
    .expect("wat");
    let err = runtime()
        .load_bytes("x.wasm", &wasm)
        .unwrap_err()
        .to_string();
    assert_eq!(
        err,
        "x.wasm: export `worker_handle` is a function () -> (i64), expected a function () -> (i32)"
    );
}

#[test]
fn import_from_another_module_is_refused() {
    let err = runtime()
        .load_bytes("env.wasm", &fixture_bytes("bad_import"))
        .unwrap_err();
    assert!(matches!(err, LoadError::BadImport { .. }));
    assert_eq!(
        err.to_string(),
        "env.wasm: import `env.now` is not allowed: only `worker_v1` and `wasi_snapshot_preview1` can be imported"
    );
}

#[test]
fn unknown_or_mistyped_worker_import_is_refused() {
    let unknown = wat::parse_str(
        r#"(module (import "worker_v1" "sleep" (func)) (memory (export "memory") 1)
           (func (export "worker_abi_v1")) (func (export "worker_handle") (result i32) (i32.const 0)))"#,
    )
    .expect("wat");
    let err = runtime()
        .load_bytes("u.wasm", &unknown)
        .unwrap_err()
        .to_string();
    assert!(
        err.starts_with(
            "u.wasm: import `worker_v1.sleep` is not allowed: worker_v1 has no such function"
        ),
        "{err}"
    );

    let mistyped = wat::parse_str(
        r#"(module (import "worker_v1" "body_len" (func (result i64))) (memory (export "memory") 1)
           (func (export "worker_abi_v1")) (func (export "worker_handle") (result i32) (i32.const 0)))"#,
    )
    .expect("wat");
    let err = runtime()
        .load_bytes("t.wasm", &mistyped)
        .unwrap_err()
        .to_string();
    assert_eq!(
        err,
        "t.wasm: import `worker_v1.body_len` is not allowed: it is a function () -> (i64), expected a function () -> (i32)"
    );
}

#[test]
fn unknown_wasi_function_is_refused() {
    let wasm = wat::parse_str(
        r#"(module (import "wasi_snapshot_preview1" "no_such_call" (func)) (memory (export "memory") 1)
           (func (export "worker_abi_v1")) (func (export "worker_handle") (result i32) (i32.const 0)))"#,
    )
    .expect("wat");
    let err = runtime().load_bytes("w.wasm", &wasm).unwrap_err();
    assert!(matches!(err, LoadError::Link { .. }), "{err}");
    assert!(err.to_string().contains("no_such_call"), "{err}");
}

#[test]
fn garbage_file_is_not_wasm() {
    let err = runtime()
        .load_bytes("notes.wasm", b"this is not a wasm file\n")
        .unwrap_err();
    assert!(matches!(err, LoadError::NotWasm { .. }));
    assert_eq!(
        err.to_string(),
        "notes.wasm: not a WebAssembly module (the file does not start with \\0asm)"
    );
    let err = runtime().load_bytes("empty.wasm", b"").unwrap_err();
    assert!(matches!(err, LoadError::NotWasm { .. }));
}

#[test]
fn truncated_wasm_does_not_compile() {
    let mut wasm = fixture_bytes("ok");
    wasm.truncate(wasm.len() - 3);
    let err = runtime().load_bytes("cut.wasm", &wasm).unwrap_err();
    assert!(matches!(err, LoadError::Compile { .. }), "{err}");
    assert!(
        err.to_string().starts_with("cut.wasm: does not compile: "),
        "{err}"
    );
}

#[test]
fn component_of_another_world_is_refused() {
    let empty = wat::parse_str("(component)").expect("wat");
    let err = runtime().load_bytes("c.wasm", &empty).unwrap_err();
    assert!(matches!(err, LoadError::WrongWorld { .. }), "{err}");
    assert_eq!(
        err.to_string(),
        "c.wasm: not a component of the world worker:plugin/handler@2.0.0: no export `handle` found"
    );
}

#[test]
fn component_importing_what_the_host_lacks_is_refused_naming_it() {
    let wat = r#"(component (import "acme:db/query@1.0.0" (instance (export "run" (func)))))"#;
    let err = runtime()
        .load_bytes("c.wasm", &wat::parse_str(wat).expect("wat"))
        .unwrap_err();
    assert!(matches!(err, LoadError::Link { .. }), "{err}");
    assert!(err.to_string().contains("acme:db/query@1.0.0"), "{err}");
}

#[test]
fn shared_memory_is_refused() {
    let wasm = wat::parse_str(
        r#"(module (memory (export "memory") 1 1 shared) (func (export "worker_abi_v1"))
           (func (export "worker_handle") (result i32) (i32.const 0)))"#,
    );
    // Either the text or the engine refuses it; it must never load.
    if let Ok(wasm) = wasm {
        assert!(runtime().load_bytes("s.wasm", &wasm).is_err());
    }
}

#[test]
fn load_file_reads_hashes_and_names_the_file() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("user_monitor.wasm");
    let bytes = fixture_bytes("ok");
    std::fs::write(&path, &bytes).expect("write");
    let plugin = runtime().load_file(&path).expect("loads");
    assert_eq!(plugin.name(), "user_monitor.wasm");
    use sha2::Digest;
    assert_eq!(plugin.sha256(), hex::encode(sha2::Sha256::digest(&bytes)));

    let err = runtime()
        .load_file(&dir.path().join("gone.wasm"))
        .unwrap_err();
    assert!(matches!(err, LoadError::Io { .. }));
    assert!(
        err.to_string().starts_with("gone.wasm: cannot read: "),
        "{err}"
    );
}

#[test]
fn component_larger_than_the_pool_is_refused_at_load() {
    let instances = "(core instance (instantiate $m))\n".repeat(40);
    let wat = format!("(component (core module $m) {instances})");
    let err = runtime()
        .load_bytes("big.wasm", &wat::parse_str(&wat).expect("wat"))
        .unwrap_err();
    let text = err.to_string();
    assert!(matches!(err, LoadError::TooBigForPool { .. }), "{text}");
    assert!(
        text.starts_with("big.wasm: needs more than the instance pool gives one plugin instance: "),
        "{text}"
    );
    assert!(text.contains("40") && text.contains("32"), "{text}");
}
