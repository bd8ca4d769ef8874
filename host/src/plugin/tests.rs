//! Runtime tests against the WAT fixtures in `host/tests/fixtures`; no broker.

use std::path::PathBuf;
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use super::*;

const MIB: u64 = 1024 * 1024;

fn runtime() -> &'static Runtime {
    static RT: OnceLock<Runtime> = OnceLock::new();
    RT.get_or_init(|| {
        Runtime::new(&RuntimeConfig {
            max_instances: 16,
            max_memory: 64 * MIB,
        })
        .expect("runtime")
    })
}

fn fixture_path(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures")
        .join(format!("{name}.wat"))
}

fn fixture_bytes(name: &str) -> Vec<u8> {
    wat::parse_file(fixture_path(name)).expect("fixture parses")
}

fn load(name: &str) -> Arc<Plugin> {
    runtime()
        .load_bytes(&format!("{name}.wasm"), &fixture_bytes(name))
        .unwrap_or_else(|e| panic!("{e}"))
}

fn limits() -> Limits {
    Limits {
        timeout: Duration::from_secs(5),
        memory_limit: 16 * MIB,
    }
}

fn policy() -> PublishPolicy {
    PublishPolicy {
        allowed_exchanges: vec!["out".into()],
        ..PublishPolicy::default()
    }
}

