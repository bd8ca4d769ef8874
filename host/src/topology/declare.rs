//! Declaring a `Plan` on the broker, and turning RabbitMQ's 406 PRECONDITION_FAILED about an
//! existing object into an error that says which argument differs and how to fix it.

use std::fmt;

use lapin::options::{
    ExchangeBindOptions, ExchangeDeclareOptions, QueueBindOptions, QueueDeclareOptions,
};
use lapin::protocol::{AMQPErrorKind, AMQPSoftError};
use lapin::types::{AMQPValue, FieldTable, LongString, ShortString};
use lapin::{Channel, Connection, ErrorKind, ExchangeKind};

use super::{Arg, BindingSpec, Destination, ExchangeSpec, Plan, QueueSpec};
use crate::config::ExchangeType;

#[derive(Debug, thiserror::Error)]
pub enum TopologyError {
    /// Objects that already exist with other arguments; every one found is listed.
    #[error("{}", .0.iter().map(|c| c.to_string()).collect::<Vec<_>>().join("\n"))]
    Inequivalent(Vec<Inequivalent>),
    /// The broker refused an operation or went away. The reason is in the message and not a
    /// `source`, so `{:#}` does not print it twice.
    #[error("{what}: {error}")]
    Broker { what: String, error: lapin::Error },
    /// A name longer than AMQP allows (config validation normally prevents this).
    #[error("{what}: name {name:?} is longer than 255 bytes")]
    NameTooLong { what: &'static str, name: String },
}

impl TopologyError {
    /// True when the user must change something (config or broker state); false when the broker
    /// connection failed and retrying may help.
    pub fn is_user_error(&self) -> bool {
        match self {
            TopologyError::Inequivalent(_) | TopologyError::NameTooLong { .. } => true,
            TopologyError::Broker { error, .. } => error.is_amqp_soft_error(),
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ObjectKind {
    Queue,
    Exchange,
}

impl fmt::Display for ObjectKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            ObjectKind::Queue => "queue",
            ObjectKind::Exchange => "exchange",
        })
    }
}

/// An object that exists with an argument other than the one declared.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Inequivalent {
    pub kind: ObjectKind,
    pub name: String,
    /// The argument RabbitMQ named (`x-message-ttl`, `x-queue-type`, `durable`, `type`, ...).
    pub argument: String,
    /// The value on the broker; None when the existing object lacks the argument.
    pub current: Option<String>,
    /// The value declared; None when the config does not set the argument.
    pub declared: Option<String>,
    /// The config file name, e.g. `worker.toml`.
    pub source: String,
    /// RabbitMQ's reply text as received.
    pub broker_text: String,
}

impl fmt::Display for Inequivalent {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let Inequivalent {
            kind, name, source, ..
        } = self;
        let arg = &self.argument;
        match &self.current {
            Some(current) => write!(f, "{kind} \"{name}\" already exists with {arg} = {current}")?,
            None => write!(f, "{kind} \"{name}\" already exists without {arg}")?,
        }
        match &self.declared {
            Some(declared) => write!(f, ", but {source} declares {declared}")?,
            None => write!(f, ", but {source} does not set it")?,
        }
        write!(f, "; delete the {kind} or change {source}")
    }
}

/// Reads RabbitMQ's "inequivalent arg" text: `PRECONDITION_FAILED - inequivalent arg
/// 'x-message-ttl' for queue 'q' in vhost '/': received the value '1000' of type 'signedint' but
/// current is the value '2000' of type 'signedint'` (or `'true'`, or `none`, for either side).
/// Returns `(argument, received, current)`.
pub(crate) fn parse_inequivalent(text: &str) -> Option<(String, Option<String>, Option<String>)> {
    let rest = &text[text.find("inequivalent arg '")? + "inequivalent arg '".len()..];
    let arg = &rest[..rest.find('\'')?];
    let rest = &rest[rest.find(": received ")? + ": received ".len()..];
    let split = rest.find(" but current is ")?;
    let received = parse_value(&rest[..split])?;
    let current = parse_value(&rest[split + " but current is ".len()..])?;
    Some((arg.to_string(), received, current))
}

/// `the value 'X' of type 'T'` → X, `'X'` → X, `none` → None (outer None: unreadable).
fn parse_value(text: &str) -> Option<Option<String>> {
    let text = text.trim();
    if text == "none" {
        return Some(None);
    }
    let text = text.strip_prefix("the value ").unwrap_or(text);
    let body = text.strip_prefix('\'')?;
    // The value ends at the last quote before " of type", or at the last quote.
    let end = body.find("' of type '").or_else(|| body.rfind('\''))?;
    Some(Some(body[..end].to_string()))
}

impl Plan {
    /// Declares every exchange, queue and binding. Idempotent. Objects that exist with other
    /// arguments are collected and reported together as `TopologyError::Inequivalent`; any other
    /// broker error stops at once.
    pub async fn declare(&self, conn: &Connection) -> Result<(), TopologyError> {
        let mut declarer = Declarer {
            conn,
            channel: open(conn).await?,
            conflicts: Vec::new(),
            source: &self.source,
        };
        declarer.declare_exchanges(&self.exchanges).await?;
        declarer.declare_queues(&self.queues).await?;
        declarer.declare_bindings(&self.bindings).await?;
        // Closing is a courtesy; the declarations are done whatever it answers.
        let _ = declarer
            .channel
            .close(200, "topology declared".into())
            .await;
        if declarer.conflicts.is_empty() {
            Ok(())
        } else {
            Err(TopologyError::Inequivalent(declarer.conflicts))
        }
    }
}

struct Declarer<'a> {
    conn: &'a Connection,
    channel: Channel,
    conflicts: Vec<Inequivalent>,
    source: &'a str,
}

