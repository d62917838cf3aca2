//! The metrics endpoint: `GET`/`HEAD` of `/metrics` and `/healthz` over HTTP/1.1, served by
//! hyper on a current-thread tokio runtime: one thread, pinned with the control thread, off the
//! RX lcores' CPUs. Rendering sums the per-lcore counter blocks; the lcores never wait for it.
//!
//! What a client cannot do to it:
//! - **Hold a slot.** At most `[metrics] max_connections` connections are open; one more closes
//!   the connection that has waited longest for a request of its own (a slow or silent client,
//!   or an idle keep-alive, which RFC 9112 §9.5 lets a server close at any time), so a new
//!   scraper is always let in. Only connections with a request in hand are never closed for
//!   room; with all of them busy, the newcomer gets 503.
//! - **Stretch a deadline.** Every deadline is absolute, not per receive: a new connection must
//!   complete its first request head within [`FIRST_REQUEST`], a kept one start its next request
//!   within [`IDLE`], every head arrives within [`HEAD_TIME`] of its first byte, and a request
//!   is read, answered and written within [`BUSY_TIME`].
//! - **Cost a render per scrape.** A rendered body is served again for `[metrics] cache_ms`
//!   (or until a reload is counted), so a scrape flood costs one render per interval, and a
//!   connection gets at most one answer per [`MIN_GAP`].
//! - **Outlive the daemon.** [`Running::stop`] ends the runtime and joins its thread, which
//!   drops every reference to the registry (and through it to DPDK objects) before it returns.

use crate::metrics::Sources;
use bytes::Bytes;
use http_body_util::BodyExt;
use hyper::body::{Body, Frame, Incoming, SizeHint};
use hyper::header::{HeaderValue, ALLOW, CONNECTION, CONTENT_TYPE};
use hyper::{Method, Request, Response, StatusCode, Version};
use hyper_util::rt::TokioIo;
use prometheus::Registry;
use std::cell::{Cell, RefCell};
use std::collections::HashMap;
use std::net::SocketAddr;
use std::pin::Pin;
use std::rc::Rc;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::TcpStream;
use tokio::sync::{oneshot, Notify};
// tokio's clock: std's own, except on a runtime with paused time (the fuzz target's and the
// corpus test's), where every deadline then runs on the same simulated clock as its timer.
use tokio::time::Instant;

/// A new connection's first request head must be complete within this of the accept.
pub const FIRST_REQUEST: Duration = Duration::from_secs(10);
/// A kept connection with no new request for this long is closed (Prometheus scrapes every
/// 15 s to 1 min by default and reconnects when needed).
pub const IDLE: Duration = Duration::from_secs(120);
/// A request head must be complete within this of its first byte.
pub const HEAD_TIME: Duration = Duration::from_secs(5);
/// A request must be read (body included), answered and written within this of its head.
pub const BUSY_TIME: Duration = Duration::from_secs(10);
/// Answers on one connection are at least this far apart: sixteen connections scraping back to
/// back cost the thread (and the worker lcore sharing its CPU) at most 1600 answers a second.
pub const MIN_GAP: Duration = Duration::from_millis(10);
/// Largest request head accepted; a longer one is answered 431 (RFC 6585 §5).
pub const MAX_HEAD: usize = 8 * 1024;
/// Largest request body read (and discarded); a longer one is answered 413 (RFC 9110 §15.5.14).
pub const MAX_BODY: usize = 8 * 1024;

/// What the endpoint did, for its own metric families.
#[derive(Debug, Default)]
pub struct HttpStats {
    /// `/metrics` bodies rendered.
    pub renders: AtomicU64,
    /// Connections closed to admit a new one over the cap.
    pub evicted: AtomicU64,
    /// Connections refused (503) because every slot had a request in hand.
    pub refused: AtomicU64,
    /// Connections closed at a deadline, by [`Deadline`] index.
    pub timed_out: [AtomicU64; Deadline::ALL.len()],
}

fastpath::label_set! {
    /// The deadline a connection missed: the `deadline` label.
    pub enum Deadline {
        /// [`FIRST_REQUEST`].
        FirstRequest => "first_request",
        /// [`IDLE`].
        Idle => "idle",
        /// [`HEAD_TIME`].
        Head => "head",
        /// [`BUSY_TIME`].
        Busy => "busy",
    }
}

