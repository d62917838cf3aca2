//! A minimal HTTP/1.1 server for `GET /metrics` and `GET /healthz`, on its own thread so a slow
//! or stuck scraper delays nothing but itself. Rendering sums the per-lcore counter blocks; the
//! lcores never wait for it.

use prometheus::Registry;
use std::io::{BufRead, BufReader, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

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
    /// `on_start` runs first on the new thread (it pins the thread to its CPUs).
    pub fn spawn(self, registry: Registry, on_start: impl FnOnce() + Send + 'static) -> std::io::Result<Running> {
        let stop = Arc::new(AtomicBool::new(false));
        let addr = self.local_addr();
        let flag = stop.clone();
        let thread = std::thread::Builder::new()
            .name("fastpath-metrics".into())
            .spawn(move || {
                on_start();
                while !flag.load(Ordering::Acquire) {
                    match self.listener.accept() {
                        Ok((stream, _)) if !flag.load(Ordering::Acquire) => {
                            let _ = handle(stream, &registry);
                        }
                        Ok(_) => break,
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

fn handle(stream: TcpStream, registry: &Registry) -> std::io::Result<()> {
    stream.set_nonblocking(false)?;
    stream.set_read_timeout(Some(Duration::from_secs(2)))?;
    stream.set_write_timeout(Some(Duration::from_secs(5)))?;
    let mut reader = BufReader::new(stream.try_clone()?);
    let mut request = String::new();
    reader.read_line(&mut request)?;
    // Drain the headers; we need none of them.
    loop {
        let mut h = String::new();
        if reader.read_line(&mut h)? == 0 || h == "\r\n" || h == "\n" {
            break;
        }
    }
    let mut parts = request.split_whitespace();
    let (method, target) = (parts.next().unwrap_or(""), parts.next().unwrap_or(""));
    let path = target.split('?').next().unwrap_or("");
    let (status, ctype, body) = match (method, path) {
        ("GET", "/metrics") => (
            "200 OK",
            "text/plain; version=0.0.4; charset=utf-8",
            crate::metrics::render(registry).into_bytes(),
        ),
        ("GET", "/healthz") => ("200 OK", "text/plain; charset=utf-8", b"ok\n".to_vec()),
        ("GET", _) => (
            "404 Not Found",
            "text/plain; charset=utf-8",
            b"not found: try /metrics or /healthz\n".to_vec(),
        ),
        _ => (
            "405 Method Not Allowed",
            "text/plain; charset=utf-8",
            b"only GET\n".to_vec(),
        ),
    };
    // Head and body in one write: one segment for a small scrape, no Nagle wait between them.
    let mut out = Vec::with_capacity(body.len() + 128);
    write!(
        out,
        "HTTP/1.1 {status}\r\nContent-Type: {ctype}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
        body.len()
    )?;
    out.extend_from_slice(&body);
    let mut w = stream;
    w.write_all(&out)?;
    w.flush()
}
