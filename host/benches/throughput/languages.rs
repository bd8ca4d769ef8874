//! Handlers in other languages, end to end, on the 1 KiB JSON body of (d): the handlers the
//! targets name (host/benches/handlers: parse the body, answer ok) in Rust (an SDK component),
//! Python and JS, each fresh and with `instance = "reuse"`; the Python peers Celery (`-P solo`,
//! acks_late) and Dramatiq (`-p 2 -t 8`) running a no-op task on the same body; and the peak RSS
//! of one host with 8 mixed subscriptions of the demos (2 Python, 1 JS, concurrency 4 each).
//!
//! Every component scenario shares one `[state] dir`, so a Python or JS plugin is compiled once
//! per bench run (the first host start waits for it) and loaded from the cache after that.

use super::*;

/// The rows this module adds, in print order, with their samples.
#[derive(Default)]
pub(super) struct Results {
    rows: Vec<(&'static str, Vec<f64>)>,
    /// Peak RSS (bytes) and msgs/s of the mixed host: fresh, then reuse.
    mix: Vec<(&'static str, Vec<u64>, Vec<f64>)>,
}

impl Results {
    /// The highest peak RSS of the mixed host in MiB (`fresh` or `reuse`), NaN if it did not run.
    pub(super) fn mix_peak_mib(&self, name: &str) -> f64 {
        self.mix
            .iter()
            .find(|(n, ..)| *n == name)
            .and_then(|(_, rss, _)| rss.iter().copied().max())
            .map_or(f64::NAN, |b| b as f64 / 1048576.0)
    }

    fn push(&mut self, name: &'static str, rate: f64) {
        match self.rows.iter_mut().find(|(n, _)| *n == name) {
            Some((_, v)) => v.push(rate),
            None => self.rows.push((name, vec![rate])),
        }
    }

    fn push_mix(&mut self, name: &'static str, rss: u64, rate: f64) {
        match self.mix.iter_mut().find(|(n, ..)| *n == name) {
            Some((_, r, v)) => {
                r.push(rss);
                v.push(rate)
            }
            None => self.mix.push((name, vec![rss], vec![rate])),
        }
    }

    /// The median msgs/s of a row, NaN if it did not run.
    pub(super) fn median(&self, name: &str) -> f64 {
        self.rows
            .iter()
            .find(|(n, _)| *n == name)
            .map_or(f64::NAN, |(_, v)| super::median(v.clone()))
    }
}

pub(super) const RUST: &str = "(r)  worker-host, Rust serde_json, fresh";
pub(super) const RUST_REUSE: &str = "(r)  worker-host, Rust serde_json, reuse";
pub(super) const PY_REUSE: &str = "(p)  worker-host, Python json.loads, reuse";
pub(super) const PY_FRESH: &str = "(p)  worker-host, Python json.loads, fresh";
pub(super) const JS_REUSE: &str = "(j)  worker-host, JS JSON.parse, reuse";
pub(super) const JS_FRESH: &str = "(j)  worker-host, JS JSON.parse, fresh";
pub(super) const CELERY: &str = "(q)  Celery -P solo, acks_late, no-op task";
pub(super) const DRAMATIQ: &str = "(q)  Dramatiq -p 2 -t 8, no-op actor";

/// What the scenarios of one run need.
pub(super) struct Ctx<'a> {
    pub(super) bin: &'a Path,
    pub(super) root: &'a Path,
    pub(super) n: u64,
    /// Messages per run of the slow scenarios (fresh Python and JS, the peers, the mixed host).
    pub(super) slow: u64,
    pub(super) json: &'a [u8],
    pub(super) state: &'a Path,
}

impl Ctx<'_> {
    /// A plugin file under the repository root (`plugins/...`, `host/benches/handlers/...`).
    pub(super) fn plugin(&self, file: &str) -> PathBuf {
        let path = self.root.join(file);
        assert!(
            path.is_file(),
            "{} is missing: scripts/bench.sh builds it",
            path.display()
        );
        path
    }

    pub(super) fn extra(&self, reuse: bool) -> Extra {
        Extra {
            sections: format!("[state]\ndir = \"{}\"\n", self.state.display()),
            subscription: if reuse {
                "instance = \"reuse\"\n".into()
            } else {
                String::new()
            },
            ..Extra::default()
        }
    }

    async fn component(&self, file: &str, reuse: bool, letter: char, n: u64) -> f64 {
        let path = self.plugin(file);
        let extra = self.extra(reuse);
        host_with(self.bin, Plugin::File(&path), n, self.json, letter, &extra)
            .await
            .rate
    }
}

