//! The one wrapper of a worker-host under test: in-process (`worker_host::run` on a task of the
//! test's runtime) or the real binary as a child process ([`Launch`]: JSON or plain logs to a
//! file, extra environment, under `prlimit`, an admin endpoint), its config folder, its log, and
//! how it ends: drained (the in-process stop signal or SIGTERM), killed, or by itself. Dropped
//! while running, it is aborted or SIGKILLed, and a child's log is printed when the test is
//! failing (or `WORKER_TEST_HOST_LOGS` is set).

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::time::Duration;

use super::{broker_url, eventually};

/// How long a host may take to drain and exit after being asked to.
const STOP: Duration = Duration::from_secs(30);
/// Lines of a child's log printed for a failing test.
const LOG_TAIL: usize = 200;

/// A fresh folder with `plugins/` holding `plugins` (file name, bytes); the caller writes
/// worker.toml (see [`write_config`]).
pub fn folder(plugins: &[(&str, &[u8])]) -> tempfile::TempDir {
    let dir = tempfile::tempdir().expect("temp dir");
    std::fs::create_dir_all(dir.path().join("plugins")).expect("plugins dir");
    for (name, bytes) in plugins {
        std::fs::write(dir.path().join("plugins").join(name), bytes).expect("write plugin");
    }
    dir
}

/// Writes `text` as `dir`/worker.toml and returns its path.
pub fn write_config(dir: &Path, text: &str) -> PathBuf {
    let path = dir.join("worker.toml");
    std::fs::write(&path, text).expect("write worker.toml");
    path
}

/// How the binary is started: its worker.toml, log file, environment and limits.
#[derive(Clone)]
pub struct Launch {
    config: PathBuf,
    log: PathBuf,
    env: Vec<(String, String)>,
    json_logs: bool,
    nofile: Option<String>,
    admin: Option<SocketAddr>,
}

impl Launch {
    /// Its stderr goes (appended) to `path` instead of `host.log` beside worker.toml.
    pub fn log_file(mut self, path: impl Into<PathBuf>) -> Launch {
        self.log = path.into();
        self
    }

    /// Adds `key=value` to its environment (after `RUST_LOG=info`, so it may override it).
    pub fn env(mut self, key: &str, value: &str) -> Launch {
        self.env.push((key.to_owned(), value.to_owned()));
        self
    }

    /// Adds every pair of `env` to its environment.
    pub fn envs(self, env: &[(&str, &str)]) -> Launch {
        env.iter().fold(self, |l, (k, v)| l.env(k, v))
    }

    /// Logs text (the default log format) instead of JSON.
    pub fn plain_logs(mut self) -> Launch {
        self.json_logs = false;
        self
    }

    /// Runs it under `prlimit --nofile=<limits>` (`SOFT:HARD`).
    pub fn nofile(mut self, limits: &str) -> Launch {
        self.nofile = Some(limits.to_owned());
        self
    }

    /// Notes the admin endpoint its worker.toml configures, for [`Host::admin`].
    pub fn admin(mut self, addr: SocketAddr) -> Launch {
        self.admin = Some(addr);
        self
    }

    /// Starts the binary.
    pub fn start(self) -> Host {
        self.start_in(None)
    }

    /// Starts the binary, the host owning `dir` (removed with it).
    pub fn start_owning(self, dir: tempfile::TempDir) -> Host {
        self.start_in(Some(dir))
    }

    fn start_in(self, dir: Option<tempfile::TempDir>) -> Host {
        let child = self.spawn();
        Host {
            admin: self.admin,
            config: self.config.clone(),
            log: Some(self.log.clone()),
            run: Run::Child {
                child,
                launch: self,
            },
            dir,
        }
    }

    fn spawn(&self) -> Child {
        let file = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&self.log)
            .expect("log file");
        let bin = env!("CARGO_BIN_EXE_worker-host");
        let mut cmd = match &self.nofile {
            Some(limits) => {
                let mut cmd = Command::new("prlimit");
                cmd.arg(format!("--nofile={limits}")).arg("--").arg(bin);
                cmd
            }
            None => Command::new(bin),
        };
        if self.json_logs {
            cmd.args(["--log-format", "json"]);
        }
        cmd.args(["run", "-c"])
            .arg(&self.config)
            .env_remove("WORKER_BROKER_URL")
            .env_remove(worker_host::failpoint::FAILPOINT_ENV)
            .env("RUST_LOG", "info")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(file);
        for (k, v) in &self.env {
            cmd.env(k, v);
        }
        cmd.spawn().expect("start worker-host")
    }
}

