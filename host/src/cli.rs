//! Command-line arguments (SPEC section 6).

use std::path::PathBuf;

use clap::builder::NonEmptyStringValueParser;
use clap::{ArgGroup, Args, Parser, Subcommand, ValueEnum};

/// Runs RabbitMQ consumers as sandboxed WebAssembly plugins.
#[derive(Debug, Parser)]
#[command(name = "worker-host", version, about)]
pub struct Cli {
    /// Log format.
    #[arg(long, global = true, value_enum, default_value_t = LogFormat::Text, env = "WORKER_LOG_FORMAT")]
    pub log_format: LogFormat,
    #[command(subcommand)]
    pub command: Command,
}

/// How log lines are written to stderr.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum LogFormat {
    /// Human-readable lines.
    Text,
    /// One JSON object per line.
    Json,
}

/// The config file option every command takes.
#[derive(Debug, Args)]
pub struct ConfigArg {
    /// The config file.
    #[arg(short = 'c', long = "config", default_value = "worker.toml")]
    pub path: PathBuf,
}

/// What to do.
#[derive(Debug, Subcommand)]
pub enum Command {
    /// Run the service; SIGTERM/SIGINT drain in-flight work, then exit 0.
    Run(ConfigArg),
    /// Validate the config and compile every plugin.
    Check(ConfigArg),
    /// Print what would be declared; --apply declares it.
    Topology {
        #[command(flatten)]
        config: ConfigArg,
        /// Declare it on the broker.
        #[arg(long)]
        apply: bool,
    },
    /// Publish one message (persistent, confirmed).
    Publish(PublishArgs),
    /// List, replay or discard parked messages.
    Failed {
        #[command(subcommand)]
        command: FailedCommand,
    },
    /// Compile a component for a running host, wasm on stdin, artifact on stdout (the host
    /// runs this in a child process so the compiler's memory never stays in the service).
    #[command(name = "compile-plugin", hide = true)]
    CompilePlugin {
        /// The host's instance pool size.
        #[arg(long)]
        max_instances: u32,
        /// The host's largest memory limit, in bytes.
        #[arg(long)]
        max_memory: u64,
        /// Lower the compiler's priority by this much (the service asks for 10).
        #[arg(long, default_value_t = 0)]
        nice: i32,
    },
    /// Create a new plugin project (a component) in the plugins folder.
    NewPlugin {
        /// The plugin's name (lowercase letters, digits and single dashes).
        name: String,
        /// The plugins workspace to create it in (made when missing or empty).
        #[arg(long, default_value = "plugins")]
        dir: PathBuf,
        /// Its language.
        #[arg(long, value_enum, default_value_t = crate::scaffold::Lang::Rust)]
        lang: crate::scaffold::Lang,
    },
}

/// `publish` arguments.
#[derive(Debug, Args)]
pub struct PublishArgs {
    #[command(flatten)]
    pub config: ConfigArg,
    /// Target exchange.
    #[arg(long)]
    pub exchange: String,
    /// Routing key.
    #[arg(long)]
    pub routing_key: String,
    /// Deliver after this delay (needs [delay] in the config), e.g. "10s".
    #[arg(long, value_parser = humantime::parse_duration)]
    pub delay: Option<std::time::Duration>,
    /// A header, `name=value`; repeatable.
    #[arg(long = "header", value_parser = parse_header)]
    pub headers: Vec<(String, String)>,
    /// The body as text.
    #[arg(long, conflicts_with = "file", required_unless_present = "file")]
    pub body: Option<String>,
    /// Read the body from a file.
    #[arg(long)]
    pub file: Option<PathBuf>,
    /// Message id (default: a fresh random id).
    #[arg(long)]
    pub message_id: Option<String>,
    /// Content type.
    #[arg(long)]
    pub content_type: Option<String>,
}

/// `failed` subcommands.
#[derive(Debug, Subcommand)]
pub enum FailedCommand {
    /// Print parked messages, one JSON object per line, without removing them.
    List {
        #[command(flatten)]
        config: ConfigArg,
        /// The subscription queue (not the @failed one).
        #[arg(long)]
        queue: String,
        /// At most this many.
        #[arg(long)]
        limit: Option<u64>,
    },
    /// Move parked messages back to their queue alone, attempts reset; prints how many.
    ///
    /// Without --limit, --id or --reason: every message parked when it starts.
    Replay {
        #[command(flatten)]
        config: ConfigArg,
        /// The subscription queue (not the @failed one).
        #[arg(long)]
        queue: String,
        /// The first N messages.
        #[arg(long, conflicts_with_all = ["ids", "reason"])]
        limit: Option<u64>,
        /// The messages with these ids (as `failed list` shows them); repeatable.
        #[arg(long = "id", value_name = "ID", num_args = 1.., value_parser = NonEmptyStringValueParser::new(), conflicts_with = "reason")]
        ids: Vec<String>,
        /// The messages whose worker-error contains TEXT or whose worker-failed-reason is TEXT.
        #[arg(long, value_name = "TEXT", value_parser = NonEmptyStringValueParser::new())]
        reason: Option<String>,
    },
    /// Run parked messages through the plugin with every effect captured, not performed;
    /// prints one JSON object per message. The messages stay parked.
    ///
    /// Publishes, HTTP requests, key-value writes and SQL statements are recorded (SQL runs in
    /// a transaction that is rolled back); nothing leaves the host.
    DryRun {
        #[command(flatten)]
        config: ConfigArg,
        /// The subscription queue (not the @failed one).
        #[arg(long)]
        queue: String,
        /// Try this plugin file instead of the subscription's (a fix, before it is deployed).
        #[arg(long, value_name = "FILE")]
        plugin: Option<PathBuf>,
        /// At most this many.
        #[arg(long)]
        limit: Option<u64>,
    },
    /// Remove parked messages for good, one audit line each in the log; prints how many.
    #[command(group(ArgGroup::new("pick").required(true).args(["ids", "all"])))]
    Discard {
        #[command(flatten)]
        config: ConfigArg,
        /// The subscription queue (not the @failed one).
        #[arg(long)]
        queue: String,
        /// The messages with these ids (as `failed list` shows them); repeatable.
        #[arg(long = "id", value_name = "ID", num_args = 1.., value_parser = NonEmptyStringValueParser::new())]
        ids: Vec<String>,
        /// Every message parked when it starts.
        #[arg(long)]
        all: bool,
    },
    /// Replay one parked message as an edited copy: id `<id>.edit<n>`, header
    /// worker-edited-from naming the original, attempts reset. The original is removed once the
    /// broker has confirmed the copy; one audit line in the log says what changed.
    Edit {
        #[command(flatten)]
        config: ConfigArg,
        /// The subscription queue (not the @failed one).
        #[arg(long)]
        queue: String,
        /// The message (its id as `failed list` shows it).
        #[arg(long, value_parser = NonEmptyStringValueParser::new())]
        id: String,
        /// The new body, read from this file (`-`: standard input); without it the body is
        /// kept. A JSON body must stay JSON.
        #[arg(long, value_name = "FILE")]
        body: Option<PathBuf>,
        /// Set a header (name=value); repeatable.
        #[arg(long = "header", value_parser = parse_header)]
        headers: Vec<(String, String)>,
        /// Remove a header; repeatable.
        #[arg(long = "remove-header", value_name = "NAME")]
        remove_headers: Vec<String>,
    },
}

fn parse_header(s: &str) -> Result<(String, String), String> {
    match s.split_once('=') {
        Some((name, value)) if !name.is_empty() => Ok((name.to_string(), value.to_string())),
        _ => Err(format!("expected name=value, got {s:?}")),
    }
}
