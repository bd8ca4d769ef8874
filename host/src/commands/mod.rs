//! The one-shot commands: check, topology, publish, failed, new-plugin.

mod failed;
mod progress;

pub use progress::PROGRESS_TARGET;

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context as _;
use lapin::types::FieldTable;
use lapin::{BasicProperties, Channel, Connection};

use crate::broker;
use crate::broker::publish_confirmed;
use crate::cli::{Command, PublishArgs};
use crate::config::Config;
use crate::delay::Delayer;
use crate::headers;
use crate::plugin::CompilePriority;
use crate::service;
use crate::stdout::say;
use crate::topology::Plan;

/// Loads and validates the config, printing its warnings to stderr.
pub fn load_config(path: &Path) -> anyhow::Result<Config> {
    let (config, warnings) = Config::load(path)?;
    for warning in &warnings {
        eprintln!("{warning}");
    }
    Ok(config)
}

/// Runs every command but `run`.
pub async fn dispatch(command: Command) -> anyhow::Result<()> {
    match command {
        Command::Run(_) => unreachable!("main runs the service itself"),
        Command::Check(args) => check(&args.path).await,
        Command::Topology { config, apply } => topology(&config.path, apply).await,
        Command::Publish(args) => publish(args).await,
        Command::Failed { command } => failed::run(command).await,
        Command::CompilePlugin {
            max_instances,
            max_memory,
            nice,
        } => compile_plugin(max_instances, max_memory, nice),
        Command::NewPlugin { name, dir, lang } => {
            let path = crate::scaffold::new_plugin(&dir, &name, lang)?;
            say!("created {}", path.display());
            Ok(())
        }
    }
}

/// The compiler child process: wasm on stdin, the compiled artifact on stdout.
fn compile_plugin(max_instances: u32, max_memory: u64, nice: i32) -> anyhow::Result<()> {
    use std::io::{Read, Write};
    let mut wasm = Vec::new();
    std::io::stdin()
        .read_to_end(&mut wasm)
        .context("reading the component from stdin")?;
    let artifact = crate::plugin::compile_for_parent(max_instances, max_memory, nice, &wasm)?;
    let mut out = std::io::stdout().lock();
    out.write_all(&artifact)
        .and_then(|()| out.flush())
        .context("writing the compiled component to stdout")
}

/// Validates the config and compiles every plugin, reporting every bad plugin at once.
async fn check(path: &Path) -> anyhow::Result<()> {
    let config = load_config(path)?;
    let runtime = service::runtime_for(&config, CompilePriority::Foreground)?;
    runtime.set_max_plugin_size(config.plugins.max_plugin_size);
    let mut seen = std::collections::BTreeSet::new();
    let mut problems = Vec::new();
    for sub in &config.subscriptions {
        if !seen.insert(sub.plugin_path.clone()) {
            continue;
        }
        match runtime.load_file_async(&sub.plugin_path).await {
            Ok(plugin) => {
                say!(
                    "plugin {} ok ({}, sha256 {}, {})",
                    plugin.name(),
                    plugin.abi(),
                    plugin.short_sha(),
                    plugin.loaded()
                );
                let granted = config
                    .subscriptions
                    .iter()
                    .filter(|s| s.plugin_path == sub.plugin_path && s.grants != Default::default());
                for s in granted.filter(|_| !plugin.is_component()) {
                    problems.push(format!(
                        "subscription {} grants HTTP, kv or sql to {}, an ABI v1 module: capabilities are for components only",
                        s.queue,
                        plugin.name()
                    ));
                }
            }
            Err(err) => problems.push(format!("{err:#}")),
        }
    }
    print_capabilities(&config);
    if !problems.is_empty() {
        anyhow::bail!("{}", problems.join("\n"));
    }
    say!(
        "{}: ok ({} subscriptions, {} plugins)",
        config.path.display(),
        config.subscriptions.len(),
        seen.len()
    );
    Ok(())
}

/// The stores, databases and grants `check` found, with every secret hidden.
fn print_capabilities(config: &crate::config::Config) {
    use crate::config::KvBackend;
    for kv in &config.kv {
        match &kv.backend {
            KvBackend::Embedded { path } => say!("kv {}: embedded, {}", kv.name, path.display()),
            KvBackend::Redis { url } => say!("kv {}: redis, {}", kv.name, url.redacted_url()),
        }
    }
    for db in &config.sql {
        say!(
            "sql {}: {}, {} (at most {} connections)",
            db.name,
            db.kind.as_str(),
            db.url.redacted_url(),
            db.max_connections
        );
    }
    for sub in &config.subscriptions {
        let g = &sub.grants;
        let mut parts: Vec<String> = g.http.allowed.iter().map(|o| format!("http {o}")).collect();
        let headers: usize = g.http.headers.iter().map(|h| h.headers.len()).sum();
        if headers > 0 {
            parts.push(format!("{headers} injected header(s)"));
        }
        parts.extend(g.kv.iter().map(|k| format!("kv {k}")));
        parts.extend(g.sql.iter().map(|d| format!("sql {d}")));
        parts.extend(g.outbox.iter().map(|o| {
            format!(
                "outbox (records kept {})",
                humantime::format_duration(o.retention)
            )
        }));
        if !parts.is_empty() {
            say!("subscription {} may use: {}", sub.queue, parts.join(", "));
        }
    }
}