/// The endpoint's settings (`[metrics]`).
#[derive(Clone, Copy, Debug)]
pub struct Limits {
    /// Connections held at once.
    pub max_connections: usize,
    /// How long a rendered body is served again.
    pub cache: Duration,
}

/// The bound endpoint.
pub struct Server {
    listener: std::net::TcpListener,
}

impl Server {
    /// Binds `addr` (port 0 picks a free port).
    pub fn bind(addr: SocketAddr) -> std::io::Result<Server> {
        let listener = std::net::TcpListener::bind(addr)?;
        listener.set_nonblocking(true)?;
        Ok(Server { listener })
    }

    /// The address actually bound.
    pub fn local_addr(&self) -> SocketAddr {
        self.listener.local_addr().expect("bound socket has an address")
    }

    /// Serves until [`Running::stop`] on a thread of its own, `fastpath-metrics`, the only
    /// thread of its runtime: it sleeps in epoll and wakes for a scrape, a deadline or the stop.
    ///
    /// `on_start` runs first on the new thread (it pins the thread to its CPUs).
    pub fn spawn(
        self,
        registry: Registry,
        sources: Arc<Sources>,
        limits: Limits,
        on_start: impl FnOnce() + Send + 'static,
    ) -> std::io::Result<Running> {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_io()
            .enable_time()
            .build()?;
        let (stop, stopped) = oneshot::channel();
        let thread = std::thread::Builder::new()
            .name("fastpath-metrics".into())
            .spawn(move || {
                on_start();
                let local = tokio::task::LocalSet::new();
                let endpoint = Rc::new(Endpoint {
                    registry,
                    sources,
                    limits,
                    cache: RefCell::new(None),
                    conns: RefCell::new(HashMap::new()),
                    next_id: Cell::new(0),
                });
                local.block_on(&runtime, accept_loop(self.listener, endpoint, stopped));
                // Dropping the set drops every connection task (closing its socket) and, with
                // the last of them, the registry and the sources, here on this thread.
                drop(local);
                drop(runtime);
            })?;
        Ok(Running { thread, stop })
    }
}

/// The serving thread of a [`Server`].
pub struct Running {
    thread: std::thread::JoinHandle<()>,
    stop: oneshot::Sender<()>,
}

impl Running {
    /// Stops serving: closes the listener and every connection, a scrape being rendered
    /// finishing first, and joins the thread. Once this returns nothing of the endpoint runs
    /// and it holds no reference to the registry.
    pub fn stop(self) {
        let _ = self.stop.send(());
        if self.thread.join().is_err() {
            tracing::error!("fastpathd: the metrics thread panicked");
        }
    }
}

/// What every connection task shares (one thread: `Rc` and `RefCell`, no lock).
struct Endpoint {
    registry: Registry,
    sources: Arc<Sources>,
    limits: Limits,
    /// The last body: when it was rendered, the reload count then, the bytes.
    cache: RefCell<Option<(Instant, u64, Bytes)>>,
    conns: RefCell<HashMap<u64, Rc<Conn>>>,
    next_id: Cell<u64>,
}

impl Endpoint {
    fn stats(&self) -> &HttpStats {
        &self.sources.http
    }

    /// The `/metrics` body: the cached one while it is younger than the cache interval and no
    /// reload was counted since, else a new render.
    fn body(&self) -> Bytes {
        let reloads = self.sources.reload.success.load(Relaxed) + self.sources.reload.failure.load(Relaxed);
        if let Some((at, r, body)) = &*self.cache.borrow() {
            if *r == reloads && at.elapsed() < self.limits.cache {
                return body.clone();
            }
        }
        // Counted before the render, so the body counts itself.
        self.stats().renders.fetch_add(1, Relaxed);
        let body = Bytes::from(crate::metrics::render(&self.registry));
        *self.cache.borrow_mut() = Some((Instant::now(), reloads, body.clone()));
        body
    }

    /// Makes room for one more connection: closes the one that has waited longest for a
    /// request of its own. `false` when every connection has a request in hand.
    fn make_room(&self) -> bool {
        let mut conns = self.conns.borrow_mut();
        if conns.len() < self.limits.max_connections {
            return true;
        }
        let oldest = conns
            .values()
            .filter_map(|c| match c.phase.get() {
                Phase::Waiting { since, .. } => Some((since, c.id)),
                Phase::Busy(_) => None,
            })
            .min();
        let Some((_, id)) = oldest else { return false };
        if let Some(c) = conns.remove(&id) {
            c.evict.notify_one();
            self.stats().evicted.fetch_add(1, Relaxed);
        }
        true
    }
}

