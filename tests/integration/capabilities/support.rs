//! Helpers of the capability tests: the servers they need (a missing one fails the test with
//! the command that starts it), and `Probe`, a service running `plugins/cap_probe.wasm` on a
//! few subscriptions, in-process or as the real binary with its own environment (the harness's
//! [`Host`]), that sends scripts and collects what the guest saw: the report of an ok answer,
//! or the `worker-error` header of a parked message.

use std::collections::BTreeMap;
use std::net::{SocketAddr, TcpStream};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use lapin::BasicProperties;
use serde_json::{Value, json};

use crate::harness::{self, Host, Names};
use crate::reload::support::{sub_toml_with, topology_toml};

/// The probe's file name in plugins/ and in the service's plugins folder.
pub const PROBE: &str = "cap_probe.wasm";

/// A server the tests use and how to start it.
pub struct Server {
    pub name: &'static str,
    pub addr: &'static str,
    pub start: &'static str,
}

pub const POSTGRES: Server = Server {
    name: "PostgreSQL",
    addr: "127.0.0.1:5432",
    start: "service postgresql start",
};
pub const MARIADB: Server = Server {
    name: "MariaDB",
    addr: "127.0.0.1:3306",
    start: "service mariadb start",
};
pub const REDIS: Server = Server {
    name: "Redis",
    addr: "127.0.0.1:6379",
    start: "redis-server --daemonize yes",
};

/// Fails the test, naming the command that starts `server`, unless it accepts connections.
pub fn require(server: &Server) {
    let addr: SocketAddr = server.addr.parse().expect("a socket address");
    if let Err(e) = TcpStream::connect_timeout(&addr, Duration::from_secs(2)) {
        panic!(
            "{} does not answer on {}: {e}\nstart it with: {}\n(or run scripts/services.sh, which installs and starts every server the capability tests use)",
            server.name, server.addr, server.start
        );
    }
}

/// The repository's root.
fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

/// The built probe; a missing file fails the test with the command that builds it.
pub fn probe_wasm() -> Vec<u8> {
    let path = root().join("plugins").join(PROBE);
    std::fs::read(&path).unwrap_or_else(|e| {
        panic!(
            "the capability probe {} is not built ({e}); build it with: scripts/build-plugins.sh",
            path.display()
        )
    })
}

/// One subscription running the probe: `<p>.<name>`, bound to `<p>.<name>.*`, its reports
/// going to `<p>.out`. `keys` are its own keys (grants, limits); `tables` its sub-tables
/// (`[subscription.http_headers."..."]`), written after `[subscription.config]`.
pub struct Sub {
    pub name: String,
    pub keys: String,
    pub tables: String,
}

impl Sub {
    pub fn new(name: &str, keys: &str) -> Sub {
        Sub {
            name: name.to_owned(),
            keys: keys.to_owned(),
            tables: String::new(),
        }
    }

    pub fn tables(mut self, tables: &str) -> Sub {
        self.tables = tables.to_owned();
        self
    }
}

/// The binary as a child process on the worker.toml `toml` makes of its own folder (for its
/// `[state] dir`, say), the probe in its plugins folder, `env` added to its environment.
pub(crate) fn child_host(toml: impl FnOnce(&Path) -> String, env: &[(&str, &str)]) -> Host {
    let dir = harness::folder(&[(PROBE, &probe_wasm())]);
    let config = harness::write_config(dir.path(), &toml(dir.path()));
    Host::child(&config).envs(env).start_owning(dir)
}

/// A running service with the probe on some subscriptions, and what came back from it.
pub struct Probe {
    pub n: Names,
    pub conn: lapin::Connection,
    pub ch: lapin::Channel,
    host: Host,
    subs: Vec<String>,
    reports: BTreeMap<String, Value>,
    parked: BTreeMap<(String, String), BTreeMap<String, String>>,
}

impl Probe {
    /// Starts the service in-process: `subs` on the probe, `[state] dir = state`, and `tables`
    /// (`[kv.NAME]`, `[sql.NAME]`, ...) at the end of worker.toml.
    pub async fn start(test: &str, subs: &[Sub], state: &Path, tables: &str) -> Probe {
        let n = Names::new(test);
        let toml = worker_toml(&n, subs, state, tables);
        let host = Host::in_process(&toml, &[(PROBE, &probe_wasm())]).await;
        Probe::ready(n, subs, host).await
    }

    /// [`Probe::start`] with the real binary, `env` added to its environment, logging JSON to a
    /// file (see [`Probe::log`]).
    pub async fn start_child(
        test: &str,
        subs: &[Sub],
        state: &Path,
        tables: &str,
        env: &[(&str, &str)],
    ) -> Probe {
        Probe::start_child_edited(test, subs, state, tables, env, |toml| toml).await
    }

