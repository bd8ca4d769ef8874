//! `worker-host`: parse arguments, set up logging, load the config, run the command.

use std::process::ExitCode;

use clap::Parser;
use worker_host::cli::{Cli, Command, LogFormat};
use worker_host::config::{Config, ConfigError, TracingConfig, Warning};
use worker_host::telemetry::Telemetry;
use worker_host::{commands, descriptors, exit_code, service};

fn main() -> ExitCode {
    let cli = match Cli::try_parse() {
        Ok(cli) => cli,
        Err(err) => {
            // --help and --version succeed; a refused argument is a user error (exit 1).
            let _ = err.print();
            return ExitCode::from(u8::from(err.use_stderr()));
        }
    };
    let json = cli.log_format == LogFormat::Json;
    // The service's config is read first: `[tracing]` decides where spans go.
    let loaded = match &cli.command {
        Command::Run(args) => Some(Config::load(&args.path)),
        _ => None,
    };
    // Before the runtimes start: their threads and everything they open get the raised limit.
    let limit = descriptors::raise_open_file_limit();
    let compat = descriptors::start_compat_runtime();
    let runtime = worker_host::runtime::build();
    let tracing_config = match (&loaded, &runtime) {
        (Some(Ok((config, _))), Ok(rt)) => config.tracing.clone().map(|t| (t, rt.handle().clone())),
        _ => None,
    };
    let telemetry = init_tracing(cli.log_format, loaded.is_some(), tracing_config);
    report_open_file_limit(limit);
    if let Err(err) = compat {
        report(&err, json);
        return ExitCode::from(1);
    }
    let runtime = match runtime {
        Ok(rt) => rt,
        Err(err) => {
            report(&err, json);
            return ExitCode::from(1);
        }
    };
    let result = runtime.block_on(run(cli.command, loaded));
    // Queued spans go out while the runtime that sends them still runs.
    if let Some(telemetry) = telemetry {
        telemetry.shutdown();
    }
    // Tasks still running (a plugin compile on the blocking pool) must not hold up the exit.
    runtime.shutdown_timeout(std::time::Duration::from_secs(1));
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(err) => {
            report(&err, json);
            ExitCode::from(exit_code(&err))
        }
    }
}

type Loaded = Result<(Config, Vec<Warning>), ConfigError>;

/// Runs the service (its config already read), or one of the one-shot commands.
async fn run(command: Command, loaded: Option<Loaded>) -> anyhow::Result<()> {
    match (command, loaded) {
        (Command::Run(_), Some(loaded)) => {
            // Warnings go through the log so `--log-format json` stays one object per line.
            let (config, warnings) = loaded?;
            for warning in &warnings {
                tracing::warn!("{warning}");
            }
            service::run(config, shutdown_signal()).await
        }
        (other, _) => commands::dispatch(other).await,
    }
}

/// Logs the raise of the soft open-file limit (see `descriptors`); failing that, the host
/// runs with the limit it has.
fn report_open_file_limit(limit: std::io::Result<descriptors::OpenFileLimit>) {
    match limit {
        Ok(limit) if limit.before != limit.after => tracing::info!(
            "open-file limit raised from {} to {}",
            show_limit(limit.before),
            show_limit(limit.after)
        ),
        Ok(_) => {}
        Err(err) => tracing::warn!("cannot raise the open-file limit to its hard limit: {err}"),
    }
}

/// The error that ends the process: a log line with `--log-format json`, so the output stays
/// one object per line, else plain text on stderr.
fn report(err: &anyhow::Error, json: bool) {
    if json {
        tracing::error!("{err:#}");
    } else {
        eprintln!("error: {err:#}");
    }
}

fn show_limit(limit: Option<u64>) -> String {
    limit.map_or_else(|| "unlimited".to_string(), |n| n.to_string())
}

