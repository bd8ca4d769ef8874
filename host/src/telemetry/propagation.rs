//! The W3C trace context (`traceparent`, `tracestate`) read from and written into AMQP headers
//! and HTTP requests, with OpenTelemetry's own propagator.

use lapin::types::{AMQPValue, FieldTable, LongString};
use opentelemetry::Context;
use opentelemetry::propagation::{Extractor, Injector, TextMapPropagator};
use opentelemetry_sdk::propagation::TraceContextPropagator;
use tracing::Span;
use tracing_opentelemetry::OpenTelemetrySpanExt;

/// The trace context a message carries in its headers (an empty context when it carries none
/// or a malformed one).
pub(crate) fn extract_amqp(headers: Option<&FieldTable>) -> Context {
    let Some(headers) = headers else {
        return Context::new();
    };
    TraceContextPropagator::new().extract(&AmqpHeaders(headers))
}

/// `headers` with the trace context of `span`, replacing any the message carried.
pub(crate) fn inject_amqp(span: &Span, headers: &mut FieldTable) {
    TraceContextPropagator::new().inject_context(&span.context(), &mut AmqpHeadersMut(headers));
}

/// Adds the trace context of the current span to an outgoing HTTP request.
pub(crate) fn inject_http(headers: &mut http::HeaderMap) {
    let cx = Span::current().context();
    TraceContextPropagator::new().inject_context(&cx, &mut HttpHeaders(headers));
}

struct AmqpHeaders<'a>(&'a FieldTable);

impl Extractor for AmqpHeaders<'_> {
    fn get(&self, key: &str) -> Option<&str> {
        match self.0.inner().get(key)? {
            AMQPValue::LongString(s) => std::str::from_utf8(s.as_bytes()).ok(),
            AMQPValue::ShortString(s) => Some(s.as_str()),
            _ => None,
        }
    }

    fn keys(&self) -> Vec<&str> {
        self.0.inner().keys().map(|k| k.as_str()).collect()
    }
}

struct AmqpHeadersMut<'a>(&'a mut FieldTable);

impl Injector for AmqpHeadersMut<'_> {
    fn set(&mut self, key: &str, value: String) {
        let value = AMQPValue::LongString(LongString::from(value.into_bytes()));
        self.0.insert(key.into(), value);
    }
}

struct HttpHeaders<'a>(&'a mut http::HeaderMap);

impl Injector for HttpHeaders<'_> {
    fn set(&mut self, key: &str, value: String) {
        if let (Ok(name), Ok(value)) = (
            http::HeaderName::from_bytes(key.as_bytes()),
            http::HeaderValue::from_str(&value),
        ) {
            self.0.insert(name, value);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use opentelemetry::trace::TraceContextExt;

    #[test]
    fn reads_traceparent_from_amqp_headers() {
        let mut headers = FieldTable::default();
        AmqpHeadersMut(&mut headers).set(
            "traceparent",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01".into(),
        );
        let cx = extract_amqp(Some(&headers));
        let span = cx.span();
        let sc = span.span_context();
        assert!(sc.is_valid() && sc.is_remote());
        assert_eq!(
            sc.trace_id().to_string(),
            "4bf92f3577b34da6a3ce929d0e0e4736"
        );
    }

    #[test]
    fn ignores_a_malformed_traceparent() {
        let mut headers = FieldTable::default();
        AmqpHeadersMut(&mut headers).set("traceparent", "not a trace".into());
        assert!(
            !extract_amqp(Some(&headers))
                .span()
                .span_context()
                .is_valid()
        );
        assert!(!extract_amqp(None).span().span_context().is_valid());
    }
}