async fn topology(path: &Path, apply: bool) -> anyhow::Result<()> {
    let config = load_config(path)?;
    let plan = Plan::from_config(&config);
    say!("{}", plan.to_string().trim_end());
    if apply {
        let conn = broker::connect_once(&config.broker.urls, "worker-host topology").await?;
        plan.declare(&conn).await?;
        let _ = conn.close(200, "done".into()).await;
        say!("declared.");
    }
    Ok(())
}

/// `worker-host publish`: everything that can be refused is checked before the broker is
/// touched.
async fn publish(args: PublishArgs) -> anyhow::Result<()> {
    let config = load_config(&args.config.path)?;
    let body = message_body(&args)?;
    let message_id = args
        .message_id
        .clone()
        .unwrap_or_else(|| format!("{:032x}", rand::random::<u128>()));
    let props = properties(&args, &message_id);
    let delayed = delay_plan(&config, args.delay)?;
    let conn = broker::connect_once(&config.broker.urls, "worker-host publish").await?;
    let channel = Arc::new(broker::confirm_channel(&conn).await?);
    let published = send(&conn, &channel, &args, &body, props, delayed).await;
    let _ = conn.close(200, "done".into()).await;
    published.context("message not published")?;
    say!("published {message_id}");
    Ok(())
}

/// The body: `--body` text, else the bytes of `--file`.
fn message_body(args: &PublishArgs) -> anyhow::Result<Vec<u8>> {
    Ok(match (&args.body, &args.file) {
        (Some(body), _) => body.clone().into_bytes(),
        (None, Some(file)) => {
            std::fs::read(file).with_context(|| format!("reading {}", file.display()))?
        }
        (None, None) => anyhow::bail!("give --body or --file"),
    })
}

/// Persistent, with a message id (given or random, so the message can be found again), a
/// timestamp, the `--header`s and `--content-type`.
fn properties(args: &PublishArgs, message_id: &str) -> BasicProperties {
    let mut headers = FieldTable::default();
    for (name, value) in &args.headers {
        headers.insert(name.as_str().into(), headers::text(value));
    }
    let mut props = BasicProperties::default()
        .with_delivery_mode(broker::PERSISTENT)
        .with_message_id(message_id.into())
        .with_headers(headers)
        .with_timestamp(
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map(|d| d.as_secs())
                .unwrap_or(0),
        );
    if let Some(ct) = &args.content_type {
        props = props.with_content_type(ct.as_str().into());
    }
    props
}

/// Refuses a delay the levels cannot express, before the broker is touched. A delay that
/// rounds to nothing is a plain publish (None).
fn delay_plan(
    config: &Config,
    delay: Option<Duration>,
) -> anyhow::Result<Option<(Delayer, Duration)>> {
    let Some(delay) = delay else {
        return Ok(None);
    };
    let delayer = Delayer::required(config)?;
    let steps = delayer.steps(delay)?;
    Ok((steps > 0).then_some((delayer, delay)))
}

/// Publishes with confirms, into the delay levels when `delayed`, else to the exchange itself.
async fn send(
    conn: &Connection,
    channel: &Channel,
    args: &PublishArgs,
    body: &[u8],
    props: BasicProperties,
    delayed: Option<(Delayer, Duration)>,
) -> anyhow::Result<()> {
    match delayed {
        // Only the entry into the delay levels can be checked now (mandatory there); where the
        // message goes at its due time is decided then (docs/delay.md).
        Some((delayer, delay)) => {
            delayer.declare(conn).await?;
            delayer
                .publish(
                    channel,
                    &args.exchange,
                    &args.routing_key,
                    body,
                    props,
                    delay,
                )
                .await
                .map_err(anyhow::Error::from)
        }
        // Mandatory: a message no queue would receive is an error, not a silent drop.
        None => publish_confirmed(
            channel,
            &args.exchange,
            &args.routing_key,
            body,
            props,
            true,
        )
        .await
        .map_err(anyhow::Error::from),
    }
}
