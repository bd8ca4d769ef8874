//! The command line as a user meets it: exit codes, and errors as clear lines, never panics.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

pub(crate) fn worker_host(args: &[&str], env: &[(&str, &str)]) -> Output {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_worker-host"));
    cmd.args(args)
        .current_dir(root())
        .env_remove("WORKER_BROKER_URL");
    for (k, v) in env {
        cmd.env(k, v);
    }
    cmd.output().expect("run worker-host")
}

pub(crate) fn text(out: &Output) -> (String, String) {
    (
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

pub(crate) fn assert_no_panic(stderr: &str) {
    assert!(
        !stderr.contains("panicked"),
        "a panic reached the user:\n{stderr}"
    );
    assert!(!stderr.contains("RUST_BACKTRACE"), "{stderr}");
}

#[test]
fn check_accepts_the_example_config_and_compiles_its_plugins() {
    let out = worker_host(&["check", "-c", "worker.toml"], &[]);
    let (stdout, stderr) = text(&out);
    assert_eq!(out.status.code(), Some(0), "{stdout}\n{stderr}");
    assert!(stdout.contains("worker.toml: ok"), "{stdout}");
    for plugin in [
        "user_monitor.wasm",
        "flaky.wasm",
        "c_echo.wasm",
        "demo_rust.wasm",
    ] {
        assert!(stdout.contains(&format!("plugin {plugin} ok")), "{stdout}");
    }
}

/// Every `tests/configs/bad/NAME.toml` fails `check` with exit 1 and each line of NAME.expected.
#[test]
fn check_rejects_each_bad_config_with_its_message() {
    let dir = root().join("tests/configs/bad");
    let mut cases = 0;
    for entry in std::fs::read_dir(&dir).expect("tests/configs/bad") {
        let path = entry.expect("entry").path();
        if path.extension().and_then(|e| e.to_str()) != Some("toml") {
            continue;
        }
        cases += 1;
        let expected = std::fs::read_to_string(path.with_extension("expected"))
            .unwrap_or_else(|e| panic!("{}: missing .expected: {e}", path.display()));
        let out = worker_host(&["check", "-c", path.to_str().expect("utf-8 path")], &[]);
        let (_, stderr) = text(&out);
        assert_eq!(out.status.code(), Some(1), "{}:\n{stderr}", path.display());
        assert_no_panic(&stderr);
        for line in expected.lines().filter(|l| !l.trim().is_empty()) {
            assert!(
                stderr.contains(line.trim()),
                "{}: expected {line:?} in:\n{stderr}",
                path.display()
            );
        }
    }
    assert!(cases >= 20, "only {cases} bad configs found");
}

#[test]
fn check_names_a_bad_plugin_file_and_the_problem() {
    let dir = tempfile::tempdir().expect("tempdir");
    std::fs::create_dir(dir.path().join("plugins")).expect("mkdir");
    std::fs::write(dir.path().join("plugins/bad.wasm"), b"this is not wasm").expect("write");
    let no_marker = wat::parse_str(r#"(module (memory (export "memory") 1) (func (export "worker_handle") (result i32) i32.const 0))"#).expect("wat");
    std::fs::write(dir.path().join("plugins/nomarker.wasm"), no_marker).expect("write");
    std::fs::write(
        dir.path().join("worker.toml"),
        "[broker]\nurl = \"amqp://127.0.0.1\"\n\n[[subscription]]\nqueue = \"a\"\nplugin = \"bad.wasm\"\nbindings = [\"a\"]\n\n\
         [[subscription]]\nqueue = \"b\"\nplugin = \"nomarker.wasm\"\nbindings = [\"b\"]\n",
    )
    .expect("write");
    let config = dir.path().join("worker.toml");
    let out = worker_host(&["check", "-c", config.to_str().expect("utf-8")], &[]);
    let (_, stderr) = text(&out);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert_no_panic(&stderr);
    assert!(
        stderr.contains("bad.wasm") && stderr.contains("not a WebAssembly module"),
        "{stderr}"
    );
    assert!(
        stderr.contains("nomarker.wasm") && stderr.contains("worker_abi_v1"),
        "both plugins reported: {stderr}"
    );
}

/// The example worker.toml names only committed plugins: a fresh clone runs it without building
/// any (scripts/run-example.sh). The Python and JavaScript ones, built and ignored by git, are
/// examples/orders.toml's.
#[test]
fn the_example_config_names_only_committed_plugins() {
    let (config, _) =
        worker_host::config::Config::load(&root().join("worker.toml")).expect("worker.toml");
    let ignored = std::fs::read_to_string(root().join(".gitignore")).expect(".gitignore");
    for sub in &config.subscriptions {
        let name = sub
            .plugin_path
            .file_name()
            .expect("file name")
            .to_string_lossy();
        assert!(
            !ignored
                .lines()
                .any(|l| l.trim() == format!("/plugins/{name}")),
            "worker.toml's {} runs {name}, which .gitignore keeps out of the repository",
            sub.queue
        );
        assert!(sub.plugin_path.is_file(), "{name} is not in plugins/");
    }
}

#[test]
fn topology_prints_the_plan_without_a_broker() {
    for (config, needles) in [
        (
            "worker.toml",
            &[
                "master.retry",
                "ucenter@user@failed",
                "ucenter@user@retry.1s",
                "worker.delay.1s",
            ][..],
        ),
        (
            "examples/orders.toml",
            &["order.delay.queue", "stock@timeout@failed", "demo@python"][..],
        ),
    ] {
        let out = worker_host(&["topology", "-c", config], &[]);
        let (stdout, stderr) = text(&out);
        assert_eq!(out.status.code(), Some(0), "{config}: {stderr}");
        for needle in needles {
            assert!(
                stdout.contains(needle),
                "{config}: {needle} missing from:\n{stdout}"
            );
        }
    }
}

#[test]
fn an_unreachable_broker_exits_2_with_a_clear_line() {
    let env = [("WORKER_BROKER_URL", "amqp://guest:guest@127.0.0.1:1/%2f")];
    for args in [
        "topology -c worker.toml --apply",
        "failed list -c worker.toml --queue ucenter@user",
        "failed replay -c worker.toml --queue ucenter@user --id some-id",
        "failed discard -c worker.toml --queue ucenter@user --all",
        "publish -c worker.toml --exchange master --routing-key k --body x",
    ] {
        let args: Vec<&str> = args.split_whitespace().collect();
        let out = worker_host(&args, &env);
        let (_, stderr) = text(&out);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {stderr}");
        assert_no_panic(&stderr);
        assert!(
            stderr.contains("cannot reach RabbitMQ"),
            "{args:?}: {stderr}"
        );
        assert!(!stderr.contains(":guest@"), "password hidden: {stderr}");
    }
}

#[test]
fn user_errors_exit_1() {
    for args in [
        // A delay beyond what [delay] levels allow.
        "publish -c worker.toml --exchange master --routing-key k --body x --delay 100y",
        "failed list -c worker.toml --queue no-such-queue",
        "failed discard -c worker.toml --queue no-such-queue --id x",
        // Refused arguments: discard needs --id or --all; replay takes one selector.
        "failed discard -c worker.toml --queue ucenter@user",
        "failed replay -c worker.toml --queue ucenter@user --limit 1 --reason x",
        "check -c no-such-file.toml",
    ] {
        let args: Vec<&str> = args.split_whitespace().collect();
        let out = worker_host(&args, &[]);
        let (_, stderr) = text(&out);
        assert_eq!(out.status.code(), Some(1), "{args:?}: {stderr}");
        assert_no_panic(&stderr);
        assert!(stderr.starts_with("error: "), "{args:?}: {stderr}");
    }
}

/// `publish --delay --header --file` through the delay levels of a running service.
#[tokio::test]
async fn publish_with_delay_header_and_file_arrives_after_the_delay() {
    use std::time::{Duration, Instant};
    let p = crate::harness::unique("clipub");
    let toml = format!(
        "[exchanges]\nmaster = \"{p}.master\"\nretry = \"{p}.retry\"\nfailed = \"{p}.failed\"\n\n\
         [[exchange]]\nname = \"{p}.out\"\ntype = \"topic\"\n\n\
         [[queue]]\nname = \"{p}.seen\"\nbindings = [{{ exchange = \"{p}.out\", key = \"#\" }}]\n\n\
         [delay]\n\n\
         [[subscription]]\nqueue = \"{p}.q\"\nplugin = \"ok.wasm\"\nbindings = [\"{p}.k\"]\n"
    );
    let ok = wat::parse_str(r#"(module (memory (export "memory") 1) (func (export "worker_abi_v1")) (func (export "worker_handle") (result i32) i32.const 0))"#).expect("wat");
    let svc = crate::harness::Host::in_process(&toml, &[("ok.wasm", &ok)]).await;
    let (conn, ch) = crate::harness::channel().await;
    crate::harness::wait_consuming(&conn, &format!("{p}.q")).await;
    let config = svc.dir().join("worker.toml");
    let body = svc.dir().join("body.json");
    std::fs::write(&body, br#"{"hello": "later"}"#).expect("body file");
    let started = Instant::now();
    let out = worker_host(
        &[
            "publish",
            "-c",
            config.to_str().expect("utf-8"),
            "--exchange",
            &format!("{p}.out"),
            "--routing-key",
            "order.timeout",
            "--delay",
            "1s",
            "--header",
            "tenant=acme",
            "--file",
            body.to_str().expect("utf-8"),
        ],
        &[("WORKER_BROKER_URL", &crate::harness::broker_url())],
    );
    let (stdout, stderr) = text(&out);
    assert_eq!(out.status.code(), Some(0), "{stdout}\n{stderr}");
    assert!(stdout.starts_with("published "), "{stdout}");
    let got =
        crate::harness::eventually(Duration::from_secs(15), "the delayed message", || async {
            crate::harness::get(&ch, &format!("{p}.seen")).await
        })
        .await;
    let waited = started.elapsed();
    assert!(waited >= Duration::from_secs(1), "not early: {waited:?}");
    assert_eq!(got.delivery.routing_key.as_str(), "order.timeout");
    assert_eq!(got.delivery.data, br#"{"hello": "later"}"#);
    let headers = worker_host::headers::render_headers(got.delivery.properties.headers().as_ref());
    assert!(
        headers.contains(&("tenant".to_string(), "acme".to_string())),
        "{headers:?}"
    );
    assert!(
        !headers.iter().any(|(k, _)| k.starts_with("x-delay")),
        "bookkeeping removed: {headers:?}"
    );
    svc.stop().await;
    crate::harness::cleanup(
        &[
            format!("{p}.q"),
            format!("{p}.q@failed"),
            format!("{p}.q@retry.30s"),
            format!("{p}.seen"),
        ],
        &["master", "retry", "failed", "out"].map(|e| format!("{p}.{e}")),
    )
    .await;
}

/// A folder with plugins/ and a worker.toml of `[broker]` plus `extra`.
fn config_dir(extra: &str) -> (tempfile::TempDir, PathBuf) {
    let dir = tempfile::tempdir().expect("tempdir");
    std::fs::create_dir(dir.path().join("plugins")).expect("mkdir");
    let config = dir.path().join("worker.toml");
    std::fs::write(
        &config,
        format!(
            "[broker]\nurl = \"{}\"\n\n{extra}",
            crate::harness::broker_url()
        ),
    )
    .expect("write");
    (dir, config)
}

/// A valid ABI v1 module padded by a data segment of `pad` bytes.
fn padded_plugin(pad: usize) -> Vec<u8> {
    wat::parse_str(format!(
        r#"(module (memory (export "memory") 1) (data (i32.const 0) "{}")
           (func (export "worker_abi_v1")) (func (export "worker_handle") (result i32) i32.const 0))"#,
        "x".repeat(pad)
    ))
    .expect("wat")
}

#[test]
fn check_refuses_a_plugin_larger_than_max_plugin_size_without_reading_it() {
    let sub = |plugin: &str| {
        format!(
            "[[subscription]]\nqueue = \"q-{plugin}\"\nplugin = \"{plugin}\"\nbindings = [\"k\"]\n\n"
        )
    };
    // The configured limit, and a sparse 1GiB file against the default one (256MiB).
    let (dir, config) = config_dir(&format!(
        "[plugins]\nmax_plugin_size = \"1KiB\"\n\n{}",
        sub("big.wasm")
    ));
    std::fs::write(dir.path().join("plugins/big.wasm"), padded_plugin(4096)).expect("write");
    let (default_dir, default_config) = config_dir(&sub("huge.wasm"));
    std::fs::File::create(default_dir.path().join("plugins/huge.wasm"))
        .and_then(|f| f.set_len(1 << 30))
        .expect("sparse file");
    for (config, needle) in [
        (&config, "big.wasm: the file is "),
        (&default_config, "huge.wasm: the file is 1GiB"),
    ] {
        let out = worker_host(&["check", "-c", config.to_str().expect("utf-8")], &[]);
        let (_, stderr) = text(&out);
        assert_eq!(out.status.code(), Some(1), "{stderr}");
        assert_no_panic(&stderr);
        assert!(stderr.contains(needle), "{stderr}");
        assert!(stderr.contains("larger than max_plugin_size ("), "{stderr}");
        assert!(stderr.contains("it was not read"), "{stderr}");
    }
    let (_, stderr) = text(&worker_host(
        &["check", "-c", config.to_str().expect("utf-8")],
        &[],
    ));
    assert!(stderr.contains("max_plugin_size (1KiB)"), "{stderr}");
    // The same plugin passes under a limit it fits.
    std::fs::write(dir.path().join("plugins/big.wasm"), padded_plugin(100)).expect("write");
    let out = worker_host(&["check", "-c", config.to_str().expect("utf-8")], &[]);
    assert_eq!(out.status.code(), Some(0), "{:?}", text(&out));
}

/// `publish` is mandatory: a message no queue would receive is an error, not `published`.
#[tokio::test]
async fn publish_to_a_key_nothing_is_bound_to_exits_1() {
    use lapin::options::{ExchangeDeclareOptions, QueueBindOptions, QueueDeclareOptions};
    let p = crate::harness::unique("clipub-unroutable");
    let (exchange, queue) = (format!("{p}.ex"), format!("{p}.q"));
    let (conn, ch) = crate::harness::channel().await;
    ch.exchange_declare(
        exchange.as_str().into(),
        lapin::ExchangeKind::Topic,
        ExchangeDeclareOptions::default(),
        Default::default(),
    )
    .await
    .expect("declare exchange");
    ch.queue_declare(
        queue.as_str().into(),
        QueueDeclareOptions::default(),
        Default::default(),
    )
    .await
    .expect("declare queue");
    ch.queue_bind(
        queue.as_str().into(),
        exchange.as_str().into(),
        "bound.key".into(),
        QueueBindOptions::default(),
        Default::default(),
    )
    .await
    .expect("bind");
    let (_dir, config) = config_dir("");
    let config = config.to_str().expect("utf-8").to_string();
    let env = [("WORKER_BROKER_URL", crate::harness::broker_url())];
    let env: Vec<(&str, &str)> = env.iter().map(|(k, v)| (*k, v.as_str())).collect();
    let publish = |exchange: &str, key: &str| {
        let args = [
            "publish",
            "-c",
            &config,
            "--exchange",
            exchange,
            "--routing-key",
            key,
            "--body",
            "x",
        ];
        let out = worker_host(&args, &env);
        let (stdout, stderr) = text(&out);
        assert_no_panic(&stderr);
        (out.status.code(), stdout, stderr)
    };

    let (code, stdout, stderr) = publish(&exchange, "nothing.bound");
    assert_eq!(code, Some(1), "{stdout}\n{stderr}");
    assert!(!stdout.contains("published"), "{stdout}");
    assert!(
        stderr.starts_with("error: message not published"),
        "{stderr}"
    );
    assert!(
        stderr.contains("has no queue bound for key \"nothing.bound\""),
        "{stderr}"
    );

    let (code, _, stderr) = publish(&format!("{p}.missing"), "bound.key");
    assert_eq!(code, Some(1), "a missing exchange: {stderr}");
    assert!(
        stderr.starts_with("error: message not published"),
        "{stderr}"
    );

    let (code, stdout, stderr) = publish(&exchange, "bound.key");
    assert_eq!(code, Some(0), "{stdout}\n{stderr}");
    assert!(stdout.starts_with("published "), "{stdout}");
    assert_eq!(
        crate::harness::depth(&ch, &queue).await,
        1,
        "only the routable one arrived"
    );

    let _ = conn.close(200, "bye".into()).await;
    crate::harness::cleanup(&[queue], &[exchange]).await;
}
