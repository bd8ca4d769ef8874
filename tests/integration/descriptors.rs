//! The service binary with few file descriptors: the open-file limit is raised to the hard limit,
//! more idle admin connections than descriptors starve neither the probes nor a config reload, and a broker
//! connection lost while no descriptor is spare does not panic lapin's I/O thread.

mod support;

use std::io::Read as _;
use std::time::{Duration, Instant};

use crate::harness::{self, http_get_within};
use support::*;

/// Exchanges and one subscription per queue in `queues`, all named from `p`.
fn worker_toml(p: &str, queues: &[&str]) -> String {
    let mut text = format!(
        "[exchanges]\nmaster = \"{p}.master\"\nretry = \"{p}.retry\"\nfailed = \"{p}.failed\"\n\n"
    );
    for q in queues {
        text.push_str(&format!(
            "[[subscription]]\nqueue = \"{p}.{q}\"\nplugin = \"ok.wasm\"\nbindings = [\"{p}.{q}.k\"]\n\n"
        ));
    }
    text
}

async fn cleanup(p: &str, queues: &[&str]) {
    let mut all = Vec::new();
    for q in queues {
        for suffix in ["", "@failed", "@retry.30s"] {
            all.push(format!("{p}.{q}{suffix}"));
        }
    }
    let exchanges = ["master", "retry", "failed"].map(|e| format!("{p}.{e}"));
    harness::cleanup(&all, &exchanges).await;
}

#[tokio::test]
async fn idle_admin_connections_beyond_the_fd_limit_starve_neither_probes_nor_reloads() {
    // More than the 1,024 descriptors the process may open: without a cap, accepting them
    // would use up every descriptor it has.
    const IDLE: usize = 1200;
    let p = harness::unique("fd-idle");
    let plugin = ok_plugin();
    let mut proc = spawn(
        "1024:1024",
        &harness::broker_url(),
        &worker_toml(&p, &["a"]),
        &[("ok.wasm", &plugin)],
    );
    wait_ready(&proc, Duration::from_secs(30)).await;
    wait_soft_nofile(&proc, 1024).await;

    let idle: Vec<std::net::TcpStream> = (0..IDLE)
        .map(|i| {
            std::net::TcpStream::connect(proc.admin())
                .unwrap_or_else(|e| panic!("idle connection {i}: {e}"))
        })
        .collect();

    for path in ["/metrics", "/readyz"] {
        let started = Instant::now();
        // Under the 5 s header timeout that would free descriptors anyway: room was made at once.
        let (status, body) = http_get_within(proc.admin(), path, Duration::from_secs(3))
            .await
            .unwrap_or_else(|| panic!("{path} did not answer within 3s:\n{}", proc.log()));
        assert_eq!(status, 200, "{path}: {body}");
        println!(
            "{path} answered in {:?} with {IDLE} idle connections",
            started.elapsed()
        );
    }

    // A config reload still applies: the new subscription starts consuming.
    let text = std::fs::read_to_string(proc.dir().join("worker.toml")).expect("config");
    let added = text.replace(&worker_toml(&p, &["a"]), &worker_toml(&p, &["a", "b"]));
    save_config(proc.dir(), &added);
    let (conn, _ch) = harness::channel().await;
    harness::wait_consuming(&conn, &format!("{p}.b")).await;

    // The server closes every idle connection: at once to make room, or when its headers time
    // out (5s).
    let deadline = Instant::now() + Duration::from_secs(15);
    for (i, mut stream) in idle.into_iter().enumerate() {
        let left = deadline.saturating_duration_since(Instant::now());
        stream
            .set_read_timeout(Some(left.max(Duration::from_millis(1))))
            .expect("read timeout");
        let mut buf = [0u8; 512];
        match stream.read(&mut buf) {
            // EOF, possibly after a 408 the server wrote before closing.
            Ok(_) => {}
            Err(e) if e.kind() == std::io::ErrorKind::ConnectionReset => {}
            Err(e) => panic!("idle connection {i} still open after 15s: {e}"),
        }
    }

    assert_no_panic(&proc);
    assert_eq!(proc.terminate().await.code(), Some(0));
    let _ = conn.close(200, "bye".into()).await;
    cleanup(&p, &["a", "b"]).await;
}

#[tokio::test]
async fn the_limit_is_raised_and_a_lost_connection_without_spare_descriptors_does_not_panic() {
    let p = harness::unique("fd-lost");
    let proxy = Proxy::start().await;
    let plugin = ok_plugin();
    let mut proc = spawn(
        "256:4096",
        &proxy.url(),
        &worker_toml(&p, &["a"]),
        &[("ok.wasm", &plugin)],
    );
    wait_soft_nofile(&proc, 4096).await;
    proc.wait_log(
        "open-file limit raised from 256 to 4096",
        Duration::from_secs(10),
    )
    .await;
    wait_ready(&proc, Duration::from_secs(30)).await;

    // Not one descriptor to spare, then the connection drops under lapin's I/O thread.
    let io_threads = threads(&proc, "lapin-io-loop");
    assert_eq!(io_threads.len(), 1, "one broker connection");
    // Only the soft limit: raising a hard limit again needs privileges.
    let open = open_fds(&proc);
    set_nofile(&proc, open, 4096);
    proxy.cut();
    // Its I/O thread ends, after dropping the socket (where the panic used to happen).
    harness::eventually(Duration::from_secs(10), "the I/O thread to end", || async {
        (!threads(&proc, "lapin-io-loop").contains(&io_threads[0])).then_some(())
    })
    .await;
    assert_no_panic(&proc);

    // With descriptors again, it reconnects on its own.
    set_nofile(&proc, 4096, 4096);
    wait_ready(&proc, Duration::from_secs(30)).await;
    assert_no_panic(&proc);
    assert_eq!(proc.terminate().await.code(), Some(0));
    cleanup(&p, &["a"]).await;
}
