//! Keys of the `meta_get` import. Values are UTF-8 text.

/// `meta_get`'s answer for a key with no value.
pub const ABSENT: i32 = -1;

/// The routing key of this delivery (the queue name for a retried or replayed message).
pub const ROUTING_KEY: &str = "routing-key";
/// The key the message was first published with.
pub const ORIGINAL_ROUTING_KEY: &str = "original-routing-key";
/// The exchange of this delivery.
pub const EXCHANGE: &str = "exchange";
/// The queue consumed.
pub const QUEUE: &str = "queue";
/// The AMQP `message_id` property; absent if not set.
pub const MESSAGE_ID: &str = "message-id";
/// The AMQP `correlation_id` property; absent if not set.
pub const CORRELATION_ID: &str = "correlation-id";
/// The AMQP `content_type` property; absent if not set.
pub const CONTENT_TYPE: &str = "content-type";
/// The AMQP timestamp in seconds since 1970, as decimal text; absent if not set.
pub const TIMESTAMP: &str = "timestamp";
/// `1` on the first call, `2` on the first retry, ...
pub const ATTEMPT: &str = "attempt";
/// [`TRUE`] or [`FALSE`]: whether the broker redelivered the message.
pub const REDELIVERED: &str = "redelivered";
/// Followed by a name: that AMQP header (exact, case-sensitive), numbers and booleans as text.
pub const HEADER_PREFIX: &str = "header:";

/// A true flag's text.
pub const TRUE: &str = "true";
/// A false flag's text.
pub const FALSE: &str = "false";

/// Every fixed key (headers aside).
pub const KEYS: &[&str] = &[
    ROUTING_KEY,
    ORIGINAL_ROUTING_KEY,
    EXCHANGE,
    QUEUE,
    MESSAGE_ID,
    CORRELATION_ID,
    CONTENT_TYPE,
    TIMESTAMP,
    ATTEMPT,
    REDELIVERED,
];
