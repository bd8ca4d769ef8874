//! Outbound HTTP (`wasi:http/outgoing-handler`): every request of the guest decided by the host
//! against the subscription's `allowed_hosts` (SPEC section 9), then sent by the host itself,
//! within the message's budget (`http_max_requests`, 8 open at once: see `budget`). A refusal
//! or failure reaches the guest as a wasi:http error code, never as a trap.

mod budget;
mod policy;
mod send;
#[cfg(test)]
mod tests;

use std::convert::Infallible;
use std::sync::Arc;
use std::time::Instant;

use bytes::Bytes;
use http::header::HOST;
use http::{HeaderValue, Request, Response};
use http_body::Body;
use http_body_util::BodyExt as _;
use tracing::Instrument;
use wasmtime::component::{Linker, ResourceTable};
use wasmtime_wasi_http::{
    Error, RequestOptions, WasiBody, WasiHttpCtx, WasiHttpCtxView, WasiHttpHooks,
};

use self::budget::{Budget, open_slot};
use self::policy::{Policy, Refusal, Target};
use self::send::{Io, Limits};
use super::capture::Capture;
use super::{Capability, Host, Recorder, Scope};
use crate::config::HttpGrant;
use crate::telemetry;

/// A subscription's HTTP grant, ready to decide requests.
pub(crate) struct Grant {
    policy: Policy,
    recorder: Recorder,
    /// `http_max_requests`.
    max_requests: u32,
}

impl Grant {
    pub(crate) fn new(config: &HttpGrant, recorder: Recorder) -> Grant {
        Grant {
            policy: Policy::new(config),
            recorder,
            max_requests: config.max_requests,
        }
    }
}

/// The HTTP state of one message.
#[derive(Default)]
pub(crate) struct Instance {
    ctx: WasiHttpCtx,
    hooks: Hooks,
}

impl Instance {
    /// The view wasi:http's bindings work through; `table` is the instance's one table.
    pub(crate) fn view<'a>(&'a mut self, table: &'a mut ResourceTable) -> WasiHttpCtxView<'a> {
        WasiHttpCtxView {
            ctx: &mut self.ctx,
            table,
            hooks: &mut self.hooks,
        }
    }
}

impl Capability for Instance {
    type Grant = Grant;
    type Error = Infallible;

    fn link<T: Host>(linker: &mut Linker<T>) -> wasmtime::Result<()> {
        wasmtime_wasi_http::p2::add_only_http_to_linker_async(linker)
    }

    fn begin(&mut self, grant: Option<Arc<Grant>>, scope: &Scope) {
        // Without a grant every request is refused, each with a warning: counted all the same.
        let budget = grant
            .as_ref()
            .map_or_else(Budget::default, |g| Budget::new(g.max_requests));
        self.hooks = Hooks {
            grant,
            scope: Some(scope.clone()),
            budget,
        };
    }

    async fn finish(&mut self, _ok: bool) -> Result<(), Infallible> {
        self.hooks = Hooks::default();
        Ok(())
    }
}

/// Decides each request of one message.
#[derive(Default)]
struct Hooks {
    grant: Option<Arc<Grant>>,
    scope: Option<Scope>,
    budget: Budget,
}

type IoFuture = Box<dyn Future<Output = Result<(), Error>> + Send>;

impl WasiHttpHooks for Hooks {
    fn send_request(
        &mut self,
        request: Request<WasiBody>,
        options: Option<RequestOptions>,
        _fut: IoFuture,
    ) -> Box<dyn Future<Output = Result<(Response<WasiBody>, IoFuture), Error>> + Send> {
        let grant = self.grant.clone();
        let scope = self.scope.clone();
        // Made here, in the plugin's call: the returned future runs on a task of its own.
        let span = telemetry::span!(
            "http",
            otel.name = request.method().as_str(),
            otel.kind = "client",
            otel.status_code = tracing::field::Empty,
            http.request.method = request.method().as_str(),
            server.address = request.uri().host().unwrap_or(""),
            url.path = request.uri().path(),
            http.response.status_code = tracing::field::Empty,
            error.type = tracing::field::Empty,
        );
        let traced = span.clone();
        let counted = scope.as_ref().map(|scope| self.budget.take(scope));
        let slots = self.budget.slots();
        let work = async move {
            // No scope means no message is running (begin was not called): nothing may go out.
            let (Some(scope), Some(counted)) = (scope, counted) else {
                return Err(Error::HttpRequestDenied);
            };
            if !counted {
                return Err(Error::ConnectionLimitReached);
            }
            let deadline = tokio::time::Instant::from_std(scope.deadline);
            let slot = open_slot(slots, deadline).await?;
            let (res, io) = handle(request, grant.as_deref(), &scope, options).await?;
            // The slot is free again once the connection ends: the response read to its end,
            // dropped, or cut at the deadline.
            let io = async move {
                let ended = io.await;
                drop(slot);
                ended
            };
            Ok((res, Box::new(io) as IoFuture))
        };
        Box::new(
            async move {
                let result = work.await;
                match &result {
                    Ok((res, _)) => {
                        traced.record("http.response.status_code", res.status().as_u16());
                    }
                    Err(err) => {
                        let kind = format!("{err:?}");
                        telemetry::failed(&traced, kind.split('(').next().unwrap_or(""));
                    }
                }
                result
            }
            .instrument(span),
        )
    }
}

