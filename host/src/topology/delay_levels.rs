//! The shape of the arbitrary-delay topology, as pure data: binary levels of fixed-TTL queues,
//! their names, the routing key of a delay, and the plan that declares them. Using it
//! (publishing into it, moving due messages out) is `crate::delay::Delayer`'s.

use std::fmt;
use std::time::Duration;

use super::{Arg, ExchangeSpec, Plan, QueueSpec};
use crate::config::{Config, DelayConfig, ExchangeType};

/// Default name prefix of everything the delay topology declares.
pub const DEFAULT_PREFIX: &str = "worker.delay";
/// The most whole-second levels: the top queue's TTL, 2^(levels-1) s, must stay within the 10
/// years RabbitMQ accepts for `x-message-ttl`.
pub const MAX_LEVELS: u8 = 29;
/// Sub-second levels below the whole-second ones (500 ms, 250 ms, 125 ms).
pub const FRACTION_BITS: u32 = 3;
/// The smallest delay step; every delay is rounded up to a multiple of it, so none is early.
pub const GRANULARITY: Duration = Duration::from_millis(1000 >> FRACTION_BITS);

/// A delay request the topology cannot serve; a user error (exit 1).
#[derive(Debug, thiserror::Error)]
pub enum DelayError {
    /// `--delay` or `delay_ms` without `[delay]` in the config.
    #[error("delayed delivery needs a [delay] table in {path} (e.g. `[delay]` with `levels = 28`)")]
    NotConfigured { path: String },
    /// Longer than the levels can express.
    #[error(
        "a delay of {asked} is beyond the maximum of {max} that [delay] levels = {levels} allows"
    )]
    TooLong {
        asked: String,
        max: String,
        levels: u8,
    },
    /// `levels` outside 1..=MAX_LEVELS.
    #[error(
        "[delay] levels = {0} is out of range: 1 to {MAX_LEVELS} (RabbitMQ refuses a queue TTL \
         above 10 years)"
    )]
    Levels(u8),
}

/// The delay topology of one config: its levels, names and routing keys.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DelayLevels {
    levels: u8,
    pub(crate) prefix: String,
}

impl DelayLevels {
    /// A topology with `levels` whole-second levels (plus [`FRACTION_BITS`] sub-second ones).
    pub fn new(levels: u8) -> Result<DelayLevels, DelayError> {
        if levels == 0 || levels > MAX_LEVELS {
            return Err(DelayError::Levels(levels));
        }
        Ok(DelayLevels {
            levels,
            prefix: DEFAULT_PREFIX.to_string(),
        })
    }

    /// The topology `config` asks for, or None without `[delay]`.
    pub fn from_config(config: &Config) -> Result<Option<DelayLevels>, DelayError> {
        config.delay.map(|d| DelayLevels::new(d.levels)).transpose()
    }

    /// Like [`DelayLevels::from_config`], but a missing `[delay]` is an error.
    pub fn required(config: &Config) -> Result<DelayLevels, DelayError> {
        DelayLevels::from_config(config)?.ok_or_else(|| DelayError::NotConfigured {
            path: config.path.display().to_string(),
        })
    }

    /// Uses another name prefix (tests use a unique one so they never share queues).
    pub fn with_prefix(mut self, prefix: impl Into<String>) -> DelayLevels {
        self.prefix = prefix.into();
        self
    }

    /// Bits of an encoded delay: one exchange and one queue each.
    pub fn bits(&self) -> u32 {
        u32::from(self.levels) + FRACTION_BITS
    }

    /// The longest delay the levels can express: 2^levels s minus one [`GRANULARITY`] step.
    pub fn max_delay(&self) -> Duration {
        GRANULARITY * ((1u32 << self.bits()) - 1)
    }

    /// The delay in [`GRANULARITY`] steps, rounded up so that no message is early.
    pub fn steps(&self, delay: Duration) -> Result<u64, DelayError> {
        let unit = GRANULARITY.as_nanos();
        let steps = delay.as_nanos().div_ceil(unit);
        let max = u128::from((1u64 << self.bits()) - 1);
        if steps > max {
            return Err(DelayError::TooLong {
                asked: humantime::format_duration(delay).to_string(),
                max: humantime::format_duration(self.max_delay()).to_string(),
                levels: self.levels,
            });
        }
        // Cannot truncate: steps <= max < 2^64.
        Ok(steps as u64)
    }

