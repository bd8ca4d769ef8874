//! One request on its own connection: TCP to an address the policy checked, TLS (rustls) for
//! https, HTTP/1.1 through hyper's client connection. Connecting, the response head and every
//! body frame end by the handler's deadline; the body stops at the grant's cap.

use std::future::poll_fn;
use std::net::SocketAddr;
use std::pin::{Pin, pin};
use std::sync::{Arc, OnceLock};
use std::task::{Context, Poll, ready};
use std::time::Duration;

use bytes::Bytes;
use http::{Method, Request, Response, StatusCode};
use http_body::{Body, Frame, SizeHint};
use http_body_util::BodyExt as _;
use hyper::body::Incoming;
use rustls::pki_types::ServerName;
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::net::TcpStream;
use tokio::time::{Instant, Sleep, timeout_at};
use wasmtime_wasi_http::io::TokioIo;
use wasmtime_wasi_http::{Error, RequestOptions, WasiBody};

use super::Call;
use super::policy::Target;

/// What bounds one request: the handler's deadline, the guest's own (shorter) timeouts, the cap.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Limits {
    pub deadline: Instant,
    pub options: Option<RequestOptions>,
    pub max_response: u64,
}

impl Limits {
    /// The earlier of the deadline and `now + pick(options)`.
    fn until(&self, pick: fn(&RequestOptions) -> Option<Duration>) -> Instant {
        match self.options.as_ref().and_then(pick) {
            Some(d) => self.deadline.min(Instant::now() + d),
            None => self.deadline,
        }
    }
}

/// The connection's I/O after the response head: it ends with the body, or by the deadline.
pub(crate) type Io = Pin<Box<dyn Future<Output = Result<(), Error>> + Send>>;

trait Stream: AsyncRead + AsyncWrite + Send + Unpin + 'static {}
impl<T: AsyncRead + AsyncWrite + Send + Unpin + 'static> Stream for T {}

/// Sends `req` (its URI still absolute) to the first of `addrs` that accepts a connection.
pub(crate) async fn send<B>(
    mut req: Request<B>,
    target: &Target,
    addrs: &[SocketAddr],
    limits: Limits,
    mut call: Call,
) -> Result<(Response<WasiBody>, Io), Error>
where
    B: Body<Data = Bytes, Error = Error> + Send + 'static,
{
    let connect_by = limits.until(|o| o.connect_timeout);
    let stream = open(target, addrs, connect_by).await?;
    let (sender, conn) = timeout_at(
        connect_by,
        hyper::client::conn::http1::handshake(TokioIo::new(stream)),
    )
    .await
    .map_err(|_| Error::ConnectionTimeout)??;

    // The request line carries only path and query (an absolute URI is for proxies).
    let path = req.uri().path_and_query().map_or("/", |p| p.as_str());
    *req.uri_mut() = path.parse().map_err(|_| Error::HttpRequestUriInvalid)?;
    let head_request = req.method() == Method::HEAD;

    let mut conn = Some(Box::pin(conn));
    let head = exchange(sender, &mut conn, req);
    let res = timeout_at(limits.until(|o| o.first_byte_timeout), head)
        .await
        .map_err(|_| Error::ConnectionReadTimeout)??;

    if let Some(len) = declared_length(&res, head_request)
        && len > limits.max_response
    {
        return Err(Error::HttpResponseBodySize(Some(len)));
    }
    call.succeeded();
    let deadline = limits.deadline;
    let io: Io = Box::pin(async move {
        let Some(conn) = conn else { return Ok(()) };
        match timeout_at(deadline, conn).await {
            Err(_) => Err(Error::ConnectionReadTimeout),
            Ok(res) => res.map_err(Error::from),
        }
    });
    let res = res.map(|incoming| Capped::new(incoming, limits, call).boxed_unsync());
    Ok((res, io))
}

type Connection<B> = hyper::client::conn::http1::Connection<TokioIo<Box<dyn Stream>>, B>;

/// Sends `req` and waits for the response head while driving the connection's I/O, as
/// wasmtime's default sender does; `conn` becomes `None` once the connection has ended.
async fn exchange<B>(
    mut sender: hyper::client::conn::http1::SendRequest<B>,
    conn: &mut Option<Pin<Box<Connection<B>>>>,
    req: Request<B>,
) -> Result<Response<Incoming>, Error>
where
    B: Body<Data = Bytes, Error = Error> + Send + 'static,
{
    let mut response = pin!(sender.send_request(req));
    // Without a sender the connection closes once this one response is read.
    drop(sender);
    poll_fn(|cx| {
        if let Poll::Ready(res) = response.as_mut().poll(cx) {
            return Poll::Ready(res.map_err(Error::from));
        }
        let Some(c) = conn.as_mut() else {
            return Poll::Pending;
        };
        let done = ready!(c.as_mut().poll(cx));
        *conn = None;
        match done {
            Ok(()) => response.as_mut().poll(cx).map_err(Error::from),
            Err(err) => Poll::Ready(Err(Error::from(err))),
        }
    })
    .await
}

/// The byte stream to `target`: TCP, with TLS over it for https; ready by `by`.
async fn open(
    target: &Target,
    addrs: &[SocketAddr],
    by: Instant,
) -> Result<Box<dyn Stream>, Error> {
    let tcp = connect(addrs, by).await?;
    Ok(if target.tls {
        Box::new(tls(tcp, target, by).await?)
    } else {
        Box::new(tcp)
    })
}

