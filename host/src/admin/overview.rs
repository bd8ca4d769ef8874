//! The console's overview (`/overview`, and `/` of the listener): every subscription with its
//! live figures, from `GET /api/overview`. Rates and sparklines come from the counters the
//! host keeps (`sampler`), depths from the broker (`depths`), paused and in-flight from the
//! metrics, readiness from `/readyz`'s own judgement. The API is behind the console's guard;
//! it reads memory only (and waits a moment for the broker's depths when none are fresh), so
//! it answers quickly whatever the number of pages polling it.

mod depths;
mod sampler;

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use axum::extract::State;
use axum::middleware;
use axum::response::{IntoResponse, Redirect, Response};
use axum::routing::get;
use serde_json::{Value, json};
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use super::console::Console;
use super::guard::{self, Guard};
use super::page::file;
use crate::config::{Config, Subscription};
use crate::metrics::{Metrics, QueueCounts, unix_millis};
use crate::reload::PluginSet;
use depths::{Depth, Depths, Round};
use sampler::{SAMPLE_EVERY, Sampler, WINDOW};

const PAGE: &str = include_str!("console/overview.html");
const SCRIPT: &str = include_str!("console/overview.js");
const STYLE: &str = include_str!("console/overview.css");

/// How long a request waits for the broker's depths when none are fresh.
const DEPTH_WAIT: Duration = Duration::from_secs(3);

/// What the overview reads: the subscriptions, their counters and rings, their depths.
#[derive(Clone)]
pub(super) struct Overview {
    config: Arc<Config>,
    plugins: PluginSet,
    metrics: Arc<Metrics>,
    sampler: Arc<Sampler>,
    depths: Arc<Depths>,
}

impl Overview {
    pub(super) fn new(metrics: Arc<Metrics>, console: &Console) -> Overview {
        let config = console.config.clone();
        let subs = &config.subscriptions;
        let queues = subs.iter().map(|s| s.queue.clone()).collect();
        let depth_queues = subs.iter().flat_map(queues_of).collect();
        Overview {
            sampler: Arc::new(Sampler::new(metrics.clone(), queues)),
            depths: Arc::new(Depths::new(depth_queues, config.broker.urls.clone())),
            plugins: console.plugins.clone(),
            metrics,
            config,
        }
    }

    /// Starts the sampler and the depth reads on `tasks`, both stopping on `cancel`.
    pub(super) fn spawn(&self, tasks: &TaskTracker, cancel: &CancellationToken) {
        tasks.spawn(self.sampler.clone().run(cancel.clone()));
        let depths = self.depths.clone();
        let cancel = cancel.clone();
        tasks.spawn(async move { depths.run(cancel).await });
    }
}

/// Every queue of `sub` whose depth is shown: `Q`, its retry queues (once each), `Q@failed`.
fn queues_of(sub: &Subscription) -> Vec<String> {
    let mut out = vec![sub.queue.clone()];
    out.extend(retry_queues(sub));
    out.push(sub.failed_queue());
    out
}

fn retry_queues(sub: &Subscription) -> Vec<String> {
    let mut out: Vec<String> = Vec::new();
    for delay in &sub.retry_delays {
        let name = sub.retry_queue_name(delay);
        if !out.contains(&name) {
            out.push(name);
        }
    }
    out
}

/// The page, its files, and `/` sent to it; answered only to this listener's `Host` names.
pub(super) fn page_routes<S: Clone + Send + Sync + 'static>(guard: Arc<Guard>) -> Router<S> {
    Router::new()
        .route("/", get(|| async { Redirect::to("/overview") }))
        .route("/overview", get(|| file("text/html; charset=utf-8", PAGE)))
        .route(
            "/overview/overview.js",
            get(|| file("text/javascript; charset=utf-8", SCRIPT)),
        )
        .route(
            "/overview/overview.css",
            get(|| file("text/css; charset=utf-8", STYLE)),
        )
        .route_layer(middleware::from_fn_with_state(guard, guard::page))
}

/// `GET /api/overview`, behind the API's guard (the token for reads too).
pub(super) fn api_routes(overview: Overview, guard: Arc<Guard>) -> Router {
    Router::new()
        .route("/api/overview", get(answer))
        .route_layer(middleware::from_fn_with_state(guard, guard::api))
        .with_state(overview)
}

async fn answer(State(overview): State<Overview>) -> Response {
    let round = overview.depths.latest(DEPTH_WAIT).await;
    let down = overview.metrics.unavailable();
    let subscriptions: Vec<Value> = overview
        .config
        .subscriptions
        .iter()
        .enumerate()
        .map(|(i, sub)| subscription(&overview, (i, sub), round.as_ref(), &down))
        .collect();
    let ready = overview.metrics.readiness();
    axum::Json(json!({
        "now": unix_millis(),
        "ready": ready.is_ok(),
        "not_ready": ready.err(),
        "broker": broker(round.as_ref()),
        "sample_every_s": SAMPLE_EVERY.as_secs(),
        "window_s": WINDOW.as_secs(),
        "subscriptions": subscriptions,
    }))
    .into_response()
}