/// Why a request stopped before it was sent.
#[derive(Debug)]
pub(crate) enum Stop {
    /// The rules refused it (`denied`).
    Refused(Refusal),
    /// It could not go out (`error`): DNS failed or timed out.
    Failed(Error),
}

impl From<Refusal> for Stop {
    fn from(r: Refusal) -> Stop {
        Stop::Refused(r)
    }
}

impl From<Error> for Stop {
    fn from(e: Error) -> Stop {
        Stop::Failed(e)
    }
}

/// Decides one request of the guest and, when the grant allows it, sends it: the wasi:http
/// hook without the store, so tests drive it with a plain `http::Request`.
pub(crate) async fn handle<B>(
    request: Request<B>,
    grant: Option<&Grant>,
    scope: &Scope,
    options: Option<RequestOptions>,
) -> Result<(Response<WasiBody>, Io), Error>
where
    B: Body<Data = Bytes, Error = Error> + Send + 'static,
{
    let Some(grant) = grant else {
        return Err(refuse(scope, &request, &Refusal::NoGrant));
    };
    let mut call = Call::new(&grant.recorder);
    let target = Target::of(request.uri())?;
    let deadline = tokio::time::Instant::from_std(scope.deadline);
    let addrs = match grant.policy.check(&target, deadline).await {
        Ok(addrs) => addrs,
        Err(Stop::Refused(why)) => {
            call.denied();
            return Err(refuse(scope, &request, &why));
        }
        Err(Stop::Failed(err)) => return Err(err),
    };
    let request = with_host_headers(request, &grant.policy, &target);
    if let Some(capture) = &scope.capture {
        call.succeeded();
        return Ok(dry_answer(&request, capture));
    }
    let limits = Limits {
        deadline,
        options,
        max_response: grant.policy.max_response,
    };
    send::send(request, &target, &addrs, limits, call).await
}

/// A dry run's request, allowed by the grant: recorded (the names of its headers, not their
/// values, which may be the grant's secrets) and answered `200` with an empty body and
/// `x-worker-dry-run: 1`; nothing is sent.
fn dry_answer<B>(request: &Request<B>, capture: &Capture) -> (Response<WasiBody>, Io) {
    let headers: Vec<&str> = request.headers().keys().map(|k| k.as_str()).collect();
    capture.record(serde_json::json!({
        "http": request.method().as_str(),
        "url": request.uri().to_string(),
        "headers": headers,
    }));
    let body = http_body_util::Empty::<Bytes>::new()
        .map_err(|never| match never {})
        .boxed_unsync();
    let mut response = Response::new(body);
    response
        .headers_mut()
        .insert("x-worker-dry-run", HeaderValue::from_static("1"));
    (response, Box::pin(async { Ok(()) }))
}

/// The request as it goes out: `Host` naming the target, and the grant's headers for its origin
/// (replacing the guest's of the same name). The guest never holds this request, so it cannot
/// read them.
fn with_host_headers<B>(mut request: Request<B>, policy: &Policy, target: &Target) -> Request<B> {
    let host = host_port(request.uri());
    let headers = request.headers_mut();
    if let Ok(host) = HeaderValue::from_str(&host) {
        headers.insert(HOST, host);
    }
    for (name, value) in policy.headers_for(target) {
        headers.insert(name.clone(), value.clone());
    }
    if telemetry::enabled() {
        telemetry::inject_http(headers);
    }
    request
}

/// `host[:port]` of `uri` as written, without any user or password.
fn host_port(uri: &http::Uri) -> String {
    let host = uri.host().unwrap_or("");
    match uri.port_u16() {
        Some(port) => format!("{host}:{port}"),
        None => host.to_string(),
    }
}

/// Logs a refused request with the plugin, the queue and the URL (without its query, which may
/// hold secrets); the guest gets the refusal's error code.
fn refuse<B>(scope: &Scope, request: &Request<B>, why: &Refusal) -> Error {
    let uri = request.uri();
    let url = format!(
        "{}://{}{}",
        uri.scheme_str().unwrap_or("?"),
        host_port(uri),
        uri.path()
    );
    tracing::warn!(
        plugin = %scope.plugin,
        queue = %scope.queue,
        method = %request.method(),
        url = %url,
        "HTTP request refused: {why}"
    );
    why.code()
}

/// One request in the metrics: recorded once, when it is dropped, as `error` unless it was
/// refused (`denied`) or its response arrived and its body did not fail (`ok`). The response
/// body carries it, so the latency covers reading the body.
pub(crate) struct Call {
    recorder: Recorder,
    started: Instant,
    result: &'static str,
}

impl Call {
    fn new(recorder: &Recorder) -> Call {
        Call {
            recorder: recorder.clone(),
            started: Instant::now(),
            result: "error",
        }
    }

    fn denied(&mut self) {
        self.result = "denied";
    }

    fn succeeded(&mut self) {
        self.result = "ok";
    }

    fn failed(&mut self) {
        self.result = "error";
    }
}

impl Drop for Call {
    fn drop(&mut self) {
        self.recorder.call(self.started, self.result);
    }
}
