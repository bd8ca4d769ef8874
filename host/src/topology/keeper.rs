//! Keeping the declared topology on the broker: a periodic check that every queue and exchange
//! of the plan still exists, and repairs on demand (a republish to one of our queues came back
//! unroutable, a consumer was cancelled). A repair declares the whole plan again: declaring is
//! idempotent, and bindings vanish with the objects they join.

use std::sync::Arc;
use std::time::{Duration, Instant};

use arc_swap::ArcSwap;
use lapin::options::{ExchangeDeclareOptions, QueueDeclareOptions};
use lapin::types::FieldTable;
use lapin::{Channel, Connection, ExchangeKind};
use tokio_util::sync::CancellationToken;
use tracing::{debug, info, warn};

use super::{Plan, TopologyError};
use crate::metrics::Metrics;

/// Keeps one connection's topology; shared by that connection's consumers.
pub struct Keeper {
    conn: Arc<Connection>,
    plan: ArcSwap<Plan>,
    metrics: Arc<Metrics>,
    /// When the last repair finished; held while repairing so one repair serves every caller.
    last_repair: tokio::sync::Mutex<Option<Instant>>,
}

impl Keeper {
    /// A keeper of `plan` on `conn`.
    pub fn new(conn: Arc<Connection>, plan: Plan, metrics: Arc<Metrics>) -> Keeper {
        Keeper {
            conn,
            plan: ArcSwap::from_pointee(plan),
            metrics,
            last_repair: tokio::sync::Mutex::new(None),
        }
    }

    /// Replaces the plan (after a config reload declared a new one).
    pub fn set_plan(&self, plan: Plan) {
        self.plan.store(Arc::new(plan));
    }

    /// Declares the whole plan again because of `why`, unless a repair finished after the
    /// caller noticed the problem (then that repair already covered it).
    pub async fn repair(&self, why: &str) -> Result<(), TopologyError> {
        let noticed = Instant::now();
        let mut last = self.last_repair.lock().await;
        if last.is_some_and(|at| at >= noticed) {
            return Ok(());
        }
        warn!("{why}: declaring the topology again");
        self.metrics.set_repairing(true);
        let result = self.plan.load().declare(&self.conn).await;
        self.metrics.set_repairing(false);
        *last = Some(Instant::now());
        match &result {
            Ok(()) => info!("topology declared again"),
            Err(err) => warn!("declaring the topology again failed: {err}"),
        }
        result
    }

    /// Checks every queue and exchange of the plan with passive declares; repairs if any is
    /// missing. Returns the names found missing.
    pub async fn check(&self) -> Result<Vec<String>, lapin::Error> {
        let plan = self.plan.load_full();
        let mut probe = Probe::open(&self.conn).await?;
        let mut missing = Vec::new();
        for exchange in &plan.exchanges {
            if !probe.exchange_exists(&exchange.name).await? {
                missing.push(format!("exchange \"{}\"", exchange.name));
            }
        }
        for queue in &plan.queues {
            if !probe.queue_exists(&queue.name).await? {
                missing.push(format!("queue \"{}\"", queue.name));
            }
        }
        probe.close().await;
        if !missing.is_empty() {
            let why = format!("missing on the broker: {}", missing.join(", "));
            // A failed repair is logged there; the next check tries again.
            let _ = self.repair(&why).await;
        }
        Ok(missing)
    }

    /// Checks every `every` until `cancel` fires or the connection closes.
    pub async fn run(self: Arc<Self>, every: Duration, cancel: CancellationToken) {
        loop {
            tokio::select! {
                _ = cancel.cancelled() => return,
                _ = tokio::time::sleep(every) => {}
            }
            if !self.conn.status().connected() {
                return;
            }
            if let Err(err) = self.check().await {
                debug!("topology check interrupted: {err}");
            }
        }
    }
}

/// A channel for passive declares; a missing object closes it, so it reopens as needed.
struct Probe<'a> {
    conn: &'a Connection,
    channel: Channel,
}

impl<'a> Probe<'a> {
    async fn open(conn: &'a Connection) -> Result<Probe<'a>, lapin::Error> {
        Ok(Probe {
            conn,
            channel: conn.create_channel().await?,
        })
    }

    async fn exchange_exists(&mut self, name: &str) -> Result<bool, lapin::Error> {
        let passive = ExchangeDeclareOptions {
            passive: true,
            ..ExchangeDeclareOptions::default()
        };
        let found = self
            .channel
            .exchange_declare(
                name.into(),
                ExchangeKind::Topic,
                passive,
                FieldTable::default(),
            )
            .await;
        self.answer(found).await
    }

    async fn queue_exists(&mut self, name: &str) -> Result<bool, lapin::Error> {
        let passive = QueueDeclareOptions {
            passive: true,
            ..QueueDeclareOptions::default()
        };
        let found = self
            .channel
            .queue_declare(name.into(), passive, FieldTable::default())
            .await
            .map(|_| ());
        self.answer(found).await
    }

    /// Ok(true) if it exists; Ok(false) on NOT_FOUND (reopening the channel); else the error.
    async fn answer(&mut self, result: Result<(), lapin::Error>) -> Result<bool, lapin::Error> {
        match result {
            Ok(()) => Ok(true),
            Err(err) if crate::broker::is_not_found(&err) => {
                self.channel = self.conn.create_channel().await?;
                Ok(false)
            }
            Err(err) => Err(err),
        }
    }

    async fn close(self) {
        let _ = self.channel.close(200, "checked".into()).await;
    }
}
