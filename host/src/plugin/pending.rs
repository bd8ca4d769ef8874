//! The per-call buffer of publishes (sent only on ok) and its policy checks, shared by ABI v1's `publish` import and the
//! component world's `host.publish`: one place decides what a plugin may publish.

use std::time::Duration;

use worker_abi::{PublishRefusal, limits};

use super::{Publish, PublishPolicy};

/// What one call buffered so far.
#[derive(Debug, Default)]
pub(crate) struct Pending {
    pub publishes: Vec<Publish>,
    bytes: usize,
}

/// A publish the policy refused, and why (one line for the plugin's log).
pub(crate) struct Refused {
    pub refusal: PublishRefusal,
    pub why: String,
}

impl Pending {
    /// Buffers `publish` if `policy` allows it. Routing key, body and header bytes count against
    /// the per-call byte limit.
    pub(crate) fn push(&mut self, policy: &PublishPolicy, publish: Publish) -> Result<(), Refused> {
        let bytes = self.check(policy, &publish)?;
        self.bytes += bytes;
        self.publishes.push(publish);
        Ok(())
    }

    /// Whether `policy` allows `publish` after what is buffered; its bytes if so.
    fn check(&self, policy: &PublishPolicy, publish: &Publish) -> Result<usize, Refused> {
        use PublishRefusal::*;
        let refuse = |refusal, why: String| Err(Refused { refusal, why });
        let exchange = publish.exchange.as_str();
        if exchange.len() > limits::MAX_NAME_LEN || publish.routing_key.len() > limits::MAX_NAME_LEN
        {
            let why = format!(
                "exchange or routing key longer than {} bytes",
                limits::MAX_NAME_LEN
            );
            return refuse(Invalid, why);
        }
        if !policy.allowed_exchanges.iter().any(|e| e == exchange) {
            let why = "exchange not in this subscription's `publish` list".to_string();
            return refuse(ExchangeNotAllowed, why);
        }
        if let Some(delay) = publish.delay {
            match policy.max_delay {
                None => return refuse(DelayRefused, "delayed delivery is not enabled".into()),
                Some(max) if delay > max => {
                    return refuse(DelayRefused, "delay longer than the maximum".into());
                }
                Some(_) => {}
            }
        }
        if self.publishes.len() >= policy.max_messages {
            let why = format!("more than {} messages for one call", policy.max_messages);
            return refuse(TooManyMessages, why);
        }
        let bytes = publish.routing_key.len()
            + publish.body.len()
            + publish.content_type.as_ref().map_or(0, String::len)
            + publish
                .headers
                .iter()
                .map(|(n, v)| n.len() + v.len())
                .sum::<usize>();
        if self.bytes + bytes > policy.max_total_bytes {
            let why = format!("more than {} bytes for one call", policy.max_total_bytes);
            return refuse(TooManyBytes, why);
        }
        Ok(bytes)
    }

    /// Forgets everything buffered (an instance reused for the next message starts empty).
    pub(crate) fn clear(&mut self) {
        self.publishes.clear();
        self.bytes = 0;
    }
}

/// A delay in milliseconds as the guest gives it: none for zero. Err for a negative one.
pub(crate) fn delay_of(delay_ms: i64) -> Result<Option<Duration>, Refused> {
    match delay_ms {
        0 => Ok(None),
        d if d < 0 => Err(Refused {
            refusal: PublishRefusal::DelayRefused,
            why: "negative delay".into(),
        }),
        d => Ok(Some(Duration::from_millis(d as u64))),
    }
}
