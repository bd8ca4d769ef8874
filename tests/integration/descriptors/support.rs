//! The service binary run under `prlimit`, its log, its admin endpoint, and a TCP proxy to the
//! broker that the tests can cut.

use std::io::{BufRead as _, BufReader};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};

use crate::common;

/// A `worker-host run` process started by `prlimit --nofile=SOFT:HARD`.
pub(super) struct Process {
    child: Child,
    log: Arc<Mutex<String>>,
    pub(super) dir: tempfile::TempDir,
    pub(super) admin: u16,
}

impl Process {
    /// Writes `worker_toml` (with `[admin]` on a free port appended) and `plugins` into a fresh
    /// folder and starts the binary there, connecting to `broker_url`.
    pub(super) fn spawn(
        nofile: &str,
        broker_url: &str,
        worker_toml: &str,
        plugins: &[(&str, &[u8])],
    ) -> Process {
        let dir = tempfile::tempdir().expect("temp dir");
        std::fs::create_dir(dir.path().join("plugins")).expect("plugins dir");
        for (name, bytes) in plugins {
            std::fs::write(dir.path().join("plugins").join(name), bytes).expect("write plugin");
        }
        let admin = free_port();
        let config = dir.path().join("worker.toml");
        std::fs::write(
            &config,
            format!("{worker_toml}\n[admin]\nlisten = \"127.0.0.1:{admin}\"\n"),
        )
        .expect("write worker.toml");
        let mut child = Command::new("prlimit")
            .arg(format!("--nofile={nofile}"))
            .arg("--")
            .arg(env!("CARGO_BIN_EXE_worker-host"))
            .args(["run", "-c"])
            .arg(&config)
            .env("WORKER_BROKER_URL", broker_url)
            .env("RUST_LOG", "info,lapin=off")
            .env("NO_COLOR", "1")
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .expect("prlimit (util-linux) runs worker-host");
        let log = Arc::new(Mutex::new(String::new()));
        let stderr = child.stderr.take().expect("stderr");
        let sink = log.clone();
        std::thread::spawn(move || {
            for line in BufReader::new(stderr).lines() {
                let Ok(line) = line else { break };
                let mut log = sink.lock().unwrap();
                log.push_str(&line);
                log.push('\n');
            }
        });
        Process {
            child,
            log,
            dir,
            admin,
        }
    }

    pub(super) fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Everything it logged so far.
    pub(super) fn log(&self) -> String {
        self.log.lock().unwrap().clone()
    }

    pub(super) async fn wait_log(&self, needle: &str, timeout: Duration) {
        let deadline = Instant::now() + timeout;
        while !self.log().contains(needle) {
            assert!(
                Instant::now() < deadline,
                "no {needle:?} in the log after {timeout:?}:\n{}",
                self.log()
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    /// Waits until /proc shows `soft` as its soft open-file limit.
    pub(super) async fn wait_soft_nofile(&self, soft: u64) {
        let limits = format!("/proc/{}/limits", self.pid());
        let what = format!("a soft open-file limit of {soft}");
        common::eventually(Duration::from_secs(10), &what, || async {
            let text = std::fs::read_to_string(&limits).ok()?;
            let line = text.lines().find(|l| l.starts_with("Max open files"))?;
            let now: u64 = line.split_whitespace().nth(3)?.parse().ok()?;
            (now == soft).then_some(())
        })
        .await
    }

    /// Sets the open-file limit of the running process.
    pub(super) fn set_nofile(&self, soft: u64, hard: u64) {
        let status = Command::new("prlimit")
            .arg(format!("--pid={}", self.pid()))
            .arg(format!("--nofile={soft}:{hard}"))
            .status()
            .expect("prlimit");
        assert!(status.success(), "prlimit --pid failed");
    }

    /// Descriptors open now.
    pub(super) fn open_fds(&self) -> u64 {
        std::fs::read_dir(format!("/proc/{}/fd", self.pid()))
            .expect("/proc/PID/fd")
            .count() as u64
    }

    /// Thread ids named `name` (as /proc shows it: the first 15 bytes).
    pub(super) fn threads(&self, name: &str) -> Vec<String> {
        let tasks = format!("/proc/{}/task", self.pid());
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

    pub(super) async fn wait_ready(&self, timeout: Duration) {
        common::eventually(timeout, "/readyz answering 200", || async {
            let (status, _) = http_get(self.admin, "/readyz", Duration::from_secs(2)).await?;
            (status == 200).then_some(())
        })
        .await;
    }

    /// SIGTERM, then the exit code (the service drains and exits 0).
    pub(super) async fn stop(mut self) -> Option<i32> {
        let _ = Command::new("kill")
            .args(["-TERM", &self.pid().to_string()])
            .status();
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            if let Some(status) = self.child.try_wait().expect("wait") {
                return status.code();
            }
            assert!(
                Instant::now() < deadline,
                "still running 30s after SIGTERM:\n{}",
                self.log()
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    /// Panics with the log when it shows a panic.
    pub(super) fn assert_no_panic(&self) {
        let log = self.log();
        assert!(
            !log.contains("panicked") && !log.contains("poisoned"),
            "the process panicked:\n{log}"
        );
    }
}

impl Drop for Process {
    fn drop(&mut self) {
        if self.child.try_wait().ok().flatten().is_none() {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

pub(super) fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("free port")
        .port()
}

/// GET `path` on a new connection: the status and the body, or None when there is no answer
/// within `timeout`.
pub(super) async fn http_get(port: u16, path: &str, timeout: Duration) -> Option<(u16, String)> {
    let request = async {
        let mut stream = tokio::net::TcpStream::connect(("127.0.0.1", port))
            .await
            .ok()?;
        stream
            .write_all(
                format!("GET {path} HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n")
                    .as_bytes(),
            )
            .await
            .ok()?;
        let mut text = String::new();
        stream.read_to_string(&mut text).await.ok()?;
        let status = text.split_whitespace().nth(1)?.parse().ok()?;
        let body = text.split_once("\r\n\r\n").map(|(_, b)| b.to_string())?;
        Some((status, body))
    };
    tokio::time::timeout(timeout, request).await.ok().flatten()
}

/// A TCP proxy to the test broker; `cut` closes every connection through it so far.
pub(super) struct Proxy {
    pub(super) port: u16,
    cut: tokio::sync::watch::Sender<u64>,
    task: tokio::task::JoinHandle<()>,
}

impl Proxy {
    pub(super) async fn start() -> Proxy {
        let upstream = broker_addr(&common::broker_url());
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
        let url = common::broker_url();
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