/// How the host runs.
enum Run {
    InProcess {
        stop: Option<tokio::sync::oneshot::Sender<()>>,
        task: Option<tokio::task::JoinHandle<anyhow::Result<()>>>,
    },
    Child {
        child: Child,
        launch: Launch,
    },
}

/// A worker-host under test.
pub struct Host {
    run: Run,
    /// The folder the harness made for it, removed with it.
    dir: Option<tempfile::TempDir>,
    config: PathBuf,
    /// A child's log file (in-process, the service logs to the test's own output).
    log: Option<PathBuf>,
    /// The admin endpoint, when the test configured one.
    pub admin: Option<SocketAddr>,
}

impl Host {
    /// Writes `worker_toml` and `plugins` (file name, bytes) into a fresh folder and runs the
    /// service there, in-process. `[broker]` on the test broker is prepended when the text has
    /// none.
    pub async fn in_process(worker_toml: &str, plugins: &[(&str, &[u8])]) -> Host {
        init_logs();
        let dir = folder(plugins);
        let text = if worker_toml.contains("[broker]") {
            worker_toml.to_string()
        } else {
            format!("[broker]\nurl = \"{}\"\n\n{worker_toml}", broker_url())
        };
        let path = write_config(dir.path(), &text);
        let (config, _warnings) = worker_host::config::Config::parse(
            &std::fs::read_to_string(&path).expect("read back"),
            &path,
        )
        .unwrap_or_else(|e| panic!("test config is invalid:\n{e}"));
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        let task = tokio::spawn(worker_host::run(config, async move {
            let _ = stopped.await;
        }));
        Host {
            run: Run::InProcess {
                stop: Some(stop),
                task: Some(task),
            },
            dir: Some(dir),
            config: path,
            log: None,
            admin: None,
        }
    }

    /// The real binary on `config` (an existing worker.toml), logging JSON to `host.log` beside
    /// it; [`Launch::start`] starts it.
    pub fn child(config: &Path) -> Launch {
        let folder = config.parent().expect("worker.toml in a folder");
        Launch {
            config: config.to_owned(),
            log: folder.join("host.log"),
            env: Vec::new(),
            json_logs: true,
            nofile: None,
            admin: None,
        }
    }

    /// The folder holding its worker.toml and plugins.
    pub fn dir(&self) -> &Path {
        self.config.parent().expect("worker.toml in a folder")
    }

    /// Its worker.toml.
    pub fn config_path(&self) -> &Path {
        &self.config
    }

    /// The config it runs, read from its worker.toml.
    pub fn config(&self) -> worker_host::config::Config {
        worker_host::config::Config::load(&self.config)
            .expect("the host's worker.toml")
            .0
    }

    /// The admin endpoint; panics when the test configured none.
    pub fn admin(&self) -> SocketAddr {
        self.admin.expect("a host with an admin endpoint")
    }

    /// Asks it to drain (the stop signal in-process, SIGTERM to a child) and waits for it;
    /// panics unless it ended cleanly within 30 s.
    pub async fn stop(mut self) {
        if let Run::Child { .. } = self.run {
            let status = self.terminate().await;
            assert!(
                status.success(),
                "worker-host exited with {status}:\n{}",
                self.log()
            );
            return;
        }
        let Run::InProcess { stop, task } = &mut self.run else {
            unreachable!("a child returned above");
        };
        if let Some(stop) = stop.take() {
            let _ = stop.send(());
        }
        if let Some(task) = task.take() {
            match tokio::time::timeout(STOP, task).await {
                Ok(Ok(Ok(()))) => {}
                Ok(Ok(Err(err))) => panic!("service failed: {err:#}"),
                Ok(Err(err)) => panic!("service panicked: {err}"),
                Err(_) => panic!("service did not stop within {STOP:?}"),
            }
        }
    }

    /// Waits for an in-process service to end by itself (for tests of startup errors).
    pub async fn wait_for_exit(mut self) -> anyhow::Result<()> {
        let Run::InProcess { task, .. } = &mut self.run else {
            panic!("not an in-process service");
        };
        let task = task.take().expect("running");
        tokio::time::timeout(STOP, task)
            .await
            .expect("service still running after 30s")
            .expect("service panicked")
    }

    fn child_mut(&mut self) -> &mut Child {
        match &mut self.run {
            Run::Child { child, .. } => child,
            Run::InProcess { .. } => panic!("not a child process"),
        }
    }

    /// Whether it is the binary as a child process (not in-process).
    pub fn is_child(&self) -> bool {
        matches!(self.run, Run::Child { .. })
    }