/// TCP to the first address that answers; each try ends by `by`.
async fn connect(addrs: &[SocketAddr], by: Instant) -> Result<TcpStream, Error> {
    let mut last = Error::DestinationNotFound;
    for addr in addrs {
        match timeout_at(by, TcpStream::connect(addr)).await {
            Err(_) => return Err(Error::ConnectionTimeout),
            Ok(Ok(tcp)) => {
                // Small requests go out at once rather than waiting for Nagle's timer.
                let _ = tcp.set_nodelay(true);
                return Ok(tcp);
            }
            Ok(Err(err)) => last = Error::Connect(err),
        }
    }
    Err(last)
}

/// TLS over `tcp`; the certificate must name the request's host (SNI is that host).
async fn tls(
    tcp: TcpStream,
    target: &Target,
    by: Instant,
) -> Result<tokio_rustls::client::TlsStream<TcpStream>, Error> {
    let config = client_config().map_err(|why| Error::InternalError(Some(why)))?;
    let name = match target.ip() {
        Some(ip) => ServerName::from(ip),
        None => ServerName::try_from(target.host.clone()).map_err(|_| Error::DnsError {
            rcode: Some("invalid DNS name".to_string()),
            info_code: None,
        })?,
    };
    let connector = tokio_rustls::TlsConnector::from(config);
    match timeout_at(by, connector.connect(name, tcp)).await {
        Err(_) => Err(Error::ConnectionTimeout),
        Ok(res) => res.map_err(Error::Tls),
    }
}

/// One rustls config for every request: ring (the provider lapin already uses), the system's
/// root certificates (what `curl` on the machine trusts, managed by its operators), HTTP/1.1.
fn client_config() -> Result<Arc<rustls::ClientConfig>, String> {
    static CONFIG: OnceLock<Result<Arc<rustls::ClientConfig>, String>> = OnceLock::new();
    CONFIG
        .get_or_init(|| {
            let native = rustls_native_certs::load_native_certs();
            let mut roots = rustls::RootCertStore::empty();
            let (added, _) = roots.add_parsable_certificates(native.certs);
            if added == 0 {
                tracing::warn!(
                    errors = ?native.errors,
                    "no system root certificates: outbound https requests will fail"
                );
            }
            let provider = Arc::new(rustls::crypto::ring::default_provider());
            let mut config = rustls::ClientConfig::builder_with_provider(provider)
                .with_safe_default_protocol_versions()
                .map_err(|e| format!("TLS setup: {e}"))?
                .with_root_certificates(roots)
                .with_no_client_auth();
            config.alpn_protocols = vec![b"http/1.1".to_vec()];
            Ok(Arc::new(config))
        })
        .clone()
}

/// The body length a response announces, when it has a body at all.
fn declared_length(res: &Response<Incoming>, head_request: bool) -> Option<u64> {
    let status = res.status();
    let bodiless = head_request
        || status.is_informational()
        || status == StatusCode::NO_CONTENT
        || status == StatusCode::NOT_MODIFIED;
    if bodiless {
        return None;
    }
    res.headers()
        .get(http::header::CONTENT_LENGTH)?
        .to_str()
        .ok()?
        .trim()
        .parse()
        .ok()
}

/// The response body as the guest reads it: at most `max_response` bytes, each frame by the
/// deadline (and the guest's between-bytes timeout). The call is recorded when it is dropped.
struct Capped {
    incoming: Incoming,
    received: u64,
    limits: Limits,
    timer: Pin<Box<Sleep>>,
    call: Call,
    done: bool,
}

impl Capped {
    fn new(incoming: Incoming, limits: Limits, call: Call) -> Capped {
        let timer = Box::pin(tokio::time::sleep_until(
            limits.until(|o| o.between_bytes_timeout),
        ));
        Capped {
            incoming,
            received: 0,
            limits,
            timer,
            call,
            done: false,
        }
    }

    fn fail(&mut self, err: Error) -> Poll<Option<Result<Frame<Bytes>, Error>>> {
        self.call.failed();
        self.done = true;
        Poll::Ready(Some(Err(err)))
    }
}

impl Body for Capped {
    type Data = Bytes;
    type Error = Error;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Error>>> {
        let this = self.get_mut();
        if this.done {
            return Poll::Ready(None);
        }
        match Pin::new(&mut this.incoming).poll_frame(cx) {
            Poll::Ready(None) => {
                this.done = true;
                Poll::Ready(None)
            }
            Poll::Ready(Some(Err(err))) => this.fail(Error::from(err)),
            Poll::Ready(Some(Ok(frame))) => {
                if let Some(data) = frame.data_ref() {
                    this.received += data.len() as u64;
                    if this.received > this.limits.max_response {
                        return this.fail(Error::HttpResponseBodySize(Some(this.received)));
                    }
                }
                let next = this.limits.until(|o| o.between_bytes_timeout);
                this.timer.as_mut().reset(next);
                Poll::Ready(Some(Ok(frame)))
            }
            Poll::Pending => {
                ready!(this.timer.as_mut().poll(cx));
                this.fail(Error::ConnectionReadTimeout)
            }
        }
    }

    fn is_end_stream(&self) -> bool {
        self.done || self.incoming.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.incoming.size_hint()
    }
}
