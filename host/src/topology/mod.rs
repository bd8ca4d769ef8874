//! The RabbitMQ objects a config implies (SPEC section 3, plus `[[exchange]]` / `[[queue]]`) as a
//! plain list: printed by `worker-host topology`, declared idempotently by `declare`.

mod declare;
pub mod delay_levels;
mod keeper;

use std::fmt;

use crate::config::{Config, ExchangeType, QueueType, Subscription};

pub use declare::{Inequivalent, ObjectKind, TopologyError};
pub use keeper::Keeper;

/// Everything to declare, in declaration order: exchanges, then queues, then bindings.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Plan {
    pub exchanges: Vec<ExchangeSpec>,
    pub queues: Vec<QueueSpec>,
    pub bindings: Vec<BindingSpec>,
    /// The config file name, for error messages ("worker.toml declares ...").
    pub source: String,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ExchangeSpec {
    pub name: String,
    pub kind: ExchangeType,
    pub durable: bool,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct QueueSpec {
    pub name: String,
    pub durable: bool,
    /// `x-` arguments in the order they are listed.
    pub arguments: Vec<(String, Arg)>,
}

impl QueueSpec {
    pub fn argument(&self, key: &str) -> Option<&Arg> {
        self.arguments
            .iter()
            .find(|(k, _)| k == key)
            .map(|(_, v)| v)
    }
}

/// A queue argument value.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Arg {
    Str(String),
    Int(i64),
}

impl fmt::Display for Arg {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Arg::Str(s) => write!(f, "{s:?}"),
            Arg::Int(i) => write!(f, "{i}"),
        }
    }
}

/// `source` exchange routes `routing_key` to `destination`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BindingSpec {
    pub source: String,
    pub destination: Destination,
    pub routing_key: String,
}

/// Queues are bound to exchanges; exchange-to-exchange bindings serve the delay levels.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Destination {
    Queue(String),
    Exchange(String),
}

impl Plan {
    /// The topology `config` describes.
    pub fn from_config(config: &Config) -> Plan {
        let mut plan = Plan {
            source: config.path.file_name().map_or_else(
                || "worker.toml".into(),
                |n| n.to_string_lossy().into_owned(),
            ),
            ..Plan::default()
        };
        let ex = &config.exchanges;
        for name in [&ex.master, &ex.retry, &ex.failed] {
            plan.add_exchange(ExchangeSpec {
                name: name.clone(),
                kind: ExchangeType::Topic,
                durable: true,
            });
        }
        for decl in &config.exchanges_extra {
            plan.add_exchange(ExchangeSpec {
                name: decl.name.clone(),
                kind: decl.kind,
                durable: decl.durable,
            });
        }
        for sub in &config.subscriptions {
            plan.add_subscription(config, sub);
        }
        for q in &config.queues_extra {
            let mut arguments = Vec::new();
            if let Some(ttl) = q.message_ttl {
                arguments.push(("x-message-ttl".into(), Arg::Int(millis(ttl))));
            }
            if let Some(dlx) = &q.dead_letter_exchange {
                arguments.push(("x-dead-letter-exchange".into(), Arg::Str(dlx.clone())));
            }
            if let Some(key) = &q.dead_letter_routing_key {
                arguments.push(("x-dead-letter-routing-key".into(), Arg::Str(key.clone())));
            }
            if let Some(max) = q.max_length {
                arguments.push((
                    "x-max-length".into(),
                    Arg::Int(max.min(i64::MAX as u64) as i64),
                ));
            }
            arguments.push(queue_type_arg(q.queue_type));
            plan.add_queue(QueueSpec {
                name: q.name.clone(),
                durable: q.durable,
                arguments,
            });
            for b in &q.bindings {
                plan.bind_queue(&b.exchange, &q.name, &b.key);
            }
        }
        if let Some(delay) = &config.delay {
            // The [delay] infrastructure (SPEC section 5): level exchanges, TTL queues and
            // exchange-to-exchange bindings.
            plan.merge(delay_levels::plan(delay));
        }
        plan
    }

