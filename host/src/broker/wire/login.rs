//! The connection's opening: protocol header, SASL login, the limits both sides agree on, and
//! the virtual host.

use std::time::Instant;

use amq_protocol::auth::Credentials;
use amq_protocol::frame::{AMQPFrame, ProtocolVersion};
use amq_protocol::protocol::{AMQPClass, connection};
use amq_protocol::types::{AMQPValue, FieldTable};
use amq_protocol::uri::{AMQPUri, SASLMechanism};

use super::{Tuned, Wire, WireError, unexpected};

/// Logs `wire` in as `uri` says, by `mechanism`, before `deadline`.
pub(super) fn log_in(
    wire: &mut Wire,
    uri: &AMQPUri,
    mechanism: SASLMechanism,
    name: &str,
    deadline: Instant,
) -> Result<(), WireError> {
    wire.send(&[AMQPFrame::ProtocolHeader(ProtocolVersion::amqp_0_9_1())])?;
    let start = match wire.method(0, "connection.start", deadline)? {
        AMQPClass::Connection(connection::AMQPMethod::Start(start)) => start,
        other => return Err(unexpected("connection.start", other)),
    };
    let offered = start.mechanisms.to_string();
    if !offered.split(' ').any(|m| m == mechanism.name()) {
        let name = mechanism.name();
        return Err(WireError::Unsupported(format!(
            "auth_mechanism {name}: the broker offers {offered}"
        )));
    }
    let user = &uri.authority.userinfo;
    let credentials =
        Credentials::new(user.username.as_str().into(), user.password.as_str().into());
    wire.send_method(
        0,
        AMQPClass::Connection(connection::AMQPMethod::StartOk(connection::StartOk {
            client_properties: client_properties(name),
            mechanism: mechanism.name().into(),
            response: credentials.sasl_auth_string(mechanism),
            locale: "en_US".into(),
        })),
    )?;
    tune(wire, uri, deadline)?;
    match wire.method(0, "connection.open-ok", deadline)? {
        AMQPClass::Connection(connection::AMQPMethod::OpenOk(_)) => Ok(()),
        other => Err(unexpected("connection.open-ok", other)),
    }
}

/// Answers connection.tune with the limits both sides accept, and opens the virtual host.
fn tune(wire: &mut Wire, uri: &AMQPUri, deadline: Instant) -> Result<(), WireError> {
    let tune = match wire.method(0, "connection.tune", deadline)? {
        AMQPClass::Connection(connection::AMQPMethod::Tune(tune)) => tune,
        // connection.secure: a challenge PLAIN and AMQPLAIN never get.
        other => return Err(unexpected("connection.tune", other)),
    };
    let tuned = Tuned {
        channel_max: agree(uri.query.channel_max, tune.channel_max),
        frame_max: agree(uri.query.frame_max, tune.frame_max),
        heartbeat: agree(uri.query.heartbeat, tune.heartbeat),
    };
    wire.tuned = tuned;
    wire.send(&[
        AMQPFrame::Method(
            0,
            AMQPClass::Connection(connection::AMQPMethod::TuneOk(connection::TuneOk {
                channel_max: tuned.channel_max,
                frame_max: tuned.frame_max,
                heartbeat: tuned.heartbeat,
            })),
        ),
        AMQPFrame::Method(
            0,
            AMQPClass::Connection(connection::AMQPMethod::Open(connection::Open {
                virtual_host: uri.vhost.as_str().into(),
            })),
        ),
    ])
}

/// The value both sides accept: 0 means "no limit" (or no heartbeat), so the other's wins;
/// otherwise the lower.
pub(super) fn agree<T: Copy + Ord + Default>(ours: Option<T>, theirs: T) -> T {
    match ours {
        None => theirs,
        Some(ours) if ours == T::default() => theirs,
        Some(ours) if theirs == T::default() => ours,
        Some(ours) => ours.min(theirs),
    }
}

/// Who the connection is, and the protocol extensions it understands: the broker's cancel of a
/// consumer (its queue deleted) and a refused login told as connection.close, not a dropped
/// socket.
fn client_properties(name: &str) -> FieldTable {
    let mut capabilities = FieldTable::default();
    for capability in [
        "consumer_cancel_notify",
        "basic.nack",
        "authentication_failure_close",
    ] {
        capabilities.insert(capability.into(), AMQPValue::Boolean(true));
    }
    let mut properties = FieldTable::default();
    let text = |s: &str| AMQPValue::LongString(s.into());
    properties.insert("product".into(), text("worker-host"));
    properties.insert("version".into(), text(env!("CARGO_PKG_VERSION")));
    properties.insert("connection_name".into(), text(name));
    properties.insert("capabilities".into(), AMQPValue::FieldTable(capabilities));
    properties
}