fn input(body: impl Into<bytes::Bytes>) -> Input {
    Input {
        body: body.into(),
        meta: Meta {
            routing_key: "Q".into(),
            original_routing_key: "user.created".into(),
            exchange: "master".into(),
            queue: "ucenter@user".into(),
            message_id: Some("m-1".into()),
            correlation_id: Some("c-9".into()),
            content_type: Some("application/json".into()),
            timestamp: Some(1_700_000_000),
            attempt: 2,
            redelivered: true,
            headers: vec![
                ("x-tenant".into(), "acme".into()),
                ("x-count".into(), "42".into()),
            ],
        },
        config_json: Arc::from(r#"{"greeting":"hello"}"#),
        publish: Arc::new(policy()),
    }
}

async fn run(name: &str, input: Input) -> Invocation {
    load(name).handle(Arc::new(input), &limits()).await
}

// ---- answers -------------------------------------------------------------

#[tokio::test]
async fn answers_map_to_ok_retry_fail() {
    assert_eq!(run("ok", input("")).await.answer, Ok(Answer::Ok));
    assert_eq!(run("retry", input("")).await.answer, Ok(Answer::Retry));
    assert_eq!(run("fail", input("")).await.answer, Ok(Answer::Fail));
}

#[tokio::test]
async fn unknown_answer_code_is_an_error() {
    let inv = run("bad_answer", input("")).await;
    assert_eq!(inv.answer, Err(HandlerError::BadAnswer(7)));
    assert!(inv.answer.unwrap_err().to_string().contains("returned 7"));
}

#[tokio::test]
async fn every_message_gets_a_fresh_instance() {
    let plugin = load("fresh");
    for _ in 0..3 {
        let inv = plugin.handle(Arc::new(input("")), &limits()).await;
        assert_eq!(inv.answer, Ok(Answer::Ok));
    }
}

// ---- imports -------------------------------------------------------------

#[tokio::test]
async fn body_of_zero_bytes() {
    let inv = run("body", input("")).await;
    assert_eq!(inv.answer, Ok(Answer::Ok), "{:?}", inv.logs);
    assert_eq!(inv.publishes.len(), 1);
    assert!(inv.publishes[0].body.is_empty());
}

#[tokio::test]
async fn body_of_one_mib() {
    let body: Vec<u8> = (0..MIB as usize).map(|i| (i % 251) as u8).collect();
    let inv = run("body", input(body.clone())).await;
    assert_eq!(inv.answer, Ok(Answer::Ok), "{:?}", inv.answer);
    assert_eq!(inv.publishes.len(), 1);
    assert_eq!(inv.publishes[0].exchange, "out");
    assert_eq!(inv.publishes[0].routing_key, "echo");
    assert!(inv.publishes[0].body == body, "body read back differs");
}

async fn meta(key: &str) -> Option<String> {
    let inv = run("meta", input(key.to_string())).await;
    assert_eq!(inv.answer, Ok(Answer::Ok), "{key}: {:?}", inv.answer);
    let p = &inv.publishes[0];
    match p.routing_key.as_str() {
        "value" => Some(String::from_utf8(p.body.clone()).expect("utf-8")),
        "absent" => None,
        other => panic!("unexpected key {other}"),
    }
}

#[tokio::test]
async fn meta_get_serves_every_key() {
    let expected = [
        ("routing-key", Some("Q")),
        ("original-routing-key", Some("user.created")),
        ("exchange", Some("master")),
        ("queue", Some("ucenter@user")),
        ("message-id", Some("m-1")),
        ("correlation-id", Some("c-9")),
        ("content-type", Some("application/json")),
        ("timestamp", Some("1700000000")),
        ("attempt", Some("2")),
        ("redelivered", Some("true")),
        ("header:x-tenant", Some("acme")),
        ("header:x-count", Some("42")),
        ("header:x-missing", None),
        ("no-such-key", None),
    ];
    for (key, want) in expected {
        assert_eq!(meta(key).await.as_deref(), want, "key {key}");
    }
}

#[tokio::test]
async fn meta_get_absent_optional_properties() {
    let mut inp = input("message-id");
    inp.meta.message_id = None;
    let inv = run("meta", inp).await;
    assert_eq!(inv.publishes[0].routing_key, "absent");
}

#[tokio::test]
async fn config_get_serves_the_subscription_config() {
    let inv = run("config", input("")).await;
    assert_eq!(inv.answer, Ok(Answer::Ok), "{:?}", inv.answer);
    assert_eq!(inv.publishes[0].body, br#"{"greeting":"hello"}"#);
}

#[tokio::test]
async fn log_lines_and_reason() {
    let inv = run("log", input("")).await;
    assert_eq!(inv.answer, Ok(Answer::Fail));
    let got: Vec<(LogLevel, &str)> = inv
        .logs
        .iter()
        .map(|l| (l.level, l.message.as_str()))
        .collect();
    assert_eq!(
        got,
        [
            (LogLevel::Trace, "trace"),
            (LogLevel::Debug, "debug"),
            (LogLevel::Info, "info"),
            (LogLevel::Warn, "warn"),
            (LogLevel::Error, "error"),
            (LogLevel::Error, "loud"),
        ]
    );
    assert!(inv.logs.iter().all(|l| l.source == LogSource::Log));
    // One line, for the worker-error header.
    assert_eq!(inv.reason.as_deref(), Some("bad input second line"));
    assert_eq!(inv.cause().as_deref(), Some("bad input second line"));
}

#[tokio::test]
async fn publish_accepted_refused_and_over_the_bounds() {
    let mut inp = input("");
    inp.publish = Arc::new(PublishPolicy {
        allowed_exchanges: vec!["out".into()],
        max_delay: Some(Duration::from_secs(10)),
        max_messages: 3,
        max_total_bytes: 100,
    });
    let inv = run("publish", inp).await;
    assert_eq!(inv.answer, Ok(Answer::Ok));
    // a ok, b exchange refused, c delayed ok, d negative delay, e too many
    // bytes, f ok, g too many messages.
    assert_eq!(inv.reason.as_deref(), Some("0102403"));
    let keys: Vec<&str> = inv
        .publishes
        .iter()
        .map(|p| p.routing_key.as_str())
        .collect();
    assert_eq!(keys, ["k1", "k2", "k5"]);
    assert_eq!(inv.publishes[0].body, b"hello");
    assert_eq!(inv.publishes[1].delay, Some(Duration::from_millis(1000)));
    assert_eq!(inv.publishes[0].delay, None);
    let refusals = inv
        .logs
        .iter()
        .filter(|l| l.source == LogSource::Host)
        .count();
    assert_eq!(refusals, 4, "{:?}", inv.logs);
}

#[tokio::test]
async fn publish_with_delay_refused_when_delays_are_off() {
    let mut inp = input("");
    inp.publish = Arc::new(PublishPolicy {
        allowed_exchanges: vec!["out".into()],
        max_delay: None,
        max_messages: 3,
        max_total_bytes: 100,
    });
    let inv = run("publish", inp).await;
    // c is now refused, so f and g both fit.
    assert_eq!(inv.reason.as_deref(), Some("0122400"));
}

#[tokio::test]
async fn publishes_are_dropped_unless_ok() {
    let mut inp = input("");
    inp.publish = Arc::new(PublishPolicy::default());
    // No exchange allowed: the body fixture's publish is refused, so it traps.
    let inv = run("body", inp).await;
    assert!(matches!(inv.answer, Err(HandlerError::Trap { .. })));
    assert!(inv.publishes.is_empty());
}

// ---- failures ------------------------------------------------------------

#[tokio::test]
async fn trap_unreachable_names_kind_and_function() {
    let inv = run("trap_unreachable", input("")).await;
    let err = inv.answer.unwrap_err();
    assert!(
        matches!(
            &err,
            HandlerError::Trap {
                kind: TrapKind::Unreachable,
                ..
            }
        ),
        "{err:?}"
    );
    let text = err.to_string();
    assert!(text.starts_with("trap: unreachable"), "{text}");
    assert!(text.contains("explode"), "{text}");
}

#[tokio::test]
async fn trap_out_of_bounds() {
    let err = run("trap_oob", input("")).await.answer.unwrap_err();
    assert!(
        matches!(
            err,
            HandlerError::Trap {
                kind: TrapKind::OutOfBounds,
                ..
            }
        ),
        "{err:?}"
    );
}

#[tokio::test]
async fn trap_stack_overflow() {
    let err = run("stack_overflow", input("")).await.answer.unwrap_err();
    assert!(
        matches!(
            err,
            HandlerError::Trap {
                kind: TrapKind::StackOverflow,
                ..
            }
        ),
        "{err:?}"
    );
    assert!(err.to_string().contains("stack overflow"));
}

#[tokio::test]
async fn infinite_loop_is_stopped_by_the_timeout() {
    let plugin = load("infinite_loop");
    let lim = Limits {
        timeout: Duration::from_millis(200),
        memory_limit: 16 * MIB,
    };
    let inv = plugin.handle(Arc::new(input("")), &lim).await;
    assert_eq!(
        inv.answer,
        Err(HandlerError::Timeout(Duration::from_millis(200)))
    );
    assert!(inv.elapsed >= Duration::from_millis(200));
    assert!(inv.elapsed < Duration::from_secs(5), "{:?}", inv.elapsed);
    assert_eq!(
        inv.answer.unwrap_err().to_string(),
        "timeout: handler still running after 200ms"
    );
}

#[tokio::test(flavor = "current_thread")]
async fn infinite_loop_yields_to_other_tasks() {
    // On a single-threaded runtime, a spinning plugin must still let a timer fire.
    let plugin = load("infinite_loop");
    let lim = Limits {
        timeout: Duration::from_millis(300),
        memory_limit: 16 * MIB,
    };
    let ticker = tokio::spawn(async {
        tokio::time::sleep(Duration::from_millis(50)).await;
        std::time::Instant::now()
    });
    let inv = plugin.handle(Arc::new(input("")), &lim).await;
    let done = std::time::Instant::now();
    let fired = ticker.await.expect("ticker task");
    assert!(matches!(inv.answer, Err(HandlerError::Timeout(_))));
    // Without yielding, the timer task could only run after the call returned.
    assert!(fired < done, "timer only ran after the call");
}

#[tokio::test]
async fn memory_bomb_is_stopped_by_the_limit() {
    let plugin = load("memory_bomb");
    let lim = Limits {
        timeout: Duration::from_secs(5),
        memory_limit: 4 * MIB,
    };
    let inv = plugin.handle(Arc::new(input("")), &lim).await;
    assert_eq!(
        inv.answer,
        Err(HandlerError::MemoryLimit { limit: 4 * MIB })
    );
    assert!(
        inv.answer
            .unwrap_err()
            .to_string()
            .starts_with("memory limit")
    );
}

#[tokio::test]
async fn initial_memory_over_the_limit_is_a_memory_limit_error() {
    let plugin = load("ok");
    let lim = Limits {
        timeout: Duration::from_secs(5),
        memory_limit: 1024, // less than the fixture's one page
    };
    let inv = plugin.handle(Arc::new(input("")), &lim).await;
    assert_eq!(inv.answer, Err(HandlerError::MemoryLimit { limit: 1024 }));
}

#[tokio::test]
async fn bad_pointer_in_an_import_call_traps_with_a_cause() {
    let inv = run("bad_pointer", input("abc")).await;
    let err = inv.answer.unwrap_err();
    let text = err.to_string();
    assert!(matches!(err, HandlerError::BadImportCall(_)), "{err:?}");
    assert!(text.contains("worker_v1.body_read"), "{text}");
    assert!(text.contains("outside guest memory"), "{text}");
}

// ---- loading -------------------------------------------------------------

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
fn component_is_refused() {
    let err = runtime()
        .load_bytes("c.wasm", b"\0asm\x0d\x00\x01\x00")
        .unwrap_err();
    assert!(matches!(err, LoadError::Component { .. }), "{err}");
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

// ---- WASI ----------------------------------------------------------------

#[tokio::test]
async fn wasi_gets_nothing_and_its_output_becomes_log_lines() {
    let plugin = load("wasi");
    assert!(plugin.uses_wasi());
    let inv = plugin.handle(Arc::new(input("")), &limits()).await;
    assert_eq!(inv.answer, Ok(Answer::Ok), "{:?}", inv.answer);
    let got: Vec<(LogSource, LogLevel, &str)> = inv
        .logs
        .iter()
        .map(|l| (l.source, l.level, l.message.as_str()))
        .collect();
    assert_eq!(
        got,
        [
            (LogSource::Stdout, LogLevel::Info, "hello from stdout"),
            (LogSource::Stderr, LogLevel::Warn, "oops on stderr"),
        ]
    );
}

#[tokio::test]
async fn wasi_output_is_bounded() {
    let inv = run("wasi_flood", input("")).await;
    assert_eq!(inv.answer, Ok(Answer::Ok), "{:?}", inv.answer);
    let bytes: usize = inv.logs.iter().map(|l| l.message.len()).sum();
    assert!(bytes <= 64 * 1024, "{bytes}");
    assert!(inv.logs.len() <= 257, "{}", inv.logs.len());
    let last = inv.logs.last().expect("lines");
    assert_eq!(last.source, LogSource::Host);
    assert!(last.message.contains("dropped"), "{}", last.message);
}

// ---- concurrency ---------------------------------------------------------

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn many_instances_run_at_once() {
    // More calls than pool slots (16): the extra ones wait, none fail.
    let plugin = load("body");
    let mut tasks = tokio::task::JoinSet::new();
    for i in 0..200u32 {
        let plugin = plugin.clone();
        tasks.spawn(async move {
            let body = format!("message number {i}").into_bytes();
            let inv = plugin
                .handle(Arc::new(input(body.clone())), &limits())
                .await;
            assert_eq!(inv.answer, Ok(Answer::Ok), "{:?}", inv.answer);
            assert_eq!(inv.publishes[0].body, body);
        });
    }
    let mut done = 0;
    while let Some(res) = tasks.join_next().await {
        res.expect("task");
        done += 1;
    }
    assert_eq!(done, 200);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_slow_plugin_does_not_block_others() {
    // Its own runtime: pool slots shared with other tests could make the fast
    // call wait for a slot, which is not what this test is about.
    let rt = Runtime::new(&RuntimeConfig {
        max_instances: 8,
        max_memory: 16 * MIB,
    })
    .expect("runtime");
    let slow = rt
        .load_bytes("loop.wasm", &fixture_bytes("infinite_loop"))
        .expect("loads");
    let fast = rt
        .load_bytes("ok.wasm", &fixture_bytes("ok"))
        .expect("loads");
    let lim = Limits {
        timeout: Duration::from_secs(3),
        memory_limit: 16 * MIB,
    };
    // Twice as many spinning calls as worker threads.
    let spinners: Vec<_> = (0..4)
        .map(|_| {
            let slow = slow.clone();
            tokio::spawn(async move { slow.handle(Arc::new(input("")), &lim).await })
        })
        .collect();
    tokio::time::sleep(Duration::from_millis(20)).await;
    let inv = tokio::spawn(async move { fast.handle(Arc::new(input("")), &lim).await })
        .await
        .expect("fast task");
    assert_eq!(inv.answer, Ok(Answer::Ok));
    assert!(
        spinners.iter().all(|s| !s.is_finished()),
        "the fast call waited for the spinning ones"
    );
    for s in spinners {
        let inv = s.await.expect("task");
        assert!(matches!(inv.answer, Err(HandlerError::Timeout(_))));
    }
}

#[test]
fn emit_logs_does_not_panic_without_a_subscriber() {
    let plugin = load("ok");
    let inv = Invocation {
        answer: Ok(Answer::Ok),
        reason: None,
        publishes: vec![],
        logs: vec![LogLine {
            level: LogLevel::Warn,
            message: "hi".into(),
            source: LogSource::Log,
        }],
        elapsed: Duration::ZERO,
    };
    inv.emit_logs(&plugin, "q");
}

#[tokio::test]
async fn the_example_in_docs_abi_md_works() {
    let doc = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/../docs/abi.md"))
        .expect("docs/abi.md");
    let start = doc.find("```wat\n").expect("a wat block") + "```wat\n".len();
    let end = start + doc[start..].find("\n```").expect("end of the wat block");
    let wasm = wat::parse_str(&doc[start..end]).expect("the example parses");
    let plugin = runtime()
        .load_bytes("example.wasm", &wasm)
        .expect("the example loads");

    let mut inp = input("hello");
    inp.publish = Arc::new(PublishPolicy {
        allowed_exchanges: vec!["audit".into()],
        ..PublishPolicy::default()
    });
    let inv = plugin.handle(Arc::new(inp.clone()), &limits()).await;
    assert_eq!(inv.answer, Ok(Answer::Ok), "{:?}", inv.answer);
    assert_eq!(inv.logs[0].message, "user.created");
    assert_eq!(inv.publishes[0].exchange, "audit");
    assert_eq!(inv.publishes[0].routing_key, "seen");
    assert_eq!(inv.publishes[0].body, b"hello");

    inp.body = bytes::Bytes::new();
    let inv = plugin.handle(Arc::new(inp), &limits()).await;
    assert_eq!(inv.answer, Ok(Answer::Fail));
    assert_eq!(inv.reason.as_deref(), Some("empty body"));
}