    /// The child's process id.
    pub fn pid(&self) -> u32 {
        match &self.run {
            Run::Child { child, .. } => child.id(),
            Run::InProcess { .. } => panic!("not a child process"),
        }
    }

    /// Sends a signal by name (TERM, INT, ...) to the child with kill(1).
    pub fn signal(&self, name: &str) {
        let status = Command::new("kill")
            .arg(format!("-{name}"))
            .arg(self.pid().to_string())
            .status()
            .expect("run kill");
        assert!(status.success(), "kill -{name} failed");
    }

    /// SIGKILL: no drain, no acks for what it held; reaps the child.
    pub fn kill(&mut self) {
        let child = self.child_mut();
        let _ = child.kill();
        let _ = child.wait();
    }

    /// Waits up to `timeout` for the child to exit and returns its status.
    pub async fn exit_within(&mut self, timeout: Duration) -> ExitStatus {
        let child = self.child_mut();
        eventually(timeout, "worker-host to exit", || {
            let done = child.try_wait().ok().flatten();
            async move { done }
        })
        .await
    }

    /// Waits (30 s) for the child to exit by itself (a crash point, say).
    pub async fn exited(&mut self) -> ExitStatus {
        self.exit_within(STOP).await
    }

    /// SIGTERM (unless it already exited), then waits (30 s) for the exit and returns its
    /// status.
    pub async fn terminate(&mut self) -> ExitStatus {
        let _ = Command::new("kill")
            .arg("-TERM")
            .arg(self.pid().to_string())
            .status();
        self.exited().await
    }

    /// Starts the binary again after it exited: same config, log and environment.
    pub fn respawn(&mut self) {
        let Run::Child { child, launch } = &mut self.run else {
            panic!("not a child process");
        };
        *child = launch.spawn();
    }

    /// [`Host::respawn`] with `env` as its added environment instead.
    pub fn respawn_with(&mut self, env: &[(&str, &str)]) {
        let Run::Child { launch, .. } = &mut self.run else {
            panic!("not a child process");
        };
        launch.env.clear();
        *launch = launch.clone().envs(env);
        self.respawn();
    }

    /// The child's exit status, or None while it runs.
    pub fn exit_status(&mut self) -> Option<ExitStatus> {
        self.child_mut().try_wait().ok().flatten()
    }

    /// Fails the test when the child has exited.
    pub fn assert_running(&mut self) {
        if let Ok(Some(status)) = self.child_mut().try_wait() {
            panic!("worker-host exited ({status}):\n{}", self.log());
        }
    }

    /// The child's log so far (empty in-process: the test's own output has those lines).
    pub fn log(&self) -> String {
        self.log
            .as_ref()
            .and_then(|log| std::fs::read_to_string(log).ok())
            .unwrap_or_default()
    }

    /// The last `n` lines of the log, for a failure's message.
    pub fn log_tail(&self, n: usize) -> String {
        let log = self.log();
        let lines: Vec<&str> = log.lines().collect();
        lines[lines.len().saturating_sub(n)..].join("\n")
    }

    /// Waits until the log contains `needle`.
    pub async fn wait_log(&self, needle: &str, timeout: Duration) {
        eventually(timeout, &format!("{needle:?} in the host log"), || {
            let found = self.log().contains(needle);
            async move { found.then_some(()) }
        })
        .await
    }
}

impl Drop for Host {
    fn drop(&mut self) {
        match &mut self.run {
            Run::InProcess { task, .. } => {
                if let Some(task) = task.take() {
                    task.abort();
                }
            }
            Run::Child { child, .. } => {
                if let Ok(None) = child.try_wait() {
                    let _ = child.kill();
                    let _ = child.wait();
                }
                let asked = std::env::var_os("WORKER_TEST_HOST_LOGS").is_some();
                if let Some(log) = self
                    .log
                    .as_ref()
                    .filter(|_| std::thread::panicking() || asked)
                {
                    eprintln!(
                        "---- worker-host log {} (last {LOG_TAIL} lines) ----\n{}",
                        log.display(),
                        self.log_tail(LOG_TAIL)
                    );
                }
            }
        }
    }
}

/// Logs of an in-process service, shown for failing tests; RUST_LOG picks the level.
pub fn init_logs() {
    static ONCE: std::sync::Once = std::sync::Once::new();
    ONCE.call_once(|| {
        let filter = tracing_subscriber::EnvFilter::try_from_default_env()
            .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("warn"));
        let _ = tracing_subscriber::fmt()
            .with_env_filter(filter)
            .with_test_writer()
            .try_init();
    });
}
