//! The service binary run under `prlimit` (the harness's [`Host`]), what /proc says of it, and
//! a TCP proxy to the broker that the tests can cut.

use std::path::Path;
use std::process::Command;
use std::time::Duration;

use crate::harness::{self, Host, free_addr, http_get_within};

/// Writes `worker_toml` (with `[admin]` on a free port appended) and `plugins` into a fresh
/// folder and starts the binary there under `prlimit --nofile=<nofile>` (`SOFT:HARD`), logging
/// text, connecting to `broker_url`.
pub(super) fn spawn(
    nofile: &str,
    broker_url: &str,
    worker_toml: &str,
    plugins: &[(&str, &[u8])],
) -> Host {
    let dir = harness::folder(plugins);
    let admin = free_addr();
    let config = harness::write_config(
        dir.path(),
        &format!("{worker_toml}\n[admin]\nlisten = \"{admin}\"\n"),
    );
    Host::child(&config)
        .nofile(nofile)
        .plain_logs()
        .env("WORKER_BROKER_URL", broker_url)
        .env("RUST_LOG", "info,lapin=off")
        .env("NO_COLOR", "1")
        .admin(admin)
        .start_owning(dir)
}

/// Waits until /proc shows `soft` as the soft open-file limit of `host`.
pub(super) async fn wait_soft_nofile(host: &Host, soft: u64) {
    let limits = format!("/proc/{}/limits", host.pid());
    let what = format!("a soft open-file limit of {soft}");
    harness::eventually(Duration::from_secs(10), &what, || async {
        let text = std::fs::read_to_string(&limits).ok()?;
        let line = text.lines().find(|l| l.starts_with("Max open files"))?;
        let now: u64 = line.split_whitespace().nth(3)?.parse().ok()?;
        (now == soft).then_some(())
    })
    .await
}

/// Sets the open-file limit of the running `host`.
pub(super) fn set_nofile(host: &Host, soft: u64, hard: u64) {
    let status = Command::new("prlimit")
        .arg(format!("--pid={}", host.pid()))
        .arg(format!("--nofile={soft}:{hard}"))
        .status()
        .expect("prlimit");
    assert!(status.success(), "prlimit --pid failed");
}

/// Descriptors `host` has open now.
pub(super) fn open_fds(host: &Host) -> u64 {
    std::fs::read_dir(format!("/proc/{}/fd", host.pid()))
        .expect("/proc/PID/fd")
        .count() as u64
}

/// Thread ids of `host` named `name` (as /proc shows it: the first 15 bytes).
pub(super) fn threads(host: &Host, name: &str) -> Vec<String> {
    let tasks = format!("/proc/{}/task", host.pid());
    std::fs::read_dir(tasks)
        .map(|entries| {
            entries
                .flatten()
                .filter(|t| {
                    std::fs::read_to_string(t.path().join("comm"))
                        .is_ok_and(|comm| comm.trim_end() == name)
                })
                .map(|t| t.file_name().to_string_lossy().into_owned())
                .collect()
        })
        .unwrap_or_default()
}

/// Waits until `host` answers 200 on /readyz.
pub(super) async fn wait_ready(host: &Host, timeout: Duration) {
    harness::eventually(timeout, "/readyz answering 200", || async {
        let (status, _) = http_get_within(host.admin(), "/readyz", Duration::from_secs(2)).await?;
        (status == 200).then_some(())
    })
    .await;
}

/// Panics with the log when it shows a panic.
pub(super) fn assert_no_panic(host: &Host) {
    let log = host.log();
    assert!(
        !log.contains("panicked") && !log.contains("poisoned"),
        "the process panicked:\n{log}"
    );
}

/// A TCP proxy to the test broker; `cut` closes every connection through it so far.
pub(super) struct Proxy {
    pub(super) port: u16,
    cut: tokio::sync::watch::Sender<u64>,
    task: tokio::task::JoinHandle<()>,
}

impl Proxy {
    pub(super) async fn start() -> Proxy {
        let upstream = broker_addr(&harness::broker_url());
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("proxy listener");
        let port = listener.local_addr().expect("proxy address").port();
        let (cut, cuts) = tokio::sync::watch::channel(0u64);
        let task = tokio::spawn(async move {
            while let Ok((mut client, _)) = listener.accept().await {
                let upstream = upstream.clone();
                let mut cuts = cuts.clone();
                cuts.mark_unchanged();
                tokio::spawn(async move {
                    let Ok(mut server) = tokio::net::TcpStream::connect(&upstream).await else {
                        return;
                    };
                    tokio::select! {
                        _ = tokio::io::copy_bidirectional(&mut client, &mut server) => {}
                        _ = cuts.changed() => {}
                    }
                });
            }
        });
        Proxy { port, cut, task }
    }

    /// The test broker's URL, through this proxy.
    pub(super) fn url(&self) -> String {
        let url = harness::broker_url();
        let addr = broker_addr(&url);
        url.replacen(&addr, &format!("127.0.0.1:{}", self.port), 1)
    }

    pub(super) fn cut(&self) {
        self.cut.send_modify(|n| *n += 1);
    }
}

impl Drop for Proxy {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// `host:port` of an `amqp://user:pass@host:port/vhost` URL.
fn broker_addr(url: &str) -> String {
    let rest = url.split_once('@').map_or(url, |(_, r)| r);
    let rest = rest.strip_prefix("amqp://").unwrap_or(rest);
    let addr = rest.split('/').next().unwrap_or(rest);
    assert!(
        addr.contains(':'),
        "the test broker URL {url} needs an explicit host:port"
    );
    addr.to_string()
}

/// A plugin that answers ok.
pub(super) fn ok_plugin() -> Vec<u8> {
    wat::parse_str(
        r#"(module (memory (export "memory") 1) (func (export "worker_abi_v1"))
           (func (export "worker_handle") (result i32) i32.const 0))"#,
    )
    .expect("wat")
}

/// Saves worker.toml the way editors do: a temp file renamed over it.
pub(super) fn save_config(dir: &Path, text: &str) {
    let tmp = dir.join(".worker.toml.tmp");
    std::fs::write(&tmp, text).expect("write temp config");
    std::fs::rename(&tmp, dir.join("worker.toml")).expect("rename config");
}
