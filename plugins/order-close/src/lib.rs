//! `order-close`: the seed order flow. When an order's payment window has passed
//! (`order.release.order`, dead-lettered from the delay queue), close the order if it is still
//! unpaid and publish `order.release.other` so the stock service releases the reserved stock, even
//! if its own delayed check ran before the order was closed.
//!
//! The sandbox has no database, so the order's state comes in the message. Handling is
//! idempotent: a redelivered or already-closed order publishes the same release again, which the
//! stock service treats as a no-op.

#![forbid(unsafe_code)]

use serde::{Deserialize, Serialize};
use worker_plugin_sdk::serde_json::{Map, Value};
use worker_plugin_sdk::{Error, Message, config, info, publish_json};

/// `[subscription.config]` of this plugin.
#[derive(Debug, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct Config {
    /// Where the stock release goes.
    pub exchange: String,
    /// The routing key that triggers a close.
    pub trigger: String,
    /// The routing key of the stock release.
    pub release_key: String,
}

impl Default for Config {
    fn default() -> Self {
        Config {
            exchange: "order-event-exchange".to_owned(),
            trigger: "order.release.order".to_owned(),
            release_key: "order.release.other".to_owned(),
        }
    }
}

/// The order as the order service published it on `order.create.order`.
#[derive(Debug, Deserialize, Serialize)]
pub struct Order {
    /// The order's id (number or text).
    pub order_id: Value,
    /// `new`/`created`/`unpaid`/`pending`, `paid`/`shipped`/`completed`, or `closed`/`cancelled`.
    pub status: String,
    /// Everything else (items, amounts, ...), passed on to the stock service.
    #[serde(flatten)]
    pub rest: Map<String, Value>,
}

/// What to do with an order whose payment window has passed.
#[derive(Debug, PartialEq, Eq)]
pub enum Decision {
    /// Unpaid: close it and release its stock.
    Close,
    /// Already closed or cancelled: release the stock again (idempotent).
    ReleaseAgain,
    /// Paid: the stock stays sold.
    Keep,
}

/// Decides from the order's status; an unknown status is an error for a person to look at.
pub fn decide(status: &str) -> Result<Decision, Error> {
    match status.to_ascii_lowercase().as_str() {
        "new" | "created" | "unpaid" | "pending" => Ok(Decision::Close),
        "closed" | "cancelled" | "canceled" => Ok(Decision::ReleaseAgain),
        "paid" | "shipped" | "completed" => Ok(Decision::Keep),
        other => Err(Error::fail(format_args!("unknown order status {other:?}"))),
    }
}

/// Handles one `order.release.order` message.
pub fn handle(msg: &Message) -> Result<(), Error> {
    let cfg: Config = config()?;
    if msg.original_routing_key() != cfg.trigger {
        return Err(Error::fail(format_args!(
            "unexpected routing key {:?} (this plugin handles {:?})",
            msg.original_routing_key(),
            cfg.trigger
        )));
    }
    let mut order: Order = msg.json()?;
    let id = order.order_id.to_string();
    match decide(&order.status)? {
        Decision::Keep => {
            info!("order {id} is {}; nothing to release", order.status);
            return Ok(());
        }
        Decision::Close => {
            info!("closing unpaid order {id}");
            order.status = "closed".to_owned();
            order
                .rest
                .insert("closed_reason".to_owned(), "payment timeout".into());
        }
        Decision::ReleaseAgain => {
            info!("order {id} already {}; releasing stock again", order.status)
        }
    }
    publish_json(&cfg.exchange, &cfg.release_key, &order)?;
    info!(
        "published {} for order {id} to {}",
        cfg.release_key, cfg.exchange
    );
    Ok(())
}

worker_plugin_sdk::handler!(handle);

#[cfg(test)]
mod tests {
    use super::*;
    use worker_plugin_sdk::serde_json::json;
    use worker_plugin_sdk::testing::TestMessage;

    fn release(order: Value) -> TestMessage {
        TestMessage::json(&order)
            .routing_key("order.release.order")
            .exchange("order-event-exchange")
            .allow_publish(["order-event-exchange"])
    }

    #[test]
    fn unpaid_order_is_closed_and_stock_released() {
        let run =
            release(json!({"order_id": 17, "status": "new", "items": [{"sku": "A", "qty": 2}]}))
                .run(handle);
        assert!(run.outcome.is_ok(), "{:?}", run.outcome);
        assert_eq!(run.publishes.len(), 1);
        let p = &run.publishes[0];
        assert_eq!(
            (p.exchange.as_str(), p.routing_key.as_str()),
            ("order-event-exchange", "order.release.other")
        );
        let body: Value = p.json().unwrap();
        assert_eq!(
            body,
            json!({"order_id": 17, "status": "closed", "closed_reason": "payment timeout", "items": [{"sku": "A", "qty": 2}]})
        );
        assert!(run.logged("closing unpaid order 17"));
    }

    #[test]
    fn paid_order_is_kept() {
        let run = release(json!({"order_id": "o-9", "status": "paid"})).run(handle);
        assert!(run.outcome.is_ok());
        assert!(run.publishes.is_empty());
        assert!(run.logged("order \"o-9\" is paid"));
    }

    #[test]
    fn closed_order_releases_again() {
        let run = release(json!({"order_id": 3, "status": "cancelled"})).run(handle);
        assert!(run.outcome.is_ok());
        assert_eq!(run.publishes.len(), 1);
    }

    #[test]
    fn exchange_comes_from_config() {
        let run = release(json!({"order_id": 1, "status": "new"}))
            .allow_publish(["stock"])
            .config(json!({"exchange": "stock"}))
            .run(handle);
        assert!(run.outcome.is_ok(), "{:?}", run.outcome);
        assert_eq!(run.publishes[0].exchange, "stock");
    }

    #[test]
    fn refused_publish_retries() {
        let run = release(json!({"order_id": 1, "status": "new"}))
            .allow_publish(["master"])
            .run(handle);
        assert!(run.outcome.is_retry());
        assert!(
            run.outcome
                .reason()
                .unwrap()
                .contains("order-event-exchange")
        );
    }

    #[test]
    fn bad_messages_fail() {
        for (body, why) in [
            (json!({"status": "new"}), "malformed JSON"),
            (
                json!({"order_id": 1, "status": "lost"}),
                "unknown order status",
            ),
        ] {
            let run = release(body).run(handle);
            assert!(run.outcome.is_fail(), "{:?}", run.outcome);
            assert!(
                run.outcome.reason().unwrap().contains(why),
                "{:?}",
                run.outcome
            );
        }
        let wrong_key = release(json!({"order_id": 1, "status": "new"}))
            .routing_key("order.create.order")
            .run(handle);
        assert!(
            wrong_key
                .outcome
                .reason()
                .unwrap()
                .starts_with("unexpected routing key")
        );
    }

    #[test]
    fn retried_message_uses_original_key() {
        let run = release(json!({"order_id": 1, "status": "new"}))
            .routing_key("order@release")
            .original_routing_key("order.release.order")
            .attempt(2)
            .run(handle);
        assert!(run.outcome.is_ok(), "{:?}", run.outcome);
    }
}
