//! `worker-host`: parse arguments, set up logging, load the config, run the command.

use std::process::ExitCode;

use clap::Parser;
use worker_host::cli::{Cli, Command, LogFormat};
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
    init_tracing(cli.log_format, matches!(cli.command, Command::Run(_)));
    // Before the runtime starts: its threads and everything they open get the raised limit.
    raise_open_file_limit();
    if let Err(err) = descriptors::start_compat_runtime() {
        report(&err, json);
        return ExitCode::from(1);
    }
    let runtime = match tokio::runtime::Runtime::new() {
        Ok(rt) => rt,
        Err(err) => {
            eprintln!("error: cannot start the async runtime: {err}");
            return ExitCode::from(1);
        }
    };
    let result = runtime.block_on(run(cli.command));
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

/// Runs the service, or one of the one-shot commands.
async fn run(command: Command) -> anyhow::Result<()> {
    match command {
        Command::Run(args) => {
            // Warnings go through the log so `--log-format json` stays one object per line.
            let (config, warnings) = worker_host::config::Config::load(&args.path)?;
            for warning in &warnings {
                tracing::warn!("{warning}");
            }
            service::run(config, shutdown_signal()).await
        }
        other => commands::dispatch(other).await,
    }
}

/// Raises the soft open-file limit (see `descriptors`) and logs the change; failing that, the
/// host runs with the limit it has.
fn raise_open_file_limit() {
    match descriptors::raise_open_file_limit() {
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
/// lines of `failed discard` are always on: RUST_LOG cannot silence them.
fn init_tracing(format: LogFormat, service: bool) {
    use tracing_subscriber::EnvFilter;
    let default = if service {
        "info,lapin=off"
    } else {
        "warn,lapin=off"
    };
    let mut filter = EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new(default));
    if let Ok(audit) = format!("{}=info", worker_host::failed::AUDIT_TARGET).parse() {
        filter = filter.add_directive(audit);
    }
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr);
    match format {
        LogFormat::Text => builder.init(),
        LogFormat::Json => builder.json().init(),
    }
}

/// Resolves on the first SIGTERM or SIGINT; a second one exits at once.
async fn shutdown_signal() {
    wait_for_signal().await;
    tracing::info!("signal received: draining (a second signal exits at once)");
    tokio::spawn(async {
        wait_for_signal().await;
        tracing::warn!("second signal: exiting now");
        std::process::exit(130);
    });
}

async fn wait_for_signal() {
    use tokio::signal::unix::{SignalKind, signal};
    let (Ok(mut term), Ok(mut int)) = (
        signal(SignalKind::terminate()),
        signal(SignalKind::interrupt()),
    ) else {
        // Without signal handlers the service can only be killed; run anyway.
        return std::future::pending().await;
    };
    tokio::select! {
        _ = term.recv() => {}
        _ = int.recv() => {}
    }
}