/// Whether the depths could be read (neither, before the first round), and how old they are.
fn broker(round: Option<&Round>) -> Value {
    match round {
        None => json!({"read": false, "error": null}),
        Some(r) => json!({
            "read": r.depths.is_ok(),
            "error": r.depths.as_ref().err(),
            "age_ms": u64::try_from(r.at.elapsed().as_millis()).unwrap_or(u64::MAX),
        }),
    }
}

/// One subscription's row.
fn subscription(
    overview: &Overview,
    (index, sub): (usize, &Subscription),
    round: Option<&Round>,
    down: &BTreeMap<String, String>,
) -> Value {
    let counts: QueueCounts = overview.sampler.counts(&sub.queue);
    let (rates, spark) = overview.sampler.rates(index, &counts);
    let depth = |queue: &str| depth(round, queue);
    let retries: Vec<Value> = retry_queues(sub)
        .iter()
        .map(|q| json!({"queue": q, "depth": depth(q)}))
        .collect();
    let queue = depth(&sub.queue);
    let (plugin, version) = overview
        .plugins
        .version_of(&sub.plugin_path)
        .map_or((sub.plugin.clone(), None), |(name, sha)| (name, Some(sha)));
    let round2 = |v: f64| (v * 100.0).round() / 100.0;
    json!({
        "queue": sub.queue,
        "failed_queue": sub.failed_queue(),
        "plugin": plugin,
        "version": version,
        "paused": counts.paused,
        "down": dependencies_down(sub, down),
        "pause_after": sub.pause.map(|p| p.after),
        "pause_for_s": sub.pause.map(|p| p.pause_for.as_secs_f64()),
        "in_flight": counts.in_flight,
        "concurrency": sub.concurrency,
        "consumers": queue["consumers"],
        "rates": {"ok": round2(rates.ok), "retry": round2(rates.retry), "fail": round2(rates.fail)},
        "totals": {"ok": counts.ok, "retry": counts.retry, "fail": counts.fail},
        "last_ok": counts.last_ok,
        "depth": {"queue": queue["ready"], "retry": retries, "failed": depth(&sub.failed_queue())["ready"]},
        "spark": {
            "ok": spark.iter().map(|r| round2(r[0])).collect::<Vec<_>>(),
            "retry": spark.iter().map(|r| round2(r[1])).collect::<Vec<_>>(),
            "fail": spark.iter().map(|r| round2(r[2])).collect::<Vec<_>>(),
        },
    })
}

/// The stores and databases `sub` uses that are unavailable now, as `/readyz` names them.
fn dependencies_down(sub: &Subscription, down: &BTreeMap<String, String>) -> Vec<String> {
    let used = [("kv", &sub.grants.kv), ("sql", &sub.grants.sql)];
    used.into_iter()
        .filter_map(|(kind, name)| {
            let key = format!("{kind}.{}", name.as_deref()?);
            down.get(&key).map(|why| format!("[{key}] {why}"))
        })
        .collect()
}

/// `{"ready": n, "consumers": n}`; `null`s when unknown, and `"missing": true` when the
/// broker has no such queue.
fn depth(round: Option<&Round>, queue: &str) -> Value {
    let read = round.and_then(|r| r.depths.as_ref().ok()?.get(queue).copied());
    match read {
        Some(Depth::Read { ready, consumers }) => json!({"ready": ready, "consumers": consumers}),
        Some(Depth::Missing) => json!({"ready": null, "consumers": null, "missing": true}),
        Some(Depth::Unknown) | None => json!({"ready": null, "consumers": null}),
    }
}

#[cfg(test)]
mod tests {
    use std::path::Path;

    use super::*;

    const TOML: &str = r#"
[broker]
url = "amqp://127.0.0.1"

[kv.cache]
[sql.orders]
url = "sqlite:orders.db"

[[subscription]]
queue = "orders"
plugin = "echo.wasm"
retry_delays = ["1s", "10s", "1s"]
kv = "cache"
sql = "orders"
"#;

    fn sub() -> Subscription {
        let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../tests/configs/good/worker.toml");
        let (config, _) = Config::parse(TOML, &path).unwrap_or_else(|e| panic!("{e}"));
        config.subscriptions[0].clone()
    }

    #[test]
    fn each_queue_of_a_subscription_is_read_once() {
        assert_eq!(
            queues_of(&sub()),
            [
                "orders",
                "orders@retry.1s",
                "orders@retry.10s",
                "orders@failed"
            ]
        );
    }

    #[test]
    fn a_subscription_shows_the_stores_it_uses_that_are_down() {
        let down: BTreeMap<String, String> = [
            ("sql.orders".to_string(), "connection refused".to_string()),
            ("kv.other".to_string(), "timeout".to_string()),
        ]
        .into();
        assert_eq!(
            dependencies_down(&sub(), &down),
            ["[sql.orders] connection refused"]
        );
        assert!(dependencies_down(&sub(), &BTreeMap::new()).is_empty());
    }
}