    /// The routing key of `steps` inside the topology: its bits, most significant first.
    pub fn routing_key(&self, steps: u64) -> String {
        (0..self.bits())
            .rev()
            .map(|bit| if steps >> bit & 1 == 1 { "1" } else { "0" })
            .collect::<Vec<_>>()
            .join(".")
    }

    /// The TTL of the queue of `bit`, in milliseconds.
    pub fn ttl_ms(bit: u32) -> u64 {
        (GRANULARITY.as_millis() as u64) << bit
    }

    /// The exchange and queue name of `bit`, after its TTL: `worker.delay.4s`, `.125ms`.
    pub fn level_name(&self, bit: u32) -> String {
        let ms = Self::ttl_ms(bit);
        if ms.is_multiple_of(1000) {
            format!("{}.{}s", self.prefix, ms / 1000)
        } else {
            format!("{}.{ms}ms", self.prefix)
        }
    }

    /// Where a message goes after `bit`: the exchange of `bit - 1`, or the ready exchange.
    fn next_exchange(&self, bit: u32) -> String {
        match bit {
            0 => self.ready(),
            _ => self.level_name(bit - 1),
        }
    }

    /// The exchange delayed messages are published to: the one of the highest bit.
    pub fn entry_exchange(&self) -> String {
        self.level_name(self.bits() - 1)
    }

    /// The exchange and queue holding due messages until the mover republishes them.
    pub fn ready(&self) -> String {
        format!("{}.ready", self.prefix)
    }

    /// The queue where the mover parks messages it cannot deliver (their exchange is missing).
    pub fn dead(&self) -> String {
        format!("{}.dead", self.prefix)
    }

    /// The binding key matching bit `bit` = `value`, anchored at the right end of the key so a
    /// level's bindings do not depend on how many levels there are.
    pub fn pattern(bit: u32, value: bool) -> String {
        let mut pattern = String::from(if value { "#.1" } else { "#.0" });
        for _ in 0..bit {
            pattern.push_str(".*");
        }
        pattern
    }

    /// Everything the delay topology declares, for `Plan::from_config` and `declare`:
    /// per bit a topic exchange, a TTL queue dead-lettering to the next exchange, the queue's
    /// binding (bit = 1) and the exchange-to-exchange binding to the next level (bit = 0); then
    /// the ready exchange and queue and the dead queue.
    pub fn plan(&self) -> Plan {
        let mut plan = Plan {
            source: "[delay]".into(),
            ..Plan::default()
        };
        let ready = self.ready();
        plan.add_exchange(ExchangeSpec {
            name: ready.clone(),
            kind: ExchangeType::Fanout,
            durable: true,
        });
        // Lowest level first, so every dead-letter target exists before its source.
        for bit in 0..self.bits() {
            plan.add_exchange(ExchangeSpec {
                name: self.level_name(bit),
                kind: ExchangeType::Topic,
                durable: true,
            });
        }
        for queue in [&ready, &self.dead()] {
            plan.add_queue(QueueSpec {
                name: queue.clone(),
                durable: true,
                arguments: Vec::new(),
            });
        }
        for bit in 0..self.bits() {
            let ttl = i64::try_from(Self::ttl_ms(bit)).unwrap_or(i64::MAX);
            plan.add_queue(QueueSpec {
                name: self.level_name(bit),
                durable: true,
                arguments: vec![
                    ("x-message-ttl".into(), Arg::Int(ttl)),
                    (
                        "x-dead-letter-exchange".into(),
                        Arg::Str(self.next_exchange(bit)),
                    ),
                ],
            });
        }
        plan.bind_queue(&ready, &ready, "");
        for bit in 0..self.bits() {
            let name = self.level_name(bit);
            plan.bind_queue(&name, &name, &Self::pattern(bit, true));
            plan.bind_exchange(&name, &self.next_exchange(bit), &Self::pattern(bit, false));
        }
        plan
    }
}

impl fmt::Display for DelayLevels {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.plan().fmt(f)
    }
}

/// The delay topology of `config`'s `[delay]`, for `Plan::from_config`. Levels out of range
/// are clamped here; `DelayLevels::from_config` reports them.
pub fn plan(delay: &DelayConfig) -> Plan {
    let levels = delay.levels.clamp(1, MAX_LEVELS);
    DelayLevels::new(levels)
        .map(|d| d.plan())
        .unwrap_or_default()
}