/// RUST_LOG wins; otherwise the service logs at info and one-shot commands only warnings.
/// lapin's own error lines repeat what our errors say, so they are off by default. The audit
/// lines of `failed discard` and the progress lines of `failed replay` and `discard` are always
/// on: RUST_LOG cannot silence them, nor turn on sqlx's
/// line that quotes a URL parameter (a password, say). With `[tracing]`,
/// spans also go to the collector, whatever the log level.
fn init_tracing(
    format: LogFormat,
    service: bool,
    tracing: Option<(TracingConfig, tokio::runtime::Handle)>,
) -> Option<Telemetry> {
    use tracing_subscriber::prelude::*;
    use tracing_subscriber::{EnvFilter, Layer, Registry};
    let default = if service {
        "info,lapin=off"
    } else {
        "warn,lapin=off"
    };
    let mut filter = EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new(default));
    if let Ok(audit) = format!("{}=info", worker_host::failed::AUDIT_TARGET).parse() {
        filter = filter.add_directive(audit);
    }
    // The progress lines of `failed replay` and `discard` when stderr is no terminal.
    if let Ok(progress) = format!("{}=info", commands::PROGRESS_TARGET).parse() {
        filter = filter.add_directive(progress);
    }
    // sqlx logs the value of a PostgreSQL URL parameter it does not know (`sslpassword=...`).
    if let Ok(quiet) = "sqlx_postgres::options::parse=off".parse() {
        filter = filter.add_directive(quiet);
    }
    let fmt = tracing_subscriber::fmt::layer()
        .with_writer(std::io::stderr)
        .with_ansi(colour(format));
    let fmt = match format {
        LogFormat::Text => fmt.with_filter(filter).boxed(),
        LogFormat::Json => fmt.json().with_filter(filter).boxed(),
    };
    let mut layers: Vec<Box<dyn Layer<Registry> + Send + Sync>> = vec![fmt];
    let mut failure = None;
    let mut telemetry = None;
    if let Some((config, runtime)) = tracing {
        match Telemetry::start(
            &config.traces_url(),
            &config.service_name,
            config.sample_ratio,
            runtime,
        ) {
            Ok((running, layer)) => {
                layers.push(layer.boxed());
                telemetry = Some(running);
            }
            Err(err) => failure = Some(err),
        }
    }
    tracing_subscriber::registry().with(layers).init();
    if let Some(err) = failure {
        tracing::warn!("tracing is off: {err:#}");
    }
    telemetry
}

/// Whether log lines are coloured: text written to a terminal, and `NO_COLOR` unset or empty
/// (no-color.org). A file, a pipe or the journal gets no escape codes.
fn colour(format: LogFormat) -> bool {
    use std::io::IsTerminal;
    let no_color = std::env::var_os("NO_COLOR").is_some_and(|v| !v.is_empty());
    format == LogFormat::Text && !no_color && std::io::stderr().is_terminal()
}

/// Resolves on the first SIGTERM or SIGINT; a second one exits at once. The same listeners
/// hear both: a second signal sent while the first is being logged is not lost.
async fn shutdown_signal() {
    let Some(mut signals) = Signals::listen() else {
        // Without signal handlers the service can only be killed; run anyway.
        return std::future::pending().await;
    };
    signals.next().await;
    tracing::info!("signal received: draining (a second signal exits at once)");
    tokio::spawn(async move {
        signals.next().await;
        tracing::warn!("second signal: exiting now");
        std::process::exit(130);
    });
}

/// SIGTERM and SIGINT, listened to from the start.
struct Signals {
    term: tokio::signal::unix::Signal,
    int: tokio::signal::unix::Signal,
}

impl Signals {
    fn listen() -> Option<Signals> {
        use tokio::signal::unix::{SignalKind, signal};
        Some(Signals {
            term: signal(SignalKind::terminate()).ok()?,
            int: signal(SignalKind::interrupt()).ok()?,
        })
    }

    async fn next(&mut self) {
        tokio::select! {
            _ = self.term.recv() => {}
            _ = self.int.recv() => {}
        }
    }
}