    /// [`Probe::start_child`] with worker.toml changed by `edit` (a `[broker]` key, say).
    pub async fn start_child_edited(
        test: &str,
        subs: &[Sub],
        state: &Path,
        tables: &str,
        env: &[(&str, &str)],
        edit: impl FnOnce(String) -> String,
    ) -> Probe {
        let n = Names::new(test);
        let host = child_host(|_| edit(worker_toml(&n, subs, state, tables)), env);
        Probe::ready(n, subs, host).await
    }

    async fn ready(n: Names, subs: &[Sub], host: Host) -> Probe {
        let (conn, ch) = harness::channel().await;
        let mut probe = Probe {
            subs: subs.iter().map(|s| format!("{}.{}", n.p, s.name)).collect(),
            n,
            conn,
            ch,
            host,
            reports: BTreeMap::new(),
            parked: BTreeMap::new(),
        };
        probe.wait_consumers().await;
        probe.check_running();
        probe
    }

    /// Waits (30 s) for a consumer on every subscription.
    async fn wait_consumers(&self) {
        for q in &self.subs {
            if let Err(e) = tokio::time::timeout(
                Duration::from_secs(30),
                harness::wait_consuming(&self.conn, q),
            )
            .await
            {
                panic!("{q} has no consumer ({e}); host log:\n{}", self.log());
            }
        }
    }

    /// The config the service runs, read from its worker.toml.
    pub fn config(&self) -> worker_host::config::Config {
        self.host.config()
    }

    /// Its worker.toml.
    pub fn config_path(&self) -> PathBuf {
        self.host.config_path().to_owned()
    }

    /// The folder holding its worker.toml, which names its broker connection
    /// (`client_properties`).
    pub fn dir(&self) -> &Path {
        self.host.dir()
    }

    /// The child's log so far (empty in-process: the test's own output has those lines).
    pub fn log(&self) -> String {
        self.host.log()
    }

    fn check_running(&mut self) {
        if self.host.is_child() {
            self.host.assert_running();
        }
    }

    /// Publishes `script` to subscription `sub`.
    pub async fn send(&self, sub: &str, script: &Value) {
        self.send_with(sub, script, BasicProperties::default())
            .await;
    }

    /// Publishes `script` to subscription `sub` with `props` (a message id, say).
    pub async fn send_with(&self, sub: &str, script: &Value, props: BasicProperties) {
        let key = format!("{}.{sub}.x", self.n.p);
        let body = script.to_string();
        harness::publish(&self.ch, &self.n.master(), &key, body.as_bytes(), props).await;
    }

    /// Publishes every (script, properties) of `messages` to subscription `sub` at once: all
    /// sent, then all confirmed, so the service gets them as one burst.
    pub async fn send_all(
        &self,
        sub: &str,
        messages: impl IntoIterator<Item = (Value, BasicProperties)>,
    ) {
        let key = format!("{}.{sub}.x", self.n.p);
        let messages = messages
            .into_iter()
            .map(|(script, props)| (key.clone(), script.to_string().into_bytes(), props));
        harness::publish_pipelined(&self.ch, &self.n.master(), messages).await;
    }