/// Where a connection is in its life, with the instant its deadline counts from.
#[derive(Clone, Copy, Debug)]
enum Phase {
    /// Waiting for a request: since the accept (`first`) or the last answer, and since the
    /// first byte of a head, once one came.
    Waiting {
        since: Instant,
        first: bool,
        head: Option<Instant>,
    },
    /// A request is being read, answered or written, since its head was complete.
    Busy(Instant),
}

/// One connection's state, shared by its task, its I/O and its requests.
struct Conn {
    id: u64,
    phase: Cell<Phase>,
    /// The phase changed: the task recomputes its deadline.
    changed: Notify,
    /// Closed to make room.
    evict: Notify,
    /// When the last answer on it was made.
    answered: Cell<Option<Instant>>,
}

impl Conn {
    fn set(&self, phase: Phase) {
        self.phase.set(phase);
        self.changed.notify_one();
    }

    /// When the current phase runs out, and which deadline that is.
    fn deadline(&self) -> (Instant, Deadline) {
        match self.phase.get() {
            Phase::Waiting {
                head: Some(h),
                since,
                first,
            } => {
                let (limit, d) = if first {
                    (since + FIRST_REQUEST, Deadline::FirstRequest)
                } else {
                    (since + IDLE, Deadline::Idle)
                };
                (
                    limit.min(h + HEAD_TIME),
                    if h + HEAD_TIME < limit { Deadline::Head } else { d },
                )
            }
            Phase::Waiting { since, first: true, .. } => (since + FIRST_REQUEST, Deadline::FirstRequest),
            Phase::Waiting { since, .. } => (since + IDLE, Deadline::Idle),
            Phase::Busy(t) => (t + BUSY_TIME, Deadline::Busy),
        }
    }
}

/// Accepts until `stopped`.
async fn accept_loop(listener: std::net::TcpListener, ep: Rc<Endpoint>, mut stopped: oneshot::Receiver<()>) {
    let listener = match tokio::net::TcpListener::from_std(listener) {
        Ok(l) => l,
        Err(e) => {
            tracing::error!("fastpathd: the metrics endpoint cannot serve: {e}");
            let _ = stopped.await;
            return;
        }
    };
    loop {
        tokio::select! {
            _ = &mut stopped => return,
            accepted = listener.accept() => match accepted {
                Ok((stream, _)) => {
                    admit(stream, &ep);
                    // Let the new connection read its request before the next accept: a burst
                    // of connections cannot push a scraper out before it has asked.
                    tokio::task::yield_now().await;
                }
                // Out of descriptors or similar: back off instead of spinning.
                Err(_) => tokio::time::sleep(Duration::from_millis(10)).await,
            },
        }
    }
}

/// Serves `stream` on a task of its own, making room for it first.
fn admit(stream: TcpStream, ep: &Rc<Endpoint>) {
    if !ep.make_room() {
        ep.stats().refused.fetch_add(1, Relaxed);
        // One non-blocking try: a client that cannot take 100 bytes gets the bare close.
        let _ = stream.try_write(b"HTTP/1.1 503 Service Unavailable\r\nContent-Type: text/plain; charset=utf-8\r\nContent-Length: 5\r\nConnection: close\r\n\r\nbusy\n");
        return;
    }
    let _ = stream.set_nodelay(true);
    let id = ep.next_id.get();
    ep.next_id.set(id + 1);
    let conn = Rc::new(Conn {
        id,
        phase: Cell::new(Phase::Waiting {
            since: Instant::now(),
            first: true,
            head: None,
        }),
        changed: Notify::new(),
        evict: Notify::new(),
        answered: Cell::new(None),
    });
    ep.conns.borrow_mut().insert(id, conn.clone());
    tokio::task::spawn_local(connection(stream, ep.clone(), conn));
}

/// Serves one connection over `stream` (any byte stream, e.g. one end of
/// `tokio::io::duplex`) with a connection slot of its own, exactly as an accepted socket is
/// served, until it ends or misses a deadline. The seam the fuzz target and the corpus test
/// drive the request parsing and answering through, with no socket; the daemon never calls it.
#[doc(hidden)]
pub async fn serve_stream<S>(stream: S, registry: Registry, sources: Arc<Sources>, limits: Limits)
where
    S: AsyncRead + AsyncWrite + Unpin + 'static,
{
    let ep = Rc::new(Endpoint {
        registry,
        sources,
        limits,
        cache: RefCell::new(None),
        conns: RefCell::new(HashMap::new()),
        next_id: Cell::new(0),
    });
    let conn = Rc::new(Conn {
        id: 0,
        phase: Cell::new(Phase::Waiting {
            since: Instant::now(),
            first: true,
            head: None,
        }),
        changed: Notify::new(),
        evict: Notify::new(),
        answered: Cell::new(None),
    });
    ep.conns.borrow_mut().insert(0, conn.clone());
    connection(stream, ep, conn).await;
}

