//! Config reloads: worker.toml read again and applied to the running subscriptions.

use std::collections::HashMap;
use std::sync::Arc;

use tracing::{info, warn};

use super::State;
use super::consumers::Consumers;
use crate::config::Config;
use crate::consumer::{Link, Subscriber};
use crate::topology::Plan;

/// Reloads worker.toml and applies subscription changes: added ones start, removed ones stop
/// taking deliveries (their in-flight messages still settle), changed ones restart on fresh
/// channels while the old consumer drains. Everything that can fail (parsing, compiling new
/// plugins, declaring) happens before anything running is touched; a broken file keeps what runs.
pub(super) async fn apply_config_change(state: &mut State, link: &Link, consumers: &mut Consumers) {
    // SIGHUP also means "look at the plugins again": some filesystems send no events.
    state.plugins.recheck().await;
    let new = match reload_config(&state.config) {
        Ok(new) => new,
        Err(why) => {
            warn!("config not reloaded, keeping the running one: {why:#}");
            return;
        }
    };
    state
        .plugins
        .set_max_plugin_size(new.plugins.max_plugin_size);
    let next = match prepare_subscribers(state, &new).await {
        Ok(next) => next,
        Err(err) => {
            warn!("config not reloaded, keeping the running one: {err:#}");
            prune_plugins(state);
            return;
        }
    };
    let plan = Plan::from_config(&new);
    if let Err(err) = plan.declare(&link.conn).await {
        if link.conn.status().connected() {
            warn!("config not reloaded, keeping the running one: {err}");
            prune_plugins(state);
            return;
        }
        // The broker went away meanwhile: adopt the new config; the reconnect declares its
        // topology and starts every subscriber, so the change is not lost.
        warn!("config accepted; it applies once the broker is back ({err})");
        adopt(state, next, new);
        return;
    }
    link.keeper.set_plan(plan);
    let (added, removed, restarted) = switch_consumers(&state.subscribers, &next, link, consumers);
    adopt(state, next, new);
    info!(added, removed, restarted, "config reloaded");
}

/// Stops the consumers of removed subscriptions and starts those of added and changed ones
/// (the old consumer of a changed one drains); unchanged ones keep running untouched.
/// Returns how many were added, removed and restarted.
fn switch_consumers(
    running: &HashMap<String, Arc<Subscriber>>,
    next: &HashMap<String, Arc<Subscriber>>,
    link: &Link,
    consumers: &mut Consumers,
) -> (u32, u32, u32) {
    let (mut added, mut removed, mut restarted) = (0, 0, 0);
    for queue in running.keys() {
        if !next.contains_key(queue) {
            info!(queue, "subscription removed: stopping its consumer");
            consumers.stop(queue);
            removed += 1;
        }
    }
    for (queue, subscriber) in next {
        match running.get(queue) {
            Some(old) if Arc::ptr_eq(old, subscriber) => {}
            Some(_) => {
                info!(queue, "subscription changed: restarting its consumer");
                consumers.start(link, subscriber.clone());
                restarted += 1;
            }
            None => {
                info!(queue, "subscription added: starting its consumer");
                consumers.start(link, subscriber.clone());
                added += 1;
            }
        }
    }
    (added, removed, restarted)
}

/// Makes `new` the running config with `next` as its subscribers, and drops the plugins only
/// the old config used.
fn adopt(state: &mut State, next: HashMap<String, Arc<Subscriber>>, new: Config) {
    state.subscribers = next;
    state.config = new;
    prune_plugins(state);
}

/// Reads worker.toml again. Sections the running service cannot change in place keep their
/// running values (with a warning); a change to `[exchanges]` or `plugins.dir` refuses the
/// whole reload, since subscriptions, retry routes and the watcher depend on them.
fn reload_config(old: &Config) -> anyhow::Result<Config> {
    let (mut new, warnings) = Config::load(&old.path).map_err(|err| anyhow::anyhow!("{err}"))?;
    for w in warnings {
        warn!("{w}");
    }
    if new.exchanges != old.exchanges {
        anyhow::bail!("[exchanges] changed; that needs a restart");
    }
    if new.plugins.dir != old.plugins.dir {
        anyhow::bail!("[plugins] dir changed; that needs a restart");
    }
    let mut later = Vec::new();
    if new.broker != old.broker {
        later.push("[broker]");
        new.broker = old.broker.clone();
    }
    if new.admin != old.admin {
        later.push("[admin]");
        new.admin = old.admin.clone();
    }
    if new.tracing != old.tracing {
        later.push("[tracing]");
        new.tracing = old.tracing.clone();
    }
    if new.delay != old.delay {
        later.push("[delay]");
        new.delay = old.delay;
    }
    if new.kv != old.kv {
        later.push("[kv]");
        new.kv = old.kv.clone();
    }
    if new.sql != old.sql {
        later.push("[sql]");
        new.sql = old.sql.clone();
    }
    for sub in &new.subscriptions {
        let g = &sub.grants;
        let kv_missing =
            g.kv.as_ref()
                .filter(|n| !new.kv.iter().any(|s| &s.name == *n));
        let sql_missing = g
            .sql
            .as_ref()
            .filter(|n| !new.sql.iter().any(|s| &s.name == *n));
        if let Some(name) = kv_missing {
            anyhow::bail!(
                "subscription {} uses [kv.{name}], which is new; [kv] changes need a restart",
                sub.queue
            );
        }
        if let Some(name) = sql_missing {
            anyhow::bail!(
                "subscription {} uses [sql.{name}], which is new; [sql] changes need a restart",
                sub.queue
            );
        }
    }
    if !later.is_empty() {
        warn!(
            "changes to {} apply at the next restart; the rest is applied now",
            later.join(", ")
        );
    }
    Ok(new)
}

/// A subscriber per subscription of `new`: the running one when unchanged, else a new one
/// (compiling its plugin if no subscription used that file yet).
async fn prepare_subscribers(
    state: &State,
    new: &Config,
) -> anyhow::Result<HashMap<String, Arc<Subscriber>>> {
    let mut next = HashMap::new();
    for sub in &new.subscriptions {
        let same = state
            .subscribers
            .get(&sub.queue)
            .filter(|s| *s.sub == *sub)
            .cloned();
        let subscriber = match same {
            Some(s) => s,
            None => state.subscriber(Arc::new(sub.clone())).await?,
        };
        next.insert(sub.queue.clone(), subscriber);
    }
    Ok(next)
}

/// Drops the plugin slots no subscription uses any more.
fn prune_plugins(state: &State) {
    state.plugins.retain(|path| {
        state
            .subscribers
            .values()
            .any(|s| s.sub.plugin_path == path)
    });
}
