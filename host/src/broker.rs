//! Connections to RabbitMQ: several URLs tried in turn, capped exponential backoff with jitter.

use std::time::Duration;

use lapin::{Connection, ConnectionProperties};
use tracing::{info, warn};

/// No broker URL answered; commands exit with code 2 for this.
#[derive(Debug, thiserror::Error)]
#[error("cannot reach RabbitMQ at {urls}: {last}")]
pub struct Unreachable {
    /// The URLs tried, with passwords hidden.
    pub urls: String,
    /// The last error seen.
    pub last: String,
}

/// Capped exponential backoff with full jitter.
#[derive(Debug, Clone)]
pub struct Backoff {
    attempt: u32,
    base: Duration,
    cap: Duration,
}

impl Default for Backoff {
    fn default() -> Self {
        Backoff {
            attempt: 0,
            base: Duration::from_millis(200),
            cap: Duration::from_secs(30),
        }
    }
}

impl Backoff {
    /// The next wait: random in [base/2, min(cap, base * 2^attempt)].
    pub fn next_delay(&mut self) -> Duration {
        let exp = self.base.saturating_mul(1u32 << self.attempt.min(16));
        let top = exp.min(self.cap);
        self.attempt = self.attempt.saturating_add(1);
        let low = self.base / 2;
        if top <= low {
            return top;
        }
        low + (top - low).mul_f64(rand::random::<f64>())
    }

    /// Called once a connection works again.
    pub fn reset(&mut self) {
        self.attempt = 0;
    }
}

/// A lapin error as one line: the broker's own text for protocol errors (lapin's Display and
/// its source repeat it), else lapin's.
pub fn describe(err: &lapin::Error) -> String {
    match err.kind() {
        lapin::ErrorKind::ProtocolError(amqp) => amqp.get_message().as_str().to_string(),
        _ => err.to_string(),
    }
}

/// Hides the password of an AMQP URL for logs and errors.
pub fn redact(url: &str) -> String {
    match (url.find("://"), url.rfind('@')) {
        (Some(scheme), Some(at)) if at > scheme => {
            let creds = &url[scheme + 3..at];
            match creds.split_once(':') {
                Some((user, _)) => format!("{}{}:***{}", &url[..scheme + 3], user, &url[at..]),
                None => url.to_string(),
            }
        }
        _ => url.to_string(),
    }
}

/// Tries each URL once, in order.
pub async fn connect_once(urls: &[String], name: &str) -> Result<Connection, Unreachable> {
    let mut last = String::from("no broker URL configured");
    for url in urls {
        let props = ConnectionProperties::default().with_connection_name(name.into());
        match Connection::connect(url, props).await {
            Ok(conn) => {
                info!(url = %redact(url), "connected to RabbitMQ");
                return Ok(conn);
            }
            Err(err) => {
                last = err.to_string();
                warn!(url = %redact(url), "cannot connect: {err}");
            }
        }
    }
    Err(Unreachable {
        urls: urls
            .iter()
            .map(|u| redact(u))
            .collect::<Vec<_>>()
            .join(", "),
        last,
    })
}

/// Tries the URLs in turn until one answers, waiting with backoff between rounds. Only
/// cancellation (dropping the future) stops it.
pub async fn connect_forever(urls: &[String], name: &str, backoff: &mut Backoff) -> Connection {
    loop {
        match connect_once(urls, name).await {
            Ok(conn) => return conn,
            Err(err) => {
                let wait = backoff.next_delay();
                warn!(
                    "{err}; retrying in {}",
                    humantime::format_duration(round_ms(wait))
                );
                tokio::time::sleep(wait).await;
            }
        }
    }
}

fn round_ms(d: Duration) -> Duration {
    Duration::from_millis(d.as_millis() as u64)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn redacts_password() {
        assert_eq!(
            redact("amqp://guest:secret@host:5672/%2f"),
            "amqp://guest:***@host:5672/%2f"
        );
        assert_eq!(redact("amqp://host"), "amqp://host");
    }

    #[test]
    fn backoff_is_capped_and_grows() {
        let mut b = Backoff::default();
        let first = b.next_delay();
        assert!(first <= Duration::from_millis(200));
        for _ in 0..40 {
            assert!(b.next_delay() <= Duration::from_secs(30));
        }
        b.reset();
        assert!(b.next_delay() <= Duration::from_millis(200));
    }
}