impl Declarer<'_> {
    /// Exchanges come first, as a binding needs both its ends to exist.
    async fn declare_exchanges(&mut self, exchanges: &[ExchangeSpec]) -> Result<(), TopologyError> {
        for e in exchanges {
            let options = ExchangeDeclareOptions {
                durable: e.durable,
                ..Default::default()
            };
            let result = self
                .channel
                .exchange_declare(
                    short("exchange", &e.name)?,
                    exchange_kind(e.kind),
                    options,
                    FieldTable::default(),
                )
                .await;
            self.check(result, ObjectKind::Exchange, &e.name, |arg| match arg {
                "type" => Some(e.kind.as_str().to_string()),
                "durable" => Some(e.durable.to_string()),
                _ => None,
            })
            .await?;
        }
        Ok(())
    }

    async fn declare_queues(&mut self, queues: &[QueueSpec]) -> Result<(), TopologyError> {
        for q in queues {
            let options = QueueDeclareOptions {
                durable: q.durable,
                ..Default::default()
            };
            let mut args = FieldTable::default();
            for (key, value) in &q.arguments {
                args.insert(short("argument", key)?, amqp_value(value));
            }
            let result = self
                .channel
                .queue_declare(short("queue", &q.name)?, options, args)
                .await
                .map(|_| ());
            self.check(result, ObjectKind::Queue, &q.name, |arg| match arg {
                "durable" => Some(q.durable.to_string()),
                _ => q.argument(arg).map(|v| match v {
                    Arg::Str(s) => s.clone(),
                    Arg::Int(i) => i.to_string(),
                }),
            })
            .await?;
        }
        Ok(())
    }

    /// Bindings last, once both ends exist. A refused binding is no conflict: it stops at once.
    async fn declare_bindings(&mut self, bindings: &[BindingSpec]) -> Result<(), TopologyError> {
        for b in bindings {
            let source = short("exchange", &b.source)?;
            let key = short("routing key", &b.routing_key)?;
            let (result, what) = match &b.destination {
                Destination::Queue(q) => (
                    self.channel
                        .queue_bind(
                            short("queue", q)?,
                            source,
                            key,
                            QueueBindOptions::default(),
                            FieldTable::default(),
                        )
                        .await,
                    format!(
                        "binding queue \"{q}\" to exchange \"{}\" with key \"{}\"",
                        b.source, b.routing_key
                    ),
                ),
                Destination::Exchange(e) => (
                    self.channel
                        .exchange_bind(
                            short("exchange", e)?,
                            source,
                            key,
                            ExchangeBindOptions::default(),
                            FieldTable::default(),
                        )
                        .await,
                    format!(
                        "binding exchange \"{e}\" to exchange \"{}\" with key \"{}\"",
                        b.source, b.routing_key
                    ),
                ),
            };
            result.map_err(|error| TopologyError::Broker { what, error })?;
        }
        Ok(())
    }

    /// Records a 406 as a conflict and replaces the channel the broker closed with it; passes
    /// other errors on. `declared(arg)` is the value this plan gives `arg`.
    async fn check(
        &mut self,
        result: lapin::Result<()>,
        kind: ObjectKind,
        name: &str,
        declared: impl Fn(&str) -> Option<String>,
    ) -> Result<(), TopologyError> {
        let err = match result {
            Ok(()) => return Ok(()),
            Err(err) => err,
        };
        let ErrorKind::ProtocolError(amqp) = err.kind() else {
            return Err(TopologyError::Broker {
                what: format!("declaring {kind} \"{name}\""),
                error: err,
            });
        };
        if !matches!(
            amqp.kind(),
            AMQPErrorKind::Soft(AMQPSoftError::PRECONDITIONFAILED)
        ) {
            return Err(TopologyError::Broker {
                what: format!("declaring {kind} \"{name}\""),
                error: err,
            });
        }
        let text = amqp.get_message().to_string();
        // Other 406s (an invalid argument value, say) are refusals, not existing objects.
        let Some((arg, received, current)) = parse_inequivalent(&text) else {
            return Err(TopologyError::Broker {
                what: format!("declaring {kind} \"{name}\""),
                error: err,
            });
        };
        let conflict = Inequivalent {
            kind,
            name: name.to_string(),
            declared: declared(&arg).or(received),
            argument: arg,
            current,
            source: self.source.to_string(),
            broker_text: text,
        };
        self.conflicts.push(conflict);
        // A 406 closes the channel: go on with a fresh one.
        self.channel = open(self.conn).await?;
        Ok(())
    }
}

async fn open(conn: &Connection) -> Result<Channel, TopologyError> {
    conn.create_channel()
        .await
        .map_err(|error| TopologyError::Broker {
            what: "opening a channel to declare the topology".into(),
            error,
        })
}

fn short(what: &'static str, name: &str) -> Result<ShortString, TopologyError> {
    ShortString::try_new(name).map_err(|_| TopologyError::NameTooLong {
        what,
        name: name.to_string(),
    })
}

/// Integers go as 32-bit when they fit, the way most clients send them.
fn amqp_value(value: &Arg) -> AMQPValue {
    match value {
        Arg::Str(s) => AMQPValue::LongString(LongString::from(s.as_str())),
        Arg::Int(i) => match i32::try_from(*i) {
            Ok(small) => AMQPValue::LongInt(small),
            Err(_) => AMQPValue::LongLongInt(*i),
        },
    }
}

fn exchange_kind(kind: ExchangeType) -> ExchangeKind {
    match kind {
        ExchangeType::Direct => ExchangeKind::Direct,
        ExchangeType::Topic => ExchangeKind::Topic,
        ExchangeType::Fanout => ExchangeKind::Fanout,
        ExchangeType::Headers => ExchangeKind::Headers,
    }
}
