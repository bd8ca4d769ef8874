//! A delivery as the broker layer hands it to the consumer, whichever connection it came on:
//! lapin's consumer or the host's own (`wire`). The consumer's stages only ever see this type.

use lapin::BasicProperties;

/// One whole delivery: the method's fields, the properties and the body.
#[derive(Debug)]
pub struct Delivery {
    pub tag: u64,
    pub exchange: String,
    pub routing_key: String,
    pub redelivered: bool,
    pub properties: BasicProperties,
    pub body: Vec<u8>,
}

/// Moves each field over: lapin's short strings and body become the host's without a copy.
/// Its acker is dropped: the consumer acks on its channel (`consumer::acks`).
impl From<lapin::message::Delivery> for Delivery {
    fn from(delivery: lapin::message::Delivery) -> Delivery {
        let lapin::message::Delivery {
            delivery_tag,
            exchange,
            routing_key,
            redelivered,
            properties,
            data,
            ..
        } = delivery;
        Delivery {
            tag: delivery_tag,
            exchange: exchange.into(),
            routing_key: routing_key.into(),
            redelivered,
            properties,
            body: data,
        }
    }
}
