//! The control socket's requests, their parsing and the answer's envelope.

use fastpath::pipeline::explain::FlowQuery;
use fastpath::wire::IpProtocol;
use serde::{Deserialize, Serialize};
use std::net::IpAddr;
use std::time::Duration;

/// The largest request: a longer one is answered with an error and the connection closed.
pub const MAX_REQUEST: usize = 4096;
/// A request must be complete within this of the accept.
pub const REQUEST_TIME: Duration = Duration::from_secs(2);
/// An answer must be written within this of the request.
pub const ANSWER_TIME: Duration = Duration::from_secs(5);
/// A reload (or its dry run) must be answered by the control thread within this (a reload of
/// a very large config takes seconds of parsing).
pub const RELOAD_TIME: Duration = Duration::from_secs(60);
/// Connections held at once; one more closes the one that has waited longest for its request.
pub const MAX_CONNECTIONS: usize = 16;
/// Reloads the socket asks of the control thread are at least this far apart, one at a time,
/// so a client looping on `reload` cannot keep the control thread from its ticks.
pub const RELOAD_GAP: Duration = Duration::from_millis(100);

/// One request.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "command", rename_all = "snake_case", deny_unknown_fields)]
pub enum Request {
    /// Version, uptime, config, ports, lcores, health.
    Status,
    /// One area's live state.
    Show {
        /// Which.
        what: Show,
    },
    /// What the running config does with a packet.
    Flow {
        /// `udp` or `tcp`.
        protocol: String,
        /// `ADDR[:PORT]` (IPv6 with a port: `[ADDR]:PORT`).
        src: String,
        /// `ADDR[:PORT]`.
        dst: String,
    },
    /// The per-lcore and per-queue counters, for rates between two samples.
    Stats,
    /// Record what the RX lcores do with the next packets (a stream: see [`super::trace`]).
    Trace {
        /// Records to print before the trace ends (with `follow`: no end).
        #[serde(default = "default_trace_count")]
        count: u64,
        /// Only this RX lcore (its EAL lcore id).
        #[serde(default)]
        lcore: Option<u32>,
        /// Which packets ([`fastpath::trace::Filter`]'s language); none: every packet.
        #[serde(default)]
        filter: String,
        /// Stream until the client closes the connection.
        #[serde(default)]
        follow: bool,
    },
    /// Reload the config file as SIGHUP does, or only say what that would change.
    Reload {
        /// Change nothing.
        #[serde(default)]
        dry_run: bool,
    },
}

/// Records a trace prints unless told otherwise.
pub const DEFAULT_TRACE_COUNT: u64 = 10;

fn default_trace_count() -> u64 {
    DEFAULT_TRACE_COUNT
}

/// What `show` shows.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Show {
    /// Every service: ports, action, fanout, its sockets' totals.
    Services,
    /// Every socket: depth, capacity, counters.
    Sockets,
    /// Every tunnel: weight, drain, health check state, counters.
    Tunnels,
    /// The ICMP error and TCP reset limits and what they did.
    Limits,
    /// Reassembly memory, policy and counters.
    Reassembly,
    /// The kernel path: rules, punt budget, where the kernel listens, counters.
    Kernel,
}

/// Parses one request line (without or with its `\n`).
pub fn parse_request(line: &[u8]) -> Result<Request, String> {
    if line.len() > MAX_REQUEST {
        return Err(format!("request of {} bytes; at most {MAX_REQUEST}", line.len()));
    }
    let text = std::str::from_utf8(line).map_err(|_| "the request is not UTF-8".to_string())?;
    let text = text.trim();
    if text.is_empty() {
        return Err("empty request: one JSON object on one line, e.g. {\"command\":\"status\"}".into());
    }
    let v: serde_json::Value = serde_json::from_str(text).map_err(|e| format!("bad request: {e}"))?;
    // serde ignores extra keys beside a unit variant's tag: every key is checked here.
    let allowed: &[&str] = match v.get("command").and_then(|c| c.as_str()) {
        Some("show") => &["command", "what"],
        Some("flow") => &["command", "protocol", "src", "dst"],
        Some("reload") => &["command", "dry_run"],
        Some("trace") => &["command", "count", "lcore", "filter", "follow"],
        _ => &["command"],
    };
    if let Some(extra) = v
        .as_object()
        .and_then(|o| o.keys().find(|k| !allowed.contains(&k.as_str())))
    {
        return Err(format!("bad request: unknown key {extra:?}"));
    }
    serde_json::from_value(v).map_err(|e| format!("bad request: {e}"))
}

/// `ADDR[:PORT]`: an IPv4 address, an IPv6 address, or either with a port (IPv6 in brackets:
/// `[2001:db8::1]:53`). No port: 0.
pub fn parse_endpoint(s: &str) -> Result<(IpAddr, u16), String> {
    let s = s.trim();
    if let Ok(sa) = s.parse::<std::net::SocketAddr>() {
        return Ok((sa.ip(), sa.port()));
    }
    let bare = s.strip_prefix('[').and_then(|r| r.strip_suffix(']')).unwrap_or(s);
    bare.parse::<IpAddr>()
        .map(|ip| (ip, 0))
        .map_err(|_| format!("{s:?}: an address with an optional port, e.g. 192.0.2.1:53 or [2001:db8::1]:53"))
}

