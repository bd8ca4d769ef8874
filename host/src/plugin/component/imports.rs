//! The world's own `host` imports: log, config, publish. (`kv` and `sql` are capabilities,
//! `crate::capability`.)

use std::time::Duration;

use worker_abi::PublishRefusal;

use super::state::CState;
use crate::plugin::pending::Refused;
use crate::plugin::{LogLevel, LogSource, Publish};
use crate::wit::worker::plugin::{host, types};

impl types::Host for CState {}

impl host::Host for CState {
    async fn log(&mut self, level: host::Level, message: String) {
        let level = match level {
            host::Level::Trace => LogLevel::Trace,
            host::Level::Debug => LogLevel::Debug,
            host::Level::Info => LogLevel::Info,
            host::Level::Warn => LogLevel::Warn,
            host::Level::Error => LogLevel::Error,
        };
        self.logs.push(level, LogSource::Log, message.as_bytes());
    }

    async fn config(&mut self) -> String {
        self.input.config_json.to_string()
    }

    async fn publish(&mut self, message: types::Outgoing) -> Result<(), types::PublishError> {
        let exchange = message.exchange.clone();
        let result = outgoing(message).and_then(|publish| {
            let input = self.input.clone();
            self.pending.push(&input.publish, publish)
        });
        result.map_err(|Refused { refusal, why }| {
            let line = format!(
                "publish to `{exchange}` refused ({}): {why}",
                refusal_name(refusal)
            );
            self.logs
                .push(LogLevel::Warn, LogSource::Host, line.as_bytes());
            publish_error(refusal)
        })
    }
}

/// A WIT `outgoing` as a buffered publish, if its names and headers are well formed.
fn outgoing(m: types::Outgoing) -> Result<Publish, Refused> {
    let invalid = |why: &str| Refused {
        refusal: PublishRefusal::Invalid,
        why: why.to_string(),
    };
    let short = |s: &str| s.len() <= worker_abi::limits::MAX_NAME_LEN;
    if m.content_type.as_deref().is_some_and(|c| !short(c)) {
        return Err(invalid("content type longer than 255 bytes"));
    }
    if m.headers
        .iter()
        .any(|h| h.name.is_empty() || !short(&h.name))
    {
        return Err(invalid("a header name is empty or longer than 255 bytes"));
    }
    let delay = (m.delay_ms > 0).then(|| Duration::from_millis(m.delay_ms));
    Ok(Publish {
        exchange: m.exchange,
        routing_key: m.routing_key,
        body: m.body,
        delay,
        content_type: m.content_type,
        headers: m.headers.into_iter().map(|h| (h.name, h.value)).collect(),
    })
}

fn publish_error(refusal: PublishRefusal) -> types::PublishError {
    match refusal {
        PublishRefusal::ExchangeNotAllowed => types::PublishError::NotAllowed,
        PublishRefusal::DelayRefused => types::PublishError::DelayRefused,
        PublishRefusal::TooManyMessages => types::PublishError::TooMany,
        PublishRefusal::TooManyBytes => types::PublishError::TooLarge,
        PublishRefusal::Invalid => types::PublishError::Invalid,
    }
}

/// The WIT name of a refusal, as a guest sees it.
fn refusal_name(refusal: PublishRefusal) -> &'static str {
    match refusal {
        PublishRefusal::ExchangeNotAllowed => "not-allowed",
        PublishRefusal::DelayRefused => "delay-refused",
        PublishRefusal::TooManyMessages => "too-many",
        PublishRefusal::TooManyBytes => "too-large",
        PublishRefusal::Invalid => "invalid",
    }
}
