//! `user-monitor`: the seed subscriber for `user.*` events. It logs each event with its original
//! routing key (the queue name after a retry), and fails messages whose body is not a JSON object,
//! since retrying cannot repair a body.

#![forbid(unsafe_code)]

use serde::Deserialize;
use worker_plugin_sdk::serde_json::{Map, Value};
use worker_plugin_sdk::{Error, Message, config, info, warn};

/// `[subscription.config]` of this plugin.
#[derive(Debug, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct Config {
    /// Prefix of every log line.
    pub greeting: String,
    /// Fields an event must have; a missing one fails the message.
    pub required: Vec<String>,
}

impl Default for Config {
    fn default() -> Self {
        Config {
            greeting: "user event".to_owned(),
            required: Vec::new(),
        }
    }
}

/// Logs one `user.*` event.
pub fn handle(msg: &Message) -> Result<(), Error> {
    let cfg: Config = config()?;
    let event: Map<String, Value> = msg
        .json()
        .map_err(|e| Error::fail(format_args!("user event is not a JSON object: {e}")))?;
    if let Some(missing) = cfg
        .required
        .iter()
        .find(|f| !event.contains_key(f.as_str()))
    {
        return Err(Error::fail(format_args!(
            "user event has no {missing:?} field"
        )));
    }
    if msg.attempt() > 1 {
        warn!(
            "{} seen again, attempt {}",
            msg.original_routing_key(),
            msg.attempt()
        );
    }
    let id = event
        .get("id")
        .or_else(|| event.get("user_id"))
        .map_or_else(|| "-".to_owned(), Value::to_string);
    info!(
        "{}: {} id={id} {}",
        cfg.greeting,
        msg.original_routing_key(),
        Value::Object(event)
    );
    Ok(())
}

worker_plugin_sdk::handler!(handle);

#[cfg(test)]
mod tests {
    use super::*;
    use worker_plugin_sdk::serde_json::json;
    use worker_plugin_sdk::testing::TestMessage;

    #[test]
    fn logs_the_event_with_its_original_key() {
        let run = TestMessage::json(&json!({"id": 42, "name": "Ann"}))
            .routing_key("ucenter@user")
            .original_routing_key("user.created")
            .config(json!({"greeting": "hello"}))
            .run(handle);
        assert!(run.outcome.is_ok(), "{:?}", run.outcome);
        assert!(run.logged("hello: user.created id=42"), "{:?}", run.logs);
        assert!(run.publishes.is_empty());
    }

    #[test]
    fn malformed_json_fails() {
        let run = TestMessage::new("{not json")
            .routing_key("user.created")
            .run(handle);
        assert!(run.outcome.is_fail());
        assert!(run.outcome.reason().unwrap().contains("not a JSON object"));
        let array = TestMessage::new("[1, 2]").run(handle);
        assert!(array.outcome.is_fail());
    }

    #[test]
    fn missing_required_field_fails() {
        let run = TestMessage::json(&json!({"name": "Ann"}))
            .config(json!({"required": ["id"]}))
            .run(handle);
        assert_eq!(run.outcome.reason(), Some("user event has no \"id\" field"));
    }

    #[test]
    fn retried_event_warns() {
        let run = TestMessage::json(&json!({"user_id": "u-1"}))
            .original_routing_key("user.deleted")
            .attempt(2)
            .run(handle);
        assert!(run.outcome.is_ok());
        assert!(run.logged("user.deleted seen again, attempt 2"));
        assert!(run.logged("user event: user.deleted id=\"u-1\""));
    }

    #[test]
    fn unknown_config_key_retries() {
        let run = TestMessage::json(&json!({}))
            .config(json!({"greting": "typo"}))
            .run(handle);
        assert!(run.outcome.is_retry());
    }
}