/// A `flow` request's packet.
pub fn parse_flow(protocol: &str, src: &str, dst: &str) -> Result<FlowQuery, String> {
    let protocol = match protocol.to_ascii_lowercase().as_str() {
        "udp" => IpProtocol::UDP,
        "tcp" => IpProtocol::TCP,
        other => return Err(format!("protocol {other:?}: udp or tcp")),
    };
    let (src, dst) = (parse_endpoint(src)?, parse_endpoint(dst)?);
    if src.0.is_ipv4() != dst.0.is_ipv4() {
        return Err(format!("{} and {}: one family, IPv4 or IPv6", src.0, dst.0));
    }
    Ok(FlowQuery { protocol, src, dst })
}

/// The answer to a request.
pub fn ok(result: serde_json::Value) -> serde_json::Value {
    serde_json::json!({ "ok": true, "result": result })
}

/// The answer to a request that failed.
pub fn error(msg: impl Into<String>) -> serde_json::Value {
    serde_json::json!({ "ok": false, "error": msg.into() })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::{Ipv4Addr, Ipv6Addr};

    #[test]
    fn requests_parse_and_unknown_or_malformed_ones_are_refused() {
        assert_eq!(parse_request(b"{\"command\":\"status\"}\n"), Ok(Request::Status));
        assert_eq!(
            parse_request(br#" {"command": "show", "what": "sockets"} "#),
            Ok(Request::Show { what: Show::Sockets })
        );
        assert_eq!(
            parse_request(br#"{"command":"reload"}"#),
            Ok(Request::Reload { dry_run: false })
        );
        assert_eq!(
            parse_request(br#"{"command":"reload","dry_run":true}"#),
            Ok(Request::Reload { dry_run: true })
        );
        assert_eq!(
            parse_request(br#"{"command":"flow","protocol":"udp","src":"198.51.100.7:5353","dst":"192.0.2.1:53"}"#),
            Ok(Request::Flow {
                protocol: "udp".into(),
                src: "198.51.100.7:5353".into(),
                dst: "192.0.2.1:53".into()
            })
        );
        assert_eq!(
            parse_request(br#"{"command":"trace"}"#),
            Ok(Request::Trace {
                count: DEFAULT_TRACE_COUNT,
                lcore: None,
                filter: String::new(),
                follow: false
            })
        );
        // Every request round-trips through its own JSON (what the client sends).
        let trace = Request::Trace {
            count: 5,
            lcore: Some(2),
            filter: "proto udp and port 53".into(),
            follow: true,
        };
        for r in [Request::Stats, Request::Show { what: Show::Kernel }, trace] {
            assert_eq!(parse_request(serde_json::to_string(&r).unwrap().as_bytes()), Ok(r));
        }
        for bad in [
            &b""[..],
            b"\n",
            b"status",
            b"{\"command\":\"trace\",\"count\":-1}",
            b"{\"command\":\"trace\",\"grep\":\"x\"}",
            b"{\"command\":\"show\",\"what\":\"everything\"}",
            b"{\"command\":\"show\"}",
            b"{\"command\":\"status\",\"extra\":1}",
            b"{\"command\":\"reload\",\"dry_run\":\"yes\"}",
            b"\xff\xfe{}",
            b"[1,2,3]",
        ] {
            assert!(parse_request(bad).is_err(), "{:?}", String::from_utf8_lossy(bad));
        }
        let huge = vec![b' '; MAX_REQUEST + 1];
        assert!(parse_request(&huge).unwrap_err().contains("at most 4096"));
    }

    #[test]
    fn endpoints_and_flows() {
        let v4 = |a, b, c, d| IpAddr::V4(Ipv4Addr::new(a, b, c, d));
        assert_eq!(parse_endpoint("192.0.2.1:53"), Ok((v4(192, 0, 2, 1), 53)));
        assert_eq!(parse_endpoint("192.0.2.1"), Ok((v4(192, 0, 2, 1), 0)));
        let six: IpAddr = "2001:db8::1".parse::<Ipv6Addr>().unwrap().into();
        assert_eq!(parse_endpoint("[2001:db8::1]:53"), Ok((six, 53)));
        assert_eq!(parse_endpoint("2001:db8::1"), Ok((six, 0)));
        assert_eq!(parse_endpoint("[2001:db8::1]"), Ok((six, 0)));
        for bad in ["", "192.0.2.1:99999", "192.0.2.256", "host:53", "2001:db8::1:53:x"] {
            assert!(parse_endpoint(bad).is_err(), "{bad}");
        }
        let f = parse_flow("TCP", "198.51.100.7:40000", "192.0.2.1:80").unwrap();
        assert_eq!(f.protocol, IpProtocol::TCP);
        assert_eq!((f.src.1, f.dst.1), (40000, 80));
        assert!(parse_flow("icmp", "198.51.100.7", "192.0.2.1").is_err());
        assert!(parse_flow("udp", "198.51.100.7", "[2001:db8::1]:53").is_err());
    }
}