/// Runs one connection until it ends, misses its deadline or is evicted. `stream` is the
/// accepted socket, or any byte stream for [`serve_stream`].
async fn connection<S: AsyncRead + AsyncWrite + Unpin + 'static>(stream: S, ep: Rc<Endpoint>, conn: Rc<Conn>) {
    let io = TokioIo::new(Watched {
        stream,
        conn: conn.clone(),
    });
    let service = {
        let (ep, conn) = (ep.clone(), conn.clone());
        hyper::service::service_fn(move |req| answer(req, ep.clone(), conn.clone()))
    };
    let served = hyper::server::conn::http1::Builder::new()
        .title_case_headers(true)
        .max_buf_size(MAX_HEAD.max(8192))
        .max_header_size(MAX_HEAD)
        .serve_connection(io, service);
    let mut served = std::pin::pin!(served);
    loop {
        let (at, which) = conn.deadline();
        tokio::select! {
            _ = served.as_mut() => break,
            _ = conn.changed.notified() => continue,
            _ = conn.evict.notified() => break,
            _ = tokio::time::sleep_until(at) => {
                if conn.deadline().0 <= Instant::now() {
                    ep.stats().timed_out[which as usize].fetch_add(1, Relaxed);
                    break;
                }
            }
        }
    }
    ep.conns.borrow_mut().remove(&conn.id);
}

/// The stream, noting the first byte of a request head for the head's deadline.
struct Watched<S> {
    stream: S,
    conn: Rc<Conn>,
}

impl<S: AsyncRead + Unpin> AsyncRead for Watched<S> {
    fn poll_read(mut self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &mut ReadBuf<'_>) -> Poll<std::io::Result<()>> {
        let before = buf.filled().len();
        let r = Pin::new(&mut self.stream).poll_read(cx, buf);
        if buf.filled().len() > before {
            if let Phase::Waiting {
                since,
                first,
                head: None,
            } = self.conn.phase.get()
            {
                self.conn.set(Phase::Waiting {
                    since,
                    first,
                    head: Some(Instant::now()),
                });
            }
        }
        r
    }
}

impl<S: AsyncWrite + Unpin> AsyncWrite for Watched<S> {
    fn poll_write(mut self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &[u8]) -> Poll<std::io::Result<usize>> {
        Pin::new(&mut self.stream).poll_write(cx, buf)
    }
    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.stream).poll_flush(cx)
    }
    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.stream).poll_shutdown(cx)
    }
    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[std::io::IoSlice<'_>],
    ) -> Poll<std::io::Result<usize>> {
        Pin::new(&mut self.stream).poll_write_vectored(cx, bufs)
    }
    fn is_write_vectored(&self) -> bool {
        self.stream.is_write_vectored()
    }
}

/// A response body that puts its connection back to waiting once hyper is done with it (sent,
/// or not sent for a `HEAD`).
struct Answer {
    bytes: Option<Bytes>,
    conn: Rc<Conn>,
}

impl Body for Answer {
    type Data = Bytes;
    type Error = std::convert::Infallible;

