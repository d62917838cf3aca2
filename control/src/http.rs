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
        listener.set_nonblocking(true)?;
        Ok(Server { listener })
    }

    /// The address actually bound.
    pub fn local_addr(&self) -> SocketAddr {
        self.listener.local_addr().expect("bound socket has an address")
    }

    /// Serves until `stop` is set, on a thread of its own.
    pub fn spawn(self, registry: Registry, stop: Arc<AtomicBool>) -> std::io::Result<std::thread::JoinHandle<()>> {
        std::thread::Builder::new()
            .name("fastpath-metrics".into())
            .spawn(move || {
                while !stop.load(Ordering::Relaxed) {
                    match self.listener.accept() {
                        Ok((stream, _)) => {
                            let _ = handle(stream, &registry);
                        }
                        Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {
                            std::thread::sleep(Duration::from_millis(5));
                        }
                        Err(_) => std::thread::sleep(Duration::from_millis(5)),
                    }
                }
            })
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
    let mut w = stream;
    write!(
        w,
        "HTTP/1.1 {status}\r\nContent-Type: {ctype}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
        body.len()
    )?;
    w.write_all(&body)?;
    w.flush()
}
