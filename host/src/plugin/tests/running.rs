//! WASI, concurrency, logs and the documented example.

use super::*;

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
        cache_dir: None,
        compiler_exe: None,
        compile_priority: CompilePriority::Foreground,
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
        instance: Instances::Fresh,
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
        retry_after: None,
        publishes: vec![],
        logs: vec![LogLine {
            level: LogLevel::Warn,
            message: "hi".into(),
            source: LogSource::Log,
        }],
        elapsed: Duration::ZERO,
        effects: Default::default(),
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
