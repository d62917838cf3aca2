//! A minimal HTTP/1.1 server for `GET /metrics` and `GET /healthz`, on threads of its own so a
//! slow or stuck scraper delays nothing but itself. Rendering sums the per-lcore counter blocks;
//! the lcores never wait for it.
//!
//! Connections persist (HTTP/1.1 keep-alive, what Prometheus uses): a scrape on an open
//! connection costs the render and one write, not a TCP handshake and teardown as well, which
//! on loopback cost the CPU it shares with a worker as much as the render. Each connection has
//! a thread (at most [`MAX_CONNECTIONS`], the others are refused with 503) that closes it after
//! [`IDLE`] without a request ([`FIRST_REQUEST`] for a new one); the threads inherit the
//! accepting thread's CPUs. A request head must fit [`MAX_HEAD`] bytes and arrive within
//! [`HEAD_TIME`], so a slow or endless client holds neither a slot nor memory for long.

use prometheus::Registry;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

/// Connections served at once; one more is answered 503 and closed.
pub const MAX_CONNECTIONS: usize = 16;
/// A connection with no request for this long is closed (Prometheus scrapes every 15 s to 1 min
/// by default and reconnects when needed).
pub const IDLE: Duration = Duration::from_secs(120);

/// A new connection's first request must start within this.
pub const FIRST_REQUEST: Duration = Duration::from_secs(10);
/// Once a request has started, its whole head (request line and headers) must arrive within
/// this and fit in [`MAX_HEAD`] bytes: a client dribbling an endless header can neither hold a
/// slot nor grow our memory.
pub const HEAD_TIME: Duration = Duration::from_secs(5);
/// Largest request head accepted.
pub const MAX_HEAD: usize = 8 * 1024;

/// The bound endpoint.
pub struct Server {
    listener: TcpListener,
}

impl Server {
    /// Binds `addr` (port 0 picks a free port).
    pub fn bind(addr: SocketAddr) -> std::io::Result<Server> {
        let listener = TcpListener::bind(addr)?;
        Ok(Server { listener })
    }

    /// The address actually bound.
    pub fn local_addr(&self) -> SocketAddr {
        self.listener.local_addr().expect("bound socket has an address")
    }

    /// Serves until [`Running::stop`], on a thread of its own. The thread blocks in `accept`:
    /// it wakes for a scrape and for nothing else (a polling loop would add its wake-up delay
    /// to every scrape and wake the CPU it shares with a worker lcore hundreds of times a
    /// second).
    ///
    /// `on_start` runs first on the new thread (it pins the thread to its CPUs).
    pub fn spawn(self, registry: Registry, on_start: impl FnOnce() + Send + 'static) -> std::io::Result<Running> {
        let stop = Arc::new(AtomicBool::new(false));
        let addr = self.local_addr();
        let flag = stop.clone();
        let thread = std::thread::Builder::new()
            .name("fastpath-metrics".into())
            .spawn(move || {
                on_start();
                let registry = Arc::new(registry);
                let live = Arc::new(AtomicUsize::new(0));
                while !flag.load(Ordering::Acquire) {
                    match self.listener.accept() {
                        Ok(_) if flag.load(Ordering::Acquire) => break,
                        Ok((stream, _)) => serve(stream, &registry, &live, &flag),
                        // Out of descriptors or similar: back off instead of spinning.
                        Err(_) => std::thread::sleep(Duration::from_millis(10)),
                    }
                }
            })?;
        Ok(Running { thread, addr, stop })
    }
}

/// The serving thread of a [`Server`].
pub struct Running {
    thread: std::thread::JoinHandle<()>,
    addr: SocketAddr,
    stop: Arc<AtomicBool>,
}

impl Running {
    /// Stops serving: sets the flag, then wakes the blocked `accept` with a connection of our
    /// own (to loopback when bound to a wildcard address) and joins the thread. If that
    /// connection cannot be made the thread is left behind rather than waited for forever.
    pub fn stop(self) {
        self.stop.store(true, Ordering::Release);
        let mut to = self.addr;
        if to.ip().is_unspecified() {
            to.set_ip(match to {
                SocketAddr::V4(_) => std::net::Ipv4Addr::LOCALHOST.into(),
                SocketAddr::V6(_) => std::net::Ipv6Addr::LOCALHOST.into(),
            });
        }
        if TcpStream::connect_timeout(&to, Duration::from_secs(1)).is_ok() {
            let _ = self.thread.join();
        }
    }
}

/// Hands `stream` to a thread of its own, or refuses it when [`MAX_CONNECTIONS`] are open.
fn serve(stream: TcpStream, registry: &Arc<Registry>, live: &Arc<AtomicUsize>, stop: &Arc<AtomicBool>) {
    if live.fetch_add(1, Ordering::AcqRel) >= MAX_CONNECTIONS {
        live.fetch_sub(1, Ordering::AcqRel);
        let _ = respond(
            &stream,
            "503 Service Unavailable",
            "text/plain; charset=utf-8",
            b"busy\n",
            false,
        );
        return;
    }
    let (registry, live2, stop) = (registry.clone(), live.clone(), stop.clone());
    let spawned = std::thread::Builder::new()
        .name("fastpath-scrape".into())
        .spawn(move || {
            let _ = connection(stream, &registry, &stop);
            live2.fetch_sub(1, Ordering::AcqRel);
        });
    if spawned.is_err() {
        live.fetch_sub(1, Ordering::AcqRel);
    }
}