    /// The subscription's queue, its failed queue and one retry queue per distinct delay.
    fn add_subscription(&mut self, config: &Config, sub: &Subscription) {
        let ex = &config.exchanges;
        let mut arguments = vec![queue_type_arg(sub.queue_type)];
        if sub.queue_type == QueueType::Quorum {
            // A message the broker gives up on (the delivery limit) is parked, never dropped.
            arguments.push(("x-dead-letter-exchange".into(), Arg::Str(ex.failed.clone())));
            arguments.push((
                "x-dead-letter-routing-key".into(),
                Arg::Str(sub.queue.clone()),
            ));
        }
        self.add_queue(QueueSpec {
            name: sub.queue.clone(),
            durable: true,
            arguments,
        });
        for key in &sub.bindings {
            self.bind_queue(&sub.exchange, &sub.queue, key);
        }
        // Retried and replayed messages come back on master with key Q, reaching Q alone.
        self.bind_queue(&ex.master, &sub.queue, &sub.queue);

        let failed = sub.failed_queue();
        self.add_queue(QueueSpec {
            name: failed.clone(),
            durable: true,
            arguments: vec![queue_type_arg(sub.queue_type)],
        });
        self.bind_queue(&ex.failed, &failed, &sub.queue);

        for delay in sub.distinct_retry_delays() {
            let name = sub.retry_queue_name(delay);
            let mut arguments = vec![
                ("x-message-ttl".into(), Arg::Int(millis(delay.duration))),
                ("x-dead-letter-exchange".into(), Arg::Str(ex.master.clone())),
                (
                    "x-dead-letter-routing-key".into(),
                    Arg::Str(sub.queue.clone()),
                ),
                queue_type_arg(sub.queue_type),
            ];
            if sub.queue_type == QueueType::Quorum {
                // The hop back to Q is confirmed inside the broker: nothing lost if a node
                // fails mid-way (at-least-once dead-lettering needs reject-publish).
                arguments.push((
                    "x-dead-letter-strategy".into(),
                    Arg::Str("at-least-once".into()),
                ));
                arguments.push(("x-overflow".into(), Arg::Str("reject-publish".into())));
            }
            self.add_queue(QueueSpec {
                name: name.clone(),
                durable: true,
                arguments,
            });
            // The host publishes a retry to the retry exchange with the retry queue's name as key.
            self.bind_queue(&ex.retry, &name, &name);
        }
    }

    /// Adds `other`'s objects, skipping exact duplicates (used by the delay infrastructure).
    pub fn merge(&mut self, other: Plan) {
        for e in other.exchanges {
            self.add_exchange(e);
        }
        for q in other.queues {
            self.add_queue(q);
        }
        for b in other.bindings {
            if !self.bindings.contains(&b) {
                self.bindings.push(b);
            }
        }
    }

    pub fn add_exchange(&mut self, spec: ExchangeSpec) {
        if !self.exchanges.contains(&spec) {
            self.exchanges.push(spec);
        }
    }

    pub fn add_queue(&mut self, spec: QueueSpec) {
        if !self.queues.contains(&spec) {
            self.queues.push(spec);
        }
    }

    pub fn bind_queue(&mut self, exchange: &str, queue: &str, key: &str) {
        let binding = BindingSpec {
            source: exchange.into(),
            destination: Destination::Queue(queue.into()),
            routing_key: key.into(),
        };
        if !self.bindings.contains(&binding) {
            self.bindings.push(binding);
        }
    }

    pub fn bind_exchange(&mut self, source: &str, destination: &str, key: &str) {
        let binding = BindingSpec {
            source: source.into(),
            destination: Destination::Exchange(destination.into()),
            routing_key: key.into(),
        };
        if !self.bindings.contains(&binding) {
            self.bindings.push(binding);
        }
    }

    pub fn queue(&self, name: &str) -> Option<&QueueSpec> {
        self.queues.iter().find(|q| q.name == name)
    }
}

fn queue_type_arg(t: QueueType) -> (String, Arg) {
    ("x-queue-type".into(), Arg::Str(t.as_str().into()))
}

/// Config validation keeps TTLs at or below ten years, far inside i64 milliseconds.
fn millis(d: std::time::Duration) -> i64 {
    i64::try_from(d.as_millis()).unwrap_or(i64::MAX)
}

/// A listing for people: one object per line, arguments inline.
impl fmt::Display for Plan {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(f, "exchanges ({}):", self.exchanges.len())?;
        for e in &self.exchanges {
            let durable = if e.durable { "durable" } else { "transient" };
            writeln!(f, "  {:<8} {durable:<9} {}", e.kind.as_str(), e.name)?;
        }
        writeln!(f, "queues ({}):", self.queues.len())?;
        for q in &self.queues {
            let durable = if q.durable { "durable" } else { "transient" };
            write!(f, "  {durable:<9} {}", q.name)?;
            for (key, value) in &q.arguments {
                write!(f, " {key}={value}")?;
            }
            writeln!(f)?;
        }
        writeln!(f, "bindings ({}):", self.bindings.len())?;
        for b in &self.bindings {
            let (kind, name) = match &b.destination {
                Destination::Queue(q) => ("queue", q),
                Destination::Exchange(e) => ("exchange", e),
            };
            writeln!(f, "  {} --[{}]--> {kind} {name}", b.source, b.routing_key)?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests;