    fn poll_frame(mut self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<Option<Result<Frame<Bytes>, Self::Error>>> {
        Poll::Ready(self.bytes.take().map(|b| Ok(Frame::data(b))))
    }
    fn is_end_stream(&self) -> bool {
        self.bytes.is_none()
    }
    fn size_hint(&self) -> SizeHint {
        SizeHint::with_exact(self.bytes.as_ref().map_or(0, |b| b.len() as u64))
    }
}

impl Drop for Answer {
    fn drop(&mut self) {
        self.conn.set(Phase::Waiting {
            since: Instant::now(),
            first: false,
            head: None,
        });
    }
}

/// Whether the client lets the connection stay open after this request: HTTP/1.1 unless a
/// `close` token is in its `Connection` header, HTTP/1.0 only with a `keep-alive` token (RFC
/// 9112 §9.3; the header is a comma-separated token list, case-insensitive, RFC 9110 §7.6.1).
fn keeps_alive(req: &Request<Incoming>) -> bool {
    let has = |token: &str| {
        req.headers()
            .get_all(CONNECTION)
            .iter()
            .filter_map(|v| v.to_str().ok())
            .flat_map(|v| v.split(','))
            .any(|t| t.trim().eq_ignore_ascii_case(token))
    };
    if has("close") {
        return false;
    }
    req.version() == Version::HTTP_11 || has("keep-alive")
}

/// Reads the request's body (RFC 9110 §9.3.1: a GET's content has no meaning; it is read and
/// discarded so it is not taken for the next request), then answers.
async fn answer(
    req: Request<Incoming>,
    ep: Rc<Endpoint>,
    conn: Rc<Conn>,
) -> Result<Response<Answer>, std::convert::Infallible> {
    conn.set(Phase::Busy(Instant::now()));
    let mut keep = keeps_alive(&req);
    let (method, path) = (req.method().clone(), req.uri().path().to_string());
    let too_long = http_body_util::Limited::new(req.into_body(), MAX_BODY)
        .collect()
        .await
        .is_err();
    if let Some(last) = conn.answered.get() {
        tokio::time::sleep_until(last + MIN_GAP).await;
    }
    conn.answered.set(Some(Instant::now()));
    let text = "text/plain; charset=utf-8";
    let (status, ctype, body, allow) = match (&method, path.as_str()) {
        _ if too_long => {
            keep = false;
            (
                StatusCode::PAYLOAD_TOO_LARGE,
                text,
                Bytes::from_static(b"request body too long\n"),
                false,
            )
        }
        (&Method::GET | &Method::HEAD, "/metrics") => (
            StatusCode::OK,
            "text/plain; version=0.0.4; charset=utf-8",
            ep.body(),
            false,
        ),
        (&Method::GET | &Method::HEAD, "/healthz") => match ep.sources.health.answer() {
            Ok(()) => (StatusCode::OK, text, Bytes::from_static(b"ok\n"), false),
            Err(why) => (
                StatusCode::SERVICE_UNAVAILABLE,
                text,
                Bytes::from(format!("{why}\n")),
                false,
            ),
        },
        (&Method::GET | &Method::HEAD, _) => (
            StatusCode::NOT_FOUND,
            text,
            Bytes::from_static(b"not found: try /metrics or /healthz\n"),
            false,
        ),
        // RFC 9110 §15.5.6: a 405 lists the methods the target supports.
        _ => (
            StatusCode::METHOD_NOT_ALLOWED,
            text,
            Bytes::from_static(b"only GET and HEAD\n"),
            true,
        ),
    };
    let mut resp = Response::new(Answer {
        bytes: Some(body),
        conn,
    });
    *resp.status_mut() = status;
    let h = resp.headers_mut();
    h.insert(CONTENT_TYPE, HeaderValue::from_static(ctype));
    if allow {
        h.insert(ALLOW, HeaderValue::from_static("GET, HEAD"));
    }
    // hyper closes after a response that says `close` (RFC 9112 §9.6).
    h.insert(
        CONNECTION,
        HeaderValue::from_static(if keep { "keep-alive" } else { "close" }),
    );
    Ok(resp)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn conn(phase: Phase) -> Conn {
        Conn {
            id: 0,
            phase: Cell::new(phase),
            changed: Notify::new(),
            evict: Notify::new(),
            answered: Cell::new(None),
        }
    }

    #[test]
    fn each_phase_has_its_absolute_deadline() {
        let t = Instant::now();
        let s = Duration::from_secs;
        let waiting = |first, head| conn(Phase::Waiting { since: t, first, head });
        assert_eq!(waiting(true, None).deadline(), (t + s(10), Deadline::FirstRequest));
        assert_eq!(waiting(false, None).deadline(), (t + s(120), Deadline::Idle));
        // A head's 5 s run from its first byte, within the wait's own limit.
        assert_eq!(waiting(false, Some(t + s(30))).deadline(), (t + s(35), Deadline::Head));
        assert_eq!(waiting(true, Some(t + s(1))).deadline(), (t + s(6), Deadline::Head));
        assert_eq!(
            waiting(true, Some(t + s(8))).deadline(),
            (t + s(10), Deadline::FirstRequest)
        );
        assert_eq!(conn(Phase::Busy(t)).deadline(), (t + s(10), Deadline::Busy));
    }
}
