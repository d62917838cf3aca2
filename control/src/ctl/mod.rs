//! The control socket (`[control] socket`): operators ask the running daemon what it is doing
//! (`fastpathctl`). Served by a thread of its own, off the RX lcores' CPUs, from what the
//! control and metrics threads already read (the metric sources, the published tables, the
//! health verdict, the running config); a reload goes to the control thread as SIGHUP's does.
//!
//! The protocol: the client connects, writes one JSON object on one line (at most
//! [`MAX_REQUEST`] bytes, `\n`-terminated or ended by shutting down its writing side), reads one
//! JSON object (`{"ok": true, "result": ...}` or `{"ok": false, "error": "..."}`), and the
//! server closes. One request per connection: nothing is kept between requests.
//!
//! - `{"command": "status"}`
//! - `{"command": "show", "what": "services" | "sockets" | "tunnels" | "limits" | "reassembly" | "kernel"}`
//! - `{"command": "flow", "protocol": "udp" | "tcp", "src": "ADDR[:PORT]", "dst": "ADDR[:PORT]"}`
//! - `{"command": "stats"}`: the counters `fastpathctl stats` takes two samples of
//! - `{"command": "reload", "dry_run": true | false}`
//! - `{"command": "trace", "count": N, "lcore": L, "filter": "EXPR", "follow": true | false}`:
//!   the one request answered by a stream of lines ([`trace`]) rather than one object

pub mod client;
pub mod protocol;
pub mod server;
pub mod trace;
pub mod view;

pub use protocol::{parse_request, Request, Show};
pub use server::{ControlSocket, Running};
