//! Validating newtypes for the value syntaxes of worker.toml (durations, sizes, names, bounded
//! numbers), so a bad value is refused while toml still knows its line and column.

use std::fmt;
use std::time::Duration;

use serde::de::{self, Deserialize, Deserializer, Visitor};

/// The longest name AMQP allows for a queue, an exchange or a routing key (a short string).
pub const MAX_NAME_BYTES: usize = 255;

/// A duration written as text (`"250ms"`, `"30s"`, `"1m 30s"`), at least one millisecond.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct DurationText {
    pub text: String,
    pub duration: Duration,
}

impl<'de> Deserialize<'de> for DurationText {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let text = String::deserialize(d)?;
        let duration = humantime::parse_duration(&text).map_err(|err| {
            de::Error::custom(format!(
                "expected a duration like \"250ms\", \"30s\", \"5m\" or \"1h\", got {text:?} ({err})"
            ))
        })?;
        if duration.is_zero() {
            return Err(de::Error::custom(format!(
                "expected a duration greater than zero, got {text:?}"
            )));
        }
        if duration < Duration::from_millis(1) {
            return Err(de::Error::custom(format!(
                "expected a duration of at least 1ms, got {text:?}"
            )));
        }
        Ok(DurationText { text, duration })
    }
}

/// A size in bytes, written `"64MiB"`, `"512KiB"`, `"1GiB"`, `"10MB"` or as a plain integer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct ByteSize(pub u64);

const SIZE_EXPECTED: &str =
    "expected a size like \"64MiB\", \"512KiB\" or \"1GiB\" (units B, KiB, MiB, GiB, KB, MB, GB)";

impl ByteSize {
    /// Parses `"<integer>[ ]<unit>"`; binary (KiB) and decimal (KB) units, `B` or none for bytes.
    pub(super) fn parse(text: &str) -> Option<ByteSize> {
        let text = text.trim();
        let digits = text
            .find(|c: char| !c.is_ascii_digit())
            .unwrap_or(text.len());
        let (number, unit) = text.split_at(digits);
        let number: u64 = number.parse().ok()?;
        let factor: u64 = match unit.trim_start() {
            "" | "B" => 1,
            "KiB" => 1 << 10,
            "MiB" => 1 << 20,
            "GiB" => 1 << 30,
            "TiB" => 1 << 40,
            "KB" | "kB" => 1_000,
            "MB" => 1_000_000,
            "GB" => 1_000_000_000,
            "TB" => 1_000_000_000_000,
            _ => return None,
        };
        number.checked_mul(factor).map(ByteSize)
    }
}

impl<'de> Deserialize<'de> for ByteSize {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct SizeVisitor;
        impl Visitor<'_> for SizeVisitor {
            type Value = ByteSize;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str(SIZE_EXPECTED)
            }
            fn visit_i64<E: de::Error>(self, v: i64) -> Result<ByteSize, E> {
                u64::try_from(v)
                    .map(ByteSize)
                    .map_err(|_| E::custom(format!("{SIZE_EXPECTED}, got {v}")))
            }
            fn visit_u64<E: de::Error>(self, v: u64) -> Result<ByteSize, E> {
                Ok(ByteSize(v))
            }
            fn visit_str<E: de::Error>(self, v: &str) -> Result<ByteSize, E> {
                ByteSize::parse(v).ok_or_else(|| E::custom(format!("{SIZE_EXPECTED}, got {v:?}")))
            }
        }
        d.deserialize_any(SizeVisitor)
    }
}

/// A queue or exchange name: 1 to 255 bytes.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub(super) struct Name(pub String);

impl<'de> Deserialize<'de> for Name {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let name = String::deserialize(d)?;
        if name.is_empty() {
            return Err(de::Error::custom("expected a non-empty name"));
        }
        if name.len() > MAX_NAME_BYTES {
            return Err(de::Error::custom(format!(
                "expected a name of at most {MAX_NAME_BYTES} bytes, got {} bytes",
                name.len()
            )));
        }
        Ok(Name(name))
    }
}

/// A routing or binding key: at most 255 bytes, may be empty.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct RoutingKey(pub String);