/// Answers the requests of one connection until the client closes it, asks to, goes idle, or
/// the server stops.
fn connection(stream: TcpStream, registry: &Registry, stop: &AtomicBool) -> std::io::Result<()> {
    stream.set_nodelay(true)?;
    stream.set_write_timeout(Some(Duration::from_secs(5)))?;
    let mut reader = BufReader::new(stream.try_clone()?);
    let mut first = true;
    while !stop.load(Ordering::Acquire) {
        // A new connection gets FIRST_REQUEST to ask something, a kept one IDLE between
        // scrapes: a client that connects and says nothing frees its slot soon.
        stream.set_read_timeout(Some(if first { FIRST_REQUEST } else { IDLE }))?;
        first = false;
        let mut head = HeadReader::new(&mut reader);
        let Some(request) = head.line(&stream)? else {
            return Ok(());
        };
        let Some(keep) = headers(&mut head, &stream, &request)? else {
            return Ok(());
        };
        if !answer(&stream, registry, &request, keep)? {
            return Ok(());
        }
    }
    Ok(())
}

/// Reads the headers after `request` up to the blank line. Returns whether the connection stays
/// open after the answer: HTTP/1.1 keeps it unless the client says `Connection: close`,
/// HTTP/1.0 closes it unless the client says `keep-alive`. `None`: the client closed it.
fn headers(head: &mut HeadReader, stream: &TcpStream, request: &str) -> std::io::Result<Option<bool>> {
    let mut keep = request.trim_end().ends_with("HTTP/1.1");
    loop {
        let Some(h) = head.line(stream)? else {
            return Ok(None);
        };
        if h == "\r\n" || h == "\n" {
            return Ok(Some(keep));
        }
        if let Some((name, value)) = h.split_once(':') {
            if name.trim().eq_ignore_ascii_case("connection") {
                let v = value.trim();
                if v.eq_ignore_ascii_case("close") {
                    keep = false;
                } else if v.eq_ignore_ascii_case("keep-alive") {
                    keep = true;
                }
            }
        }
    }
}

/// Answers `request`; returns whether the connection stays open.
fn answer(stream: &TcpStream, registry: &Registry, request: &str, keep: bool) -> std::io::Result<bool> {
    let mut parts = request.split_whitespace();
    let (method, target) = (parts.next().unwrap_or(""), parts.next().unwrap_or(""));
    let path = target.split('?').next().unwrap_or("");
    match (method, path) {
        ("GET", "/metrics") => respond(
            stream,
            "200 OK",
            "text/plain; version=0.0.4; charset=utf-8",
            crate::metrics::render(registry).as_bytes(),
            keep,
        )?,
        ("GET", "/healthz") => respond(stream, "200 OK", "text/plain; charset=utf-8", b"ok\n", keep)?,
        ("GET", _) => respond(
            stream,
            "404 Not Found",
            "text/plain; charset=utf-8",
            b"not found: try /metrics or /healthz\n",
            keep,
        )?,
        // A request body we would have to skip: answer and close rather than parse it.
        _ => {
            respond(
                stream,
                "405 Method Not Allowed",
                "text/plain; charset=utf-8",
                b"only GET\n",
                false,
            )?;
            return Ok(false);
        }
    }
    Ok(keep)
}

/// Reads the lines of one request head under the [`MAX_HEAD`] and [`HEAD_TIME`] limits.
struct HeadReader<'a> {
    reader: &'a mut BufReader<TcpStream>,
    started: Option<std::time::Instant>,
    left: usize,
}

impl<'a> HeadReader<'a> {
    fn new(reader: &'a mut BufReader<TcpStream>) -> Self {
        HeadReader {
            reader,
            started: None,
            left: MAX_HEAD,
        }
    }

    /// The next line; `None` when the peer closed, or broke a limit (the connection is then
    /// dropped without an answer).
    fn line(&mut self, stream: &TcpStream) -> std::io::Result<Option<String>> {
        if let Some(t) = self.started {
            let Some(rest) = HEAD_TIME.checked_sub(t.elapsed()).filter(|r| !r.is_zero()) else {
                return Ok(None);
            };
            stream.set_read_timeout(Some(rest))?;
        }
        let mut line = String::new();
        let n = (&mut *self.reader).take(self.left as u64).read_line(&mut line)?;
        if n == 0 || !line.ends_with('\n') {
            return Ok(None); // closed, or the head is longer than MAX_HEAD
        }
        self.left -= n;
        // The clock starts with the request's first line; waiting for it is the idle timeout.
        self.started.get_or_insert_with(std::time::Instant::now);
        Ok(Some(line))
    }
}

/// Writes one response, head and body in one write (one segment for a small scrape).
fn respond(mut w: &TcpStream, status: &str, ctype: &str, body: &[u8], keep: bool) -> std::io::Result<()> {
    let mut out = Vec::with_capacity(body.len() + 160);
    write!(
        out,
        "HTTP/1.1 {status}\r\nContent-Type: {ctype}\r\nContent-Length: {}\r\nConnection: {}\r\n\r\n",
        body.len(),
        if keep { "keep-alive" } else { "close" }
    )?;
    out.extend_from_slice(body);
    w.write_all(&out)?;
    w.flush()
}