    /// The next report as delivered (its properties too), if one arrives within `wait`.
    pub async fn next_report(&mut self, wait: Duration) -> Option<lapin::message::BasicGetMessage> {
        let deadline = Instant::now() + wait;
        loop {
            if let Some(msg) = harness::get(&self.ch, &self.n.seen()).await {
                return Some(msg);
            }
            if Instant::now() >= deadline {
                return None;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    /// Waits for the child to exit by itself (a crash point) and returns its status.
    pub async fn exited(&mut self) -> std::process::ExitStatus {
        self.host.exited().await
    }

    /// SIGTERM to the child; waits for it to exit and returns its status.
    pub async fn terminate(&mut self) -> std::process::ExitStatus {
        self.host.terminate().await
    }

    /// Starts the binary again after it exited: same config, names and state, with `env`.
    pub async fn restart_child(&mut self, env: &[(&str, &str)]) {
        self.host.respawn_with(env);
        self.wait_consumers().await;
    }

    /// Sends `script` (which has an `id`) and waits for its report.
    pub async fn run(&mut self, sub: &str, script: Value) -> Value {
        let id = id_of(&script);
        self.send(sub, &script).await;
        self.report(&id).await
    }

    /// Waits for the report of `id` (reports of other ids are kept for later).
    pub async fn report(&mut self, id: &str) -> Value {
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            if let Some(r) = self.reports.remove(id) {
                return r;
            }
            match harness::get(&self.ch, &self.n.seen()).await {
                Some(msg) => {
                    let r: Value = serde_json::from_slice(&msg.delivery.data).expect("a report");
                    self.reports.insert(id_of(&r), r);
                }
                None if Instant::now() < deadline => {
                    self.check_running();
                    tokio::time::sleep(Duration::from_millis(20)).await;
                }
                None => panic!("no report of {id} after 20s; host log:\n{}", self.log()),
            }
        }
    }

    /// Waits for the message `id` parked in `<sub>@failed` and returns its headers.
    pub async fn parked(&mut self, sub: &str, id: &str) -> BTreeMap<String, String> {
        let queue = format!("{}.{sub}@failed", self.n.p);
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            if let Some(h) = self.parked.remove(&(queue.clone(), id.to_owned())) {
                return h;
            }
            match harness::get(&self.ch, &queue).await {
                Some(msg) => {
                    let body: Value = serde_json::from_slice(&msg.delivery.data).expect("JSON");
                    let headers = harness::headers_of(&msg);
                    self.parked.insert((queue.clone(), id_of(&body)), headers);
                }
                None if Instant::now() < deadline => {
                    self.check_running();
                    tokio::time::sleep(Duration::from_millis(20)).await;
                }
                None => panic!("{id} not parked in {queue} after 20s; log:\n{}", self.log()),
            }
        }
    }

    /// Stops the service (drains; the child gets SIGTERM) and deletes the topology.
    pub async fn stop(self) {
        self.shut_down().await.cleanup().await;
    }

    /// Stops the service (drains; the child gets SIGTERM) and keeps the topology for a last
    /// look: a message it held unacked is back in its queue now.
    pub async fn shut_down(self) -> Stopped {
        self.host.stop().await;
        Stopped {
            n: self.n,
            conn: self.conn,
            ch: self.ch,
            subs: self.subs,
        }
    }
}

/// The topology of a [`Probe`] whose service has stopped, until [`Stopped::cleanup`].
pub struct Stopped {
    pub n: Names,
    conn: lapin::Connection,
    pub ch: lapin::Channel,
    subs: Vec<String>,
}

impl Stopped {
    /// Messages ready in `queue` (a subscription's, `<p>.<name>`, or one derived from it).
    pub async fn depth(&self, queue: &str) -> u32 {
        harness::depth(&self.ch, queue).await
    }

    /// Takes every message left in `queue` (reports, or scripts).
    pub async fn drain(&self, queue: &str) -> Vec<Seen> {
        let mut all = Vec::new();
        while let Some(msg) = harness::get(&self.ch, queue).await {
            all.push(seen_of(&msg));
        }
        all
    }

    /// Deletes the topology.
    pub async fn cleanup(self) {
        let _ = self.conn.close(200, "done".into()).await;
        self.n.cleanup(&self.subs).await;
    }
}

/// A report (or script) as it arrived: its `id`, and the message id it carries.
pub type Seen = (String, Option<String>);

/// What a delivered report (or script) is, as [`Seen`].
pub fn seen_of(msg: &lapin::message::BasicGetMessage) -> Seen {
    let body: Value = serde_json::from_slice(&msg.delivery.data).expect("JSON");
    let message_id = msg.delivery.properties.message_id().as_ref();
    (id_of(&body), message_id.map(|s| s.to_string()))
}

/// The `id` of a script or report.
pub fn id_of(v: &Value) -> String {
    v["id"]
        .as_str()
        .unwrap_or_else(|| panic!("no id in {v}"))
        .to_owned()
}

/// The report a retry or fail answer left as `worker-error` on the parked message.
pub fn worker_error(headers: &BTreeMap<String, String>) -> Value {
    let text = headers
        .get("worker-error")
        .unwrap_or_else(|| panic!("no worker-error in {headers:?}"));
    serde_json::from_str(text)
        .unwrap_or_else(|e| panic!("worker-error is not a report ({e}): {text}"))
}

/// The results of a report, each `{"ok": ...}` or `{"error": name, "text": ...}`.
pub fn results(report: &Value) -> Vec<Value> {
    report["results"]
        .as_array()
        .unwrap_or_else(|| panic!("no results in {report}"))
        .clone()
}

/// The error variant name of each result (`ok` for a success), for compact asserts.
pub fn outcomes(report: &Value) -> Vec<String> {
    results(report)
        .iter()
        .map(|r| match r.get("error") {
            Some(e) => e.as_str().unwrap_or("?").to_owned(),
            None => "ok".to_owned(),
        })
        .collect()
}

/// A script: `steps`, answered ok.
pub fn script(id: &str, steps: Value) -> Value {
    json!({"id": id, "steps": steps})
}

fn worker_toml(n: &Names, subs: &[Sub], state: &Path, tables: &str) -> String {
    let mut toml = topology_toml(n);
    for sub in subs {
        let queue = format!("{}.{}", n.p, sub.name);
        toml.push_str(&sub_toml_with(n, PROBE, &queue, &sub.name, &sub.keys));
        toml.push_str(&format!(
            "[subscription.config]\nreport = \"{}\"\n\n{}\n",
            n.out(),
            sub.tables
        ));
    }
    toml.push_str(&format!(
        "[state]\ndir = \"{}\"\n\n{tables}\n",
        state.display()
    ));
    toml
}
