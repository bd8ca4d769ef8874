//! The message a handler is called with: its body and the delivery's metadata.

use serde::de::DeserializeOwned;
use worker_abi::meta;

use crate::Error;
#[cfg(not(worker_backend = "component"))]
use crate::sys;

/// One delivery, as the host hands it to a handler.
///
/// A component gets the whole delivery at once (the world's `delivery` record); an ABI v1 module
/// reads the body and the common properties when the call starts, and AMQP headers on demand with
/// [`Message::header`].
///
/// ```
/// use worker_plugin_sdk::{Message, Outcome, testing::TestMessage};
///
/// fn handle(msg: &Message) -> Outcome {
///     assert_eq!(msg.routing_key(), "shop@orders");
///     assert_eq!(msg.original_routing_key(), "order.created");
///     assert_eq!(msg.attempt(), 2);
///     assert_eq!(msg.header("tenant").as_deref(), Some("acme"));
///     assert_eq!(msg.body_str().unwrap(), "hi");
///     Outcome::Ok
/// }
///
/// let run = TestMessage::new("hi")
///     .routing_key("shop@orders")
///     .original_routing_key("order.created")
///     .attempt(2)
///     .header("tenant", "acme")
///     .run(handle);
/// assert_eq!(run.outcome, Outcome::Ok);
/// ```
#[derive(Debug, Clone)]
pub struct Message {
    body: Vec<u8>,
    routing_key: String,
    original_routing_key: String,
    exchange: String,
    queue: String,
    attempt: u32,
    redelivered: bool,
    message_id: Option<String>,
    correlation_id: Option<String>,
    content_type: Option<String>,
    timestamp: Option<u64>,
    /// Every header, as the component world hands them over; `None` under ABI v1, whose host is
    /// asked for one header at a time.
    headers: Option<Vec<(String, String)>>,
}

impl Message {
    /// The world's delivery record, as the component's `handle` receives it.
    #[cfg(not(worker_backend = "v1"))]
    pub(crate) fn from_delivery(d: crate::bindings::Delivery) -> Self {
        Message {
            body: d.body,
            routing_key: d.routing_key,
            original_routing_key: d.original_routing_key,
            exchange: d.exchange,
            queue: d.queue,
            attempt: d.attempt,
            redelivered: d.redelivered,
            message_id: d.message_id,
            correlation_id: d.correlation_id,
            content_type: d.content_type,
            timestamp: d.timestamp,
            headers: Some(d.headers.into_iter().map(|h| (h.name, h.value)).collect()),
        }
    }

    /// Reads the current call's message from an ABI v1 host.
    #[cfg(not(worker_backend = "component"))]
    pub(crate) fn load() -> Self {
        let routing_key = sys::meta(meta::ROUTING_KEY).unwrap_or_default();
        Message {
            body: sys::body(),
            original_routing_key: sys::meta(meta::ORIGINAL_ROUTING_KEY)
                .unwrap_or_else(|| routing_key.clone()),
            routing_key,
            exchange: sys::meta(meta::EXCHANGE).unwrap_or_default(),
            queue: sys::meta(meta::QUEUE).unwrap_or_default(),
            attempt: sys::meta(meta::ATTEMPT)
                .and_then(|a| a.trim().parse().ok())
                .unwrap_or(1),
            redelivered: sys::meta(meta::REDELIVERED).is_some_and(|r| r == meta::TRUE),
            message_id: sys::meta(meta::MESSAGE_ID),
            correlation_id: sys::meta(meta::CORRELATION_ID),
            content_type: sys::meta(meta::CONTENT_TYPE),
            timestamp: sys::meta(meta::TIMESTAMP).and_then(|t| t.trim().parse().ok()),
            headers: None,
        }
    }

    /// The raw body.
    pub fn body(&self) -> &[u8] {
        &self.body
    }

    /// The body as text; a fail if it is not UTF-8.
    pub fn body_str(&self) -> Result<&str, Error> {
        Ok(std::str::from_utf8(&self.body)?)
    }

    /// The body parsed as JSON into `T`; a fail (retrying cannot fix a body) if it does not parse.
    ///
    /// ```
    /// use worker_plugin_sdk::{Error, Message, testing::TestMessage};
    ///
    /// #[derive(serde::Deserialize)]
    /// struct User { id: u64 }
    ///
    /// fn handle(msg: &Message) -> Result<(), Error> {
    ///     let user: User = msg.json()?;
    ///     worker_plugin_sdk::info!("user {}", user.id);
    ///     Ok(())
    /// }
    ///
    /// assert!(TestMessage::new(r#"{"id": 7}"#).run(handle).outcome.is_ok());
    /// assert!(TestMessage::new("{oops").run(handle).outcome.is_fail());
    /// ```
    pub fn json<T: DeserializeOwned>(&self) -> Result<T, Error> {
        Ok(serde_json::from_slice(&self.body)?)
    }

