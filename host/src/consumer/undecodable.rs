//! Deliveries the client could not decode (see `crate::poison`): parked in `<queue>@failed`
//! without a handler call, acked once the park is confirmed.

use std::time::Duration;

use lapin::Channel;
use lapin::message::Delivery;
use tracing::{error, warn};

use super::acks::Acks;
use super::{Subscriber, publish_confirmed, republished};
use crate::outcome::{FailedReason, Stamp};
use crate::poison;

impl Subscriber {
    /// Parks a delivery the client could not decode (see `poison`) without calling the plugin;
    /// acks it once the park is confirmed, else leaves it for the broker to redeliver.
    pub(super) async fn park_undecodable(
        &self,
        delivery: Delivery,
        problem: &str,
        publisher: &Channel,
        acks: &Acks,
    ) {
        let queue = self.sub.queue.as_str();
        let plugin = self.plugin.load();
        let cause = poison::cause(problem);
        let stamp = Stamp {
            routing_key: delivery.routing_key.as_str(),
            attempts: 0,
            cause: &cause,
            plugin: plugin.name(),
            plugin_sha256: plugin.sha256(),
            failed: Some(FailedReason::Fail),
        };
        let props = republished(&poison::without_marker(&delivery.properties), &stamp);
        warn!(
            queue,
            problem,
            "undecodable delivery, parked in {}",
            self.sub.failed_queue()
        );
        let failed = self.exchanges.failed.as_str();
        match publish_confirmed(publisher, failed, queue, &delivery.data, props, true).await {
            Ok(()) => {
                acks.settled(delivery.delivery_tag);
                self.metrics.parked_unhandled();
            }
            Err(err) => {
                self.metrics.requeued();
                error!(
                    queue,
                    "undecodable delivery not parked, the broker will redeliver: {err:#}"
                );
                // As in `handle`: back off a little while the channel lives, then requeue.
                if publisher.status().connected() {
                    tokio::time::sleep(Duration::from_secs(1)).await;
                }
                let _ = acks.nack_requeue(delivery.delivery_tag).await;
            }
        }
    }
}