impl<'de> Deserialize<'de> for RoutingKey {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let key = String::deserialize(d)?;
        if key.len() > MAX_NAME_BYTES {
            return Err(de::Error::custom(format!(
                "expected a routing key of at most {MAX_NAME_BYTES} bytes, got {} bytes",
                key.len()
            )));
        }
        Ok(RoutingKey(key))
    }
}

/// An AMQP URL (`amqp://` or `amqps://`), checked with the parser lapin connects with.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct BrokerUrl(pub String);

impl BrokerUrl {
    pub(super) fn check(url: &str) -> Result<(), String> {
        url.parse::<lapin::uri::AMQPUri>()
            .map(|_| ())
            .map_err(|err| {
                // The parser may quote the whole URL back.
                let err = match url {
                    "" => err,
                    url => err.replace(url, &super::redact_url(url)),
                };
                format!("expected a broker URL like \"amqp://user:pass@host:5672/%2f\" ({err})")
            })
    }
}

impl<'de> Deserialize<'de> for BrokerUrl {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let url = String::deserialize(d)?;
        BrokerUrl::check(&url).map_err(de::Error::custom)?;
        Ok(BrokerUrl(url))
    }
}

/// Declares an integer newtype that refuses values outside `min..=max` with a message saying so.
macro_rules! bounded {
    ($(#[$doc:meta])* $name:ident($int:ty), $what:literal, $min:expr, $max:expr) => {
        $(#[$doc])*
        #[derive(Debug, Clone, Copy, PartialEq, Eq)]
        pub(super) struct $name(pub $int);

        impl<'de> Deserialize<'de> for $name {
            fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
                let v = i64::deserialize(d)?;
                let (min, max): (i64, i64) = ($min, $max);
                if v < min || v > max {
                    return Err(de::Error::custom(format!(
                        concat!("expected ", $what, " between {} and {}, got {}"),
                        min, max, v
                    )));
                }
                // In range, so the conversion cannot fail.
                Ok($name(v as $int))
            }
        }
    };
}

bounded!(
    /// basic.qos prefetch count: 1..=65535 (0 would mean unlimited, which we refuse).
    Prefetch(u16), "prefetch", 1, 65_535
);
bounded!(
    /// Handler calls in flight at once.
    Concurrency(u32), "concurrency", 1, 1_000_000
);
bounded!(
    /// Whole-second binary delay levels: about 2^levels seconds is the longest delay. 29 is
    /// the most RabbitMQ allows (it refuses a queue TTL above 10 years).
    DelayLevels(u8), "delay levels", 1, 29
);
bounded!(
    /// Messages one reused instance serves before it is replaced.
    InstanceMaxMessages(u32), "instance_max_messages", 1, 1_000_000
);
bounded!(
    /// Answers in a row that are not ok before a subscription pauses.
    PauseAfter(u32), "pause_after", 1, 1_000_000
);
bounded!(
    /// x-max-length of a queue.
    MaxLength(u64), "max_length", 0, i64::MAX
);
bounded!(
    /// Outgoing HTTP requests one message may make.
    HttpMaxRequests(u32), "http_max_requests", 1, 10_000
);
bounded!(
    /// Retries after the first call.
    MaxRetries(u32), "max_retries", 0, 1_000_000
);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_parse() {
        assert_eq!(ByteSize::parse("64MiB"), Some(ByteSize(64 << 20)));
        assert_eq!(ByteSize::parse("512KiB"), Some(ByteSize(512 << 10)));
        assert_eq!(ByteSize::parse("1GiB"), Some(ByteSize(1 << 30)));
        assert_eq!(ByteSize::parse("10 MB"), Some(ByteSize(10_000_000)));
        assert_eq!(ByteSize::parse("4096"), Some(ByteSize(4096)));
        assert_eq!(ByteSize::parse("64MB/s"), None);
        assert_eq!(ByteSize::parse("MiB"), None);
        assert_eq!(ByteSize::parse("-1MiB"), None);
        assert_eq!(ByteSize::parse("99999999999999TiB"), None);
    }
}