    /// The routing key of this delivery. For a retried or replayed message this is the queue
    /// name; [`Message::original_routing_key`] is the key it was first published with.
    pub fn routing_key(&self) -> &str {
        &self.routing_key
    }

    /// The routing key the message was first published with (kept across retries and replays).
    pub fn original_routing_key(&self) -> &str {
        &self.original_routing_key
    }

    /// The exchange this delivery came through.
    pub fn exchange(&self) -> &str {
        &self.exchange
    }

    /// The queue this subscription consumes.
    pub fn queue(&self) -> &str {
        &self.queue
    }

    /// Which call this is for the message: 1 on the first, 2 on the first retry, ...
    pub fn attempt(&self) -> u32 {
        self.attempt
    }

    /// Whether the broker redelivered it (an earlier delivery was not acked).
    pub fn redelivered(&self) -> bool {
        self.redelivered
    }

    /// The `message_id` property.
    pub fn message_id(&self) -> Option<&str> {
        self.message_id.as_deref()
    }

    /// The `correlation_id` property.
    pub fn correlation_id(&self) -> Option<&str> {
        self.correlation_id.as_deref()
    }

    /// The `content_type` property.
    pub fn content_type(&self) -> Option<&str> {
        self.content_type.as_deref()
    }

    /// The `timestamp` property (seconds since the Unix epoch).
    pub fn timestamp(&self) -> Option<u64> {
        self.timestamp
    }

    /// An AMQP header as text (numbers and booleans are written out; tables and arrays as JSON
    /// text), or `None` if absent.
    pub fn header(&self, name: &str) -> Option<String> {
        match &self.headers {
            Some(headers) => headers
                .iter()
                .find(|(n, _)| n == name)
                .map(|(_, v)| v.clone()),
            None => host_meta(&format!("{}{name}", meta::HEADER_PREFIX)),
        }
    }

    /// Every AMQP header, in the delivery's order, as `(name, value)` text pairs: a component
    /// gets them all. `None` under ABI v1, whose host only answers [`Message::header`] by name.
    ///
    /// ```
    /// use worker_plugin_sdk::{Message, testing::TestMessage};
    ///
    /// TestMessage::new("").header("tenant", "acme").run(|msg: &Message| {
    ///     assert_eq!(msg.headers(), Some(&[("tenant".to_owned(), "acme".to_owned())][..]));
    /// });
    /// ```
    pub fn headers(&self) -> Option<&[(String, String)]> {
        self.headers.as_deref()
    }

    /// Any `meta_get` key of ABI v1 (see docs/abi.md), for keys this type has no method for. A
    /// component answers the keys the world's delivery has.
    pub fn meta(&self, key: &str) -> Option<String> {
        if self.headers.is_none() {
            return host_meta(key);
        }
        if let Some(name) = key.strip_prefix(meta::HEADER_PREFIX) {
            return self.header(name);
        }
        let some = |s: &str| Some(s.to_owned());
        match key {
            meta::ROUTING_KEY => some(&self.routing_key),
            meta::ORIGINAL_ROUTING_KEY => some(&self.original_routing_key),
            meta::EXCHANGE => some(&self.exchange),
            meta::QUEUE => some(&self.queue),
            meta::MESSAGE_ID => self.message_id.clone(),
            meta::CORRELATION_ID => self.correlation_id.clone(),
            meta::CONTENT_TYPE => self.content_type.clone(),
            meta::TIMESTAMP => self.timestamp.map(|t| t.to_string()),
            meta::ATTEMPT => Some(self.attempt.to_string()),
            meta::REDELIVERED => some(if self.redelivered {
                meta::TRUE
            } else {
                meta::FALSE
            }),
            _ => None,
        }
    }
}

/// Asks an ABI v1 host; a component's messages always carry their headers, so never get here.
fn host_meta(key: &str) -> Option<String> {
    #[cfg(not(worker_backend = "component"))]
    return sys::meta(key);
    #[cfg(worker_backend = "component")]
    {
        let _ = key;
        None
    }
}