/// One run of the scenarios `on` selects among `r`, `p`, `j`, `q` and `m`.
pub(super) async fn run(ctx: &Ctx<'_>, on: impl Fn(char) -> bool, out: &mut Results) {
    if on('r') {
        out.push(
            RUST,
            ctx.component(super::setup::JSON_RUST, false, 'r', ctx.n)
                .await,
        );
        out.push(
            RUST_REUSE,
            ctx.component(super::setup::JSON_RUST, true, 'r', ctx.n)
                .await,
        );
    }
    for (letter, file, reuse, fresh) in [
        ('p', super::setup::JSON_PYTHON, PY_REUSE, PY_FRESH),
        ('j', super::setup::JSON_JS, JS_REUSE, JS_FRESH),
    ] {
        if on(letter) {
            out.push(reuse, ctx.component(file, true, letter, ctx.n).await);
            out.push(fresh, ctx.component(file, false, letter, ctx.slow).await);
        }
    }
    if on('q') {
        out.push(CELERY, peer("celery", ctx.slow, ctx.json));
        out.push(DRAMATIQ, peer("dramatiq", ctx.slow, ctx.json));
    }
    if on('m') {
        for (name, reuse) in [("fresh", false), ("reuse", true)] {
            let (rss, rate) = mix(ctx, reuse).await;
            out.push_mix(name, rss, rate);
        }
    }
}

/// Prints the rows against (a), then the ratios the targets are stated in.
pub(super) fn print(out: &Results, a: f64) {
    for (name, v) in &out.rows {
        let m = super::median(v.clone());
        println!("{name:<62} {m:>10.0} {:>8.2}", m / a);
    }
    let ratio = |x: &str, y: &str| out.median(x) / out.median(y);
    let (celery, dramatiq) = (out.median(CELERY), out.median(DRAMATIQ));
    if !celery.is_nan() {
        for row in [PY_REUSE, PY_FRESH, JS_REUSE, JS_FRESH] {
            let m = out.median(row);
            if !m.is_nan() {
                println!(
                    "{row}: {:.2} x Celery, {:.2} x Dramatiq",
                    m / celery,
                    m / dramatiq
                );
            }
        }
        println!("Dramatiq / Celery = {:.2}", ratio(DRAMATIQ, CELERY));
    }
    for (name, rss, rates) in &out.mix {
        let peak = rss.iter().copied().max().unwrap_or(0);
        println!(
            "(m)  8 subscriptions (2 Python, 1 JS, 2 Rust, 1 v1 SDK, 2 WAT), concurrency 4, {name}: \
             peak RSS {:.1} MiB, {:.0} msgs/s in all",
            peak as f64 / 1048576.0,
            super::median(rates.clone())
        );
    }
}

/// A Python peer through host/benches/peers/peers.py, run by the venv scripts/bench.sh builds
/// (`WORKER_BENCH_PYTHON`); its msgs/s.
fn peer(name: &str, n: u64, json: &[u8]) -> f64 {
    let python = std::env::var("WORKER_BENCH_PYTHON").unwrap_or_else(|_| {
        panic!(
            "scenario q needs WORKER_BENCH_PYTHON, a python with host/benches/peers/requirements.txt: \
             scripts/bench.sh builds that venv and sets it"
        )
    });
    let body = std::env::temp_dir().join(unique("bench-body"));
    std::fs::write(&body, json).expect("body file");
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("benches/peers/peers.py");
    let out = Command::new(&python)
        .arg(&script)
        .args([name, "--messages", &n.to_string(), "--url", URL, "--body"])
        .arg(&body)
        .stderr(Stdio::null())
        .output()
        .unwrap_or_else(|e| panic!("{python}: {e}"));
    let _ = std::fs::remove_file(&body);
    let text = String::from_utf8_lossy(&out.stdout);
    text.lines()
        .find_map(|l| l.strip_prefix("rate ")?.trim().parse().ok())
        .unwrap_or_else(|| panic!("peers.py {name} failed ({}): {text}", out.status))
}

/// One host with 8 subscriptions of mixed languages, concurrency 4 each, each queue filled with
/// n/8 JSON messages before it starts; its peak RSS (bytes) and msgs/s in all.
async fn mix(ctx: &Ctx<'_>, reuse: bool) -> (u64, f64) {
    let files = [
        "plugins/demo_python.wasm",
        "plugins/demo_python.wasm",
        "plugins/demo_js.wasm",
        "plugins/demo_rust.wasm",
        "plugins/demo_rust.wasm",
        "plugins/user_monitor.wasm",
    ];
    let paths: Vec<PathBuf> = files.iter().map(|f| ctx.plugin(f)).collect();
    let mut plugins: Vec<Plugin<'_>> = paths.iter().map(|p| Plugin::File(p)).collect();
    plugins.extend([Plugin::Wat(OK_WAT), Plugin::Wat(OK_WAT)]);
    let prefix = unique("bench-mix");
    let extra = ctx.extra(reuse);
    let lines = format!("{}concurrency = 4\n", extra.subscription);
    let subs = subs_of(&plugins, &prefix, &lines);
    let conn = connect().await;
    let ch = conn.create_channel().await.expect("channel");
    {
        let host = start_subs(ctx.bin, &subs, &prefix, &extra.sections);
        wait_ready(&host.admin).await;
    }
    let each = (ctx.slow / 8).max(1);
    for sub in &subs {
        fill(&ch, &sub.queue, each, ctx.json).await;
    }
    let host = start_subs(ctx.bin, &subs, &prefix, &extra.sections);
    let (rate, _) = consume_rate(&host.admin, host.child.id(), each * 8).await;
    let rss = rss_kib(host.child.id(), "VmHWM:") * 1024;
    drop(host);
    for sub in &subs {
        remove_topology(&ch, &sub.queue, &prefix).await;
    }
    let _ = conn.close(200, "bye".into()).await;
    (rss, rate)
}
