//! The worker-host process under test: its worker.toml, starting and stopping it, and what it
//! reports (ok count from /metrics, readiness, RSS); (b)–(d) and the idle RSS run here.

use super::*;

#[derive(PartialEq, Clone, Copy)]
pub(super) enum Plugin<'a> {
    Wat(&'a str),
    File(&'a Path),
}

pub(super) struct Host {
    pub(super) child: Child,
    dir: PathBuf,
    pub(super) admin: String,
    /// Just before the process was spawned (start-up is timed from here).
    pub(super) spawned: Instant,
}

impl Host {
    /// Stops the host as a service manager would (SIGTERM), so what it handled is acked
    /// before it exits; killed after 10 s.
    pub(super) fn stop(mut self) {
        let _ = std::process::Command::new("kill")
            .args(["-TERM", &self.child.id().to_string()])
            .status();
        let deadline = Instant::now() + Duration::from_secs(10);
        while Instant::now() < deadline {
            if let Ok(Some(_)) = self.child.try_wait() {
                break;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

impl Drop for Host {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("free port")
}

/// worker.toml lines a scenario adds: top-level tables, and lines of each subscription.
#[derive(Default)]
pub(super) struct Extra {
    pub(super) sections: String,
    pub(super) subscription: String,
    /// Environment variables the host gets.
    pub(super) env: Vec<(&'static str, &'static str)>,
}

fn start_host(bin: &Path, plugin: &Plugin<'_>, queues: &[String], prefix: &str) -> Host {
    start_host_with(bin, plugin, queues, prefix, &Extra::default())
}

pub(super) fn start_host_with(
    bin: &Path,
    plugin: &Plugin<'_>,
    queues: &[String],
    prefix: &str,
    extra: &Extra,
) -> Host {
    let subs: Vec<Sub<'_>> = queues
        .iter()
        .map(|q| Sub {
            queue: q.clone(),
            plugin,
            lines: extra.subscription.clone(),
        })
        .collect();
    start_subs_env(bin, &subs, prefix, &extra.sections, &extra.env)
}

/// One subscription of a host with several plugins: its queue, plugin and extra lines.
pub(super) struct Sub<'a> {
    pub(super) queue: String,
    pub(super) plugin: &'a Plugin<'a>,
    pub(super) lines: String,
}

/// One subscription per plugin, on queues `{prefix}.q{i}`, each with `lines`.
pub(super) fn subs_of<'a>(plugins: &'a [Plugin<'a>], prefix: &str, lines: &str) -> Vec<Sub<'a>> {
    plugins
        .iter()
        .enumerate()
        .map(|(i, plugin)| Sub {
            queue: format!("{prefix}.q{i}"),
            plugin,
            lines: lines.to_string(),
        })
        .collect()
}

/// Starts worker-host with `subs` and `sections` added. Each distinct plugin is written once
/// (`p{i}.wasm`, i its first subscription), so subscriptions of one plugin share it as in a real
/// worker.toml (what the idle RSS of (i) measures).
pub(super) fn start_subs(bin: &Path, subs: &[Sub<'_>], prefix: &str, sections: &str) -> Host {
    start_subs_env(bin, subs, prefix, sections, &[])
}

/// [`start_subs`], the host given `env` too.
fn start_subs_env(
    bin: &Path,
    subs: &[Sub<'_>],
    prefix: &str,
    sections: &str,
    env: &[(&str, &str)],
) -> Host {
    let dir = std::env::temp_dir().join(unique("bench-host"));
    std::fs::create_dir_all(dir.join("plugins")).expect("dir");
    let port = free_port();
    let mut toml = format!(
        "[broker]\nurl = \"{URL}\"\n[admin]\nlisten = \"127.0.0.1:{port}\"\n\
         [exchanges]\nmaster = \"{prefix}.master\"\nretry = \"{prefix}.retry\"\nfailed = \"{prefix}.failed\"\n\
         [defaults]\nprefetch = {PREFETCH}\nconcurrency = 8\nretry_delays = [\"1ms\"]\n{sections}"
    );
    for (i, sub) in subs.iter().enumerate() {
        let first = subs
            .iter()
            .position(|s| s.plugin == sub.plugin)
            .unwrap_or(i);
        toml.push_str(&format!(
            "[[subscription]]\nqueue = \"{}\"\nplugin = \"p{first}.wasm\"\nbindings = []\n{}",
            sub.queue, sub.lines
        ));
        if first < i {
            continue;
        }
        let bytes = match sub.plugin {
            Plugin::Wat(text) => wat::parse_str(text).expect("wat"),
            Plugin::File(path) => std::fs::read(path)
                .unwrap_or_else(|e| panic!("{}: {e} (scripts/build-plugins.sh)", path.display())),
        };
        std::fs::write(dir.join(format!("plugins/p{i}.wasm")), bytes).expect("plugin");
    }
    std::fs::write(dir.join("worker.toml"), toml).expect("toml");
    let spawned = Instant::now();
    let child = Command::new(bin)
        .args(["run", "-c"])
        .arg(dir.join("worker.toml"))
        .env("RUST_LOG", "error")
        .envs(env.iter().copied())
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .spawn()
        .expect("start worker-host");
    Host {
        child,
        dir,
        admin: format!("127.0.0.1:{port}"),
        spawned,
    }
}

pub(super) async fn http_get(addr: &str, path: &str) -> Option<String> {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut s = tokio::net::TcpStream::connect(addr).await.ok()?;
    s.write_all(format!("GET {path} HTTP/1.0\r\nHost: x\r\n\r\n").as_bytes())
        .await
        .ok()?;
    let mut out = String::new();
    s.read_to_string(&mut out).await.ok()?;
    Some(out)
}

/// Sum of `worker_messages_total` samples with outcome="ok".
pub(super) async fn handled_ok(addr: &str) -> Option<u64> {
    let text = http_get(addr, "/metrics").await?;
    Some(
        text.lines()
            .filter(|l| l.starts_with("worker_messages_total{") && l.contains("outcome=\"ok\""))
            .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
            .sum::<f64>() as u64,
    )
}

pub(super) fn rss_kib(pid: u32, field: &str) -> u64 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with(field))
                .and_then(|l| l.split_whitespace().nth(1)?.parse().ok())
        })
        .unwrap_or(0)
}

/// Waits for `/readyz`; the first start of a host with a Python or JS plugin compiles it (about
/// 10 s each, niced), later ones load it from the shared `[state] dir`.
pub(super) async fn wait_ready(addr: &str) {
    let deadline = Instant::now() + Duration::from_secs(300);
    loop {
        if let Some(r) = http_get(addr, "/readyz").await
            && (r.starts_with("HTTP/1.1 200") || r.starts_with("HTTP/1.0 200"))
        {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "worker-host not ready after 300s"
        );
        // Fine enough to time a start-up of a few hundred ms ((s)).
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
}

/// `perf record` attached to the measured host when `WORKER_BENCH_PERF` names an output prefix
/// (`<prefix>-<scenario>.data`, then `<prefix>-<scenario>.2.data` for the scenario's second host
/// in a run, as (p) and (j) start one with reused instances, then one with fresh); extra options
/// in `WORKER_BENCH_PERF_ARGS` (default `-F 999 -g`). Stopped with SIGINT so it writes a
/// complete file.
pub(super) fn start_perf(pid: u32, scenario: char) -> Option<Child> {
    static HOSTS: std::sync::Mutex<Vec<char>> = std::sync::Mutex::new(Vec::new());
    let prefix = std::env::var("WORKER_BENCH_PERF").ok()?;
    let nth = {
        let mut seen = HOSTS.lock().unwrap_or_else(|e| e.into_inner());
        seen.push(scenario);
        seen.iter().filter(|s| **s == scenario).count()
    };
    let file = match nth {
        1 => format!("{prefix}-{scenario}.data"),
        n => format!("{prefix}-{scenario}.{n}.data"),
    };
    let extra = std::env::var("WORKER_BENCH_PERF_ARGS").unwrap_or_else(|_| "-F 999 -g".into());
    let child = Command::new("perf")
        .arg("record")
        .args(extra.split_whitespace())
        .args(["-p", &pid.to_string(), "-o", &file])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .spawn()
        .expect("perf record");
    std::thread::sleep(Duration::from_millis(300)); // let it attach before the count starts
    Some(child)
}

pub(super) fn stop_perf(perf: Option<Child>) {
    if let Some(mut perf) = perf {
        let _ = Command::new("kill")
            .args(["-INT", &perf.id().to_string()])
            .status();
        let _ = perf.wait();
    }
}

/// What one run of a host on a pre-filled queue measured.
pub(super) struct HostRun {
    /// Ok answers per second, from the first ok seen to the last.
    pub(super) rate: f64,
    /// The host's peak RSS (bytes).
    pub(super) rss: u64,
    pub(super) cpu: CpuUse,
}

/// (b)–(d): the host consumes a pre-filled queue.
pub(super) async fn host(
    bin: &Path,
    plugin: Plugin<'_>,
    n: u64,
    body: &[u8],
    scenario: char,
) -> HostRun {
    host_with(bin, plugin, n, body, scenario, &Extra::default()).await
}

/// [`host`] with `extra` in its worker.toml.
pub(super) async fn host_with(
    bin: &Path,
    plugin: Plugin<'_>,
    n: u64,
    body: &[u8],
    scenario: char,
    extra: &Extra,
) -> HostRun {
    let prefix = unique("bench-host");
    let queue = format!("{prefix}.q");
    let conn = connect().await;
    let ch = conn.create_channel().await.expect("channel");
    // Let the host declare the topology first, then stop consuming by filling before it starts:
    // run it once to declare, stop it, fill, start again.
    {
        let host = start_host_with(bin, &plugin, std::slice::from_ref(&queue), &prefix, extra);
        wait_ready(&host.admin).await;
    }
    fill(&ch, &queue, n, body).await;
    let host = start_host_with(bin, &plugin, std::slice::from_ref(&queue), &prefix, extra);
    let perf = start_perf(host.child.id(), scenario);
    let (rate, cpu) = consume_rate(&host.admin, host.child.id(), n).await;
    let rss = rss_kib(host.child.id(), "VmHWM:") * 1024;
    stop_perf(perf);
    drop(host);
    remove_topology(&ch, &queue, &prefix).await;
    let _ = conn.close(200, "bye".into()).await;
    HostRun { rate, rss, cpu }
}

/// Waits until the host (process `pid`) has answered ok `n` times; msgs/s from the first ok
/// seen to the last, and the CPU per message of the host and the broker in that window.
///
/// Each poll of `/metrics` costs the host about 70 µs of CPU (counted as its own): polled every
/// 5 ms throughout, that was up to 1 µs per message at 25,000 msgs/s. So it polls every 5 ms
/// until the first ok and near the end, and in between at a quarter of the time the rate so
/// far says is left (at most 50 ms): both ends of the window stay within 5 ms.
pub(super) async fn consume_rate(admin: &str, pid: u32, n: u64) -> (f64, CpuUse) {
    let deadline = Instant::now() + Duration::from_secs(600);
    let mut first: Option<(Instant, u64, CpuMark)> = None;
    loop {
        let done = handled_ok(admin).await.unwrap_or(0);
        if done > 0 && first.is_none() {
            first = Some((Instant::now(), done, CpuMark::now(pid)));
        }
        if done >= n {
            let (t0, c0, mark) = first.expect("set above");
            let secs = t0.elapsed().as_secs_f64();
            let cpu = mark.per_message(n - c0);
            let rate = if secs > 0.0 {
                (n - c0) as f64 / secs
            } else {
                f64::NAN
            };
            return (rate, cpu);
        }
        assert!(
            Instant::now() < deadline,
            "worker-host handled {done}/{n} in 600s"
        );
        let pause = match &first {
            Some((t0, c0, _)) if done > *c0 => {
                let rate = (done - c0) as f64 / t0.elapsed().as_secs_f64();
                let left = (n - done) as f64 / rate;
                Duration::from_secs_f64(left / 4.0).clamp(POLL, POLL * 10)
            }
            _ => POLL,
        };
        tokio::time::sleep(pause).await;
    }
}

/// How often `/metrics` is polled at the ends of a timed window.
const POLL: Duration = Duration::from_millis(5);

/// Deletes a scenario's queues and exchanges.
pub(super) async fn remove_topology(ch: &Channel, queue: &str, prefix: &str) {
    for q in [
        queue.to_string(),
        format!("{queue}@failed"),
        format!("{queue}@retry.1ms"),
    ] {
        let _ = ch
            .queue_delete(q.as_str().into(), QueueDeleteOptions::default())
            .await;
    }
    for e in ["master", "retry", "failed"] {
        let _ = ch
            .exchange_delete(format!("{prefix}.{e}").as_str().into(), Default::default())
            .await;
    }
}

/// RSS (bytes) of a host with `subs` idle subscriptions, once ready.
pub(super) async fn idle_rss(bin: &Path, subs: usize) -> u64 {
    let prefix = unique("bench-idle");
    let queues: Vec<String> = (0..subs).map(|i| format!("{prefix}.q{i}")).collect();
    let host = start_host(bin, &Plugin::Wat(OK_WAT), &queues, &prefix);
    wait_ready(&host.admin).await;
    tokio::time::sleep(Duration::from_millis(500)).await;
    let rss = rss_kib(host.child.id(), "VmRSS:") * 1024;
    drop(host);
    let conn = connect().await;
    let ch = conn.create_channel().await.expect("channel");
    for q in &queues {
        for name in [q.clone(), format!("{q}@failed"), format!("{q}@retry.1ms")] {
            let _ = ch
                .queue_delete(name.as_str().into(), QueueDeleteOptions::default())
                .await;
        }
    }
    for e in ["master", "retry", "failed"] {
        let _ = ch
            .exchange_delete(format!("{prefix}.{e}").as_str().into(), Default::default())
            .await;
    }
    let _ = conn.close(200, "bye".into()).await;
    rss
}
