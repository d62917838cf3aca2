//! `[[tunnel]]`: GRE tunnels, leaving by a port or nested in another tunnel.

use super::errors::Errs;
use super::port::PortIndex;
use super::valid_name;
use crate::locate::Seg::{Index, Key};
use fastpath::pipeline::tunnel::MAX_DEPTH;
use fastpath::wire::EthernetAddress;
use serde::Deserialize;
use std::collections::HashMap;
use std::net::{IpAddr, Ipv4Addr};

/// Tunnel name -> (index of the first tunnel with it, number of tunnels with it).
type Names = HashMap<String, (usize, usize)>;

/// One `[[tunnel]]` as written.
#[derive(Deserialize, Debug)]
#[serde(deny_unknown_fields)]
pub(super) struct TunnelSection {
    name: String,
    local: String,
    remote: String,
    key: Option<u32>,
    sequence: Option<bool>,
    checksum: Option<bool>,
    ttl: Option<i64>,
    max_seq_jump: Option<i64>,
    port: Option<String>,
    via: Option<String>,
    next_hop_mac: Option<String>,
    weight: Option<i64>,
    drain: Option<bool>,
    health: Option<String>,
    health_interval_ms: Option<i64>,
    health_timeout_ms: Option<i64>,
    health_rise: Option<i64>,
    health_fall: Option<i64>,
}

/// Where a tunnel's packets leave.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum TunnelVia {
    /// Out of `port[index]` to this next hop.
    Port(usize, EthernetAddress),
    /// Through `tunnel[index]`.
    Tunnel(usize),
}

/// One `[[tunnel]]`.
#[derive(Clone, Debug, PartialEq)]
pub struct TunnelConfig {
    /// Name.
    pub name: String,
    /// Our underlay address.
    pub local: std::net::IpAddr,
    /// The far end.
    pub remote: std::net::IpAddr,
    /// GRE key.
    pub key: Option<u32>,
    /// Sequence numbers.
    pub sequence: bool,
    /// GRE checksums.
    pub checksum: bool,
    /// Outer TTL.
    pub ttl: u8,
    /// Sequence tunnels: the largest step forward a received number may take (default 2^16).
    pub max_seq_jump: u32,
    /// How packets leave.
    pub via: TunnelVia,
    /// Tunnel headers around a packet sent through it (1 = straight to a port).
    pub depth: usize,
    /// Its share of a `tunnel` service's flows among the service's tunnels (Maglev weight).
    pub weight: u32,
    /// Drained: a `tunnel` service sends it no flows (it still decapsulates).
    pub drain: bool,
    /// Its backend health check (`health`), if it has one.
    pub health: Option<HealthConfig>,
}

/// A tunnel's backend health check and its timing (`health`, `health_*`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct HealthConfig {
    /// As written (`"tcp:80"`), for the logs and `fastpathctl`.
    pub spec: String,
    /// What is checked, with `remote` resolved.
    pub check: Check,
    /// Time from one check's start to the next's.
    pub interval: std::time::Duration,
    /// A check not done within this fails.
    pub timeout: std::time::Duration,
    /// Consecutive successes that bring a down backend back.
    pub rise: u32,
    /// Consecutive failures that take an up backend down.
    pub fall: u32,
}

/// One health check.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Check {
    /// A TCP connect to this address succeeds.
    Tcp(std::net::SocketAddr),
    /// An HTTP GET of `path` at `addr` (with `Host: host`) answers 2xx.
    Http {
        /// Where to connect.
        addr: std::net::SocketAddr,
        /// The `Host` header: the URL's host and port.
        host: String,
        /// The request target, starting with `/`.
        path: String,
    },
}

/// Defaults of the `health_*` keys.
pub const HEALTH_INTERVAL_MS: i64 = 1000;
/// Default `health_timeout_ms`.
pub const HEALTH_TIMEOUT_MS: i64 = 500;
/// Default `health_rise`.
pub const HEALTH_RISE: i64 = 2;
/// Default `health_fall`.
pub const HEALTH_FALL: i64 = 3;

/// What a `health` value may be.
const HEALTH_FORMS: &str =
    "expected \"tcp:PORT\" or \"http://HOST[:PORT]/PATH\" (HOST an IP address, [IPv6] in brackets, or remote)";

/// Parses a `health` value against the tunnel's `remote`.
pub fn parse_check(spec: &str, remote: IpAddr) -> Result<Check, String> {
    if let Some(port) = spec.strip_prefix("tcp:") {
        return match port.parse::<u16>() {
            Ok(p) if p > 0 => Ok(Check::Tcp(std::net::SocketAddr::new(remote, p))),
            _ => Err(format!("{spec:?}: port {port:?}: expected 1 to 65535")),
        };
    }
    let Some(rest) = spec.strip_prefix("http://") else {
        return Err(format!("{spec:?}: {HEALTH_FORMS}"));
    };
    let (authority, path) = match rest.find('/') {
        Some(i) => (&rest[..i], &rest[i..]),
        None => (rest, "/"),
    };
    // A path goes into the request line as it is: printable ASCII, no space (RFC 9112 §3.2).
    if !path.bytes().all(|b| b.is_ascii_graphic()) {
        return Err(format!(
            "{spec:?}: the path may hold only printable ASCII without spaces"
        ));
    }
    let (host, port) = match authority.rsplit_once(':') {
        Some((h, p)) if !h.is_empty() && (!h.starts_with('[') || h.ends_with(']')) => match p.parse::<u16>() {
            Ok(p) if p > 0 => (h, p),
            _ => return Err(format!("{spec:?}: port {p:?}: expected 1 to 65535")),
        },
        _ => (authority, 80),
    };
    let ip = if host == "remote" {
        remote
    } else {
        let bare = host.strip_prefix('[').and_then(|h| h.strip_suffix(']')).unwrap_or(host);
        match bare.parse::<IpAddr>() {
            Ok(ip) if ip.is_ipv6() == host.starts_with('[') => ip,
            _ => return Err(format!("{spec:?}: host {host:?}: {HEALTH_FORMS}")),
        }
    };
    let addr = std::net::SocketAddr::new(ip, port);
    Ok(Check::Http {
        addr,
        host: addr.to_string(),
        path: path.to_string(),
    })
}

/// `tunnel[ti]`'s `health` and `health_*` keys.
fn health(ti: usize, r: &TunnelSection, who: &str, remote: Option<IpAddr>, errs: &mut Errs) -> Option<HealthConfig> {
    let at = |k: &'static str| [Key("tunnel"), Index(ti), Key(k)];
    let Some(spec) = &r.health else {
        for (k, set) in [
            ("health_interval_ms", r.health_interval_ms.is_some()),
            ("health_timeout_ms", r.health_timeout_ms.is_some()),
            ("health_rise", r.health_rise.is_some()),
            ("health_fall", r.health_fall.is_some()),
        ] {
            if set {
                errs.add(
                    &at(k),
                    format!("{who}: {k} without health: give health = \"tcp:PORT\" too"),
                );
            }
        }
        return None;
    };
    let check = parse_check(spec, remote.unwrap_or(IpAddr::V4(Ipv4Addr::UNSPECIFIED)))
        .map_err(|e| errs.add(&at("health"), format!("{who}: health {e}")))
        .ok();
    let interval = r.health_interval_ms.unwrap_or(HEALTH_INTERVAL_MS);
    if !(10..=3_600_000).contains(&interval) {
        errs.add(
            &at("health_interval_ms"),
            format!("{who}: health_interval_ms {interval}: expected 10 to 3600000"),
        );
    }
    let timeout = r.health_timeout_ms.unwrap_or(HEALTH_TIMEOUT_MS);
    if !(1..interval.max(2)).contains(&timeout) {
        errs.add(
            &at("health_timeout_ms"),
            format!(
                "{who}: health_timeout_ms {timeout}: expected 1 to {} (less than health_interval_ms {interval})",
                interval - 1
            ),
        );
    }
    let mut count = |k: &'static str, v: Option<i64>, default: i64| {
        let v = v.unwrap_or(default);
        if !(1..=1000).contains(&v) {
            errs.add(&at(k), format!("{who}: {k} {v}: expected 1 to 1000"));
        }
        v.clamp(1, 1000) as u32
    };
    let rise = count("health_rise", r.health_rise, HEALTH_RISE);
    let fall = count("health_fall", r.health_fall, HEALTH_FALL);
    let ms = |v: i64| std::time::Duration::from_millis(v.clamp(1, 3_600_000) as u64);
    Some(HealthConfig {
        spec: spec.clone(),
        check: check?,
        interval: ms(interval),
        timeout: ms(timeout),
        rise,
        fall,
    })
}

/// Validates every `[[tunnel]]` and the depth of their `via` chains.
pub(super) fn validate(raw: Vec<TunnelSection>, ports: &PortIndex, errs: &mut Errs) -> Vec<TunnelConfig> {
    // Name -> (first index, how many tunnels have it): one lookup per check, so validation
    // stays linear in the number of tunnels.
    let mut names: Names = HashMap::with_capacity(raw.len());
    for (ti, t) in raw.iter().enumerate() {
        names.entry(t.name.clone()).or_insert((ti, 0)).1 += 1;
    }
    let mut out = Vec::new();
    let mut vias: Vec<Option<usize>> = Vec::new();
    for (ti, r) in raw.iter().enumerate() {
        let (tunnel, via) = tunnel(ti, r, &names, ports, errs);
        out.push(tunnel);
        vias.push(via);
    }
    set_depths(&mut out, &vias, errs);
    out
}

/// Validates `tunnel[ti]`; also returns the index of the tunnel it goes through, if any.
fn tunnel(
    ti: usize,
    r: &TunnelSection,
    names: &Names,
    ports: &PortIndex,
    errs: &mut Errs,
) -> (TunnelConfig, Option<usize>) {
    let at = |k: &'static str| [Key("tunnel"), Index(ti), Key(k)];
    let who = format!("tunnel {:?}", r.name);
    if !valid_name(&r.name) {
        errs.add(
            &at("name"),
            format!("{who}: expected a name of letters, digits, '-' and '_'"),
        );
    } else if names.get(&r.name).is_some_and(|&(_, n)| n > 1) {
        errs.add(&at("name"), format!("{who}: two tunnels have this name"));
    }
    let (local, remote) = endpoints(ti, r, &who, ports, errs);
    let ttl = r.ttl.unwrap_or(64);
    if !(1..=255).contains(&ttl) {
        errs.add(&at("ttl"), format!("{who}: ttl {ttl}: expected 1 to 255"));
    }
    let max_seq_jump = r
        .max_seq_jump
        .unwrap_or(fastpath::pipeline::tunnel::DEFAULT_MAX_SEQ_JUMP as i64);
    if !(1..(1 << 31)).contains(&max_seq_jump) {
        errs.add(
            &at("max_seq_jump"),
            format!("{who}: max_seq_jump {max_seq_jump}: expected 1 to 2147483647 (RFC 2890 serial numbers)"),
        );
    }
    let weight = r.weight.unwrap_or(1);
    let max_weight = fastpath::pipeline::maglev::MAX_WEIGHT as i64;
    if !(0..=max_weight).contains(&weight) {
        errs.add(
            &at("weight"),
            format!("{who}: weight {weight}: expected 0 to {max_weight}"),
        );
    }
    let (via, via_idx) = route(ti, r, &who, names, ports, errs);
    let health = health(ti, r, &who, remote, errs);
    let tunnel = TunnelConfig {
        name: r.name.clone(),
        local: local.unwrap_or(IpAddr::V4(Ipv4Addr::UNSPECIFIED)),
        remote: remote.unwrap_or(IpAddr::V4(Ipv4Addr::UNSPECIFIED)),
        key: r.key,
        sequence: r.sequence.unwrap_or(false),
        checksum: r.checksum.unwrap_or(false),
        ttl: ttl.clamp(1, 255) as u8,
        max_seq_jump: max_seq_jump.clamp(1, i32::MAX as i64) as u32,
        via,
        depth: 1,
        weight: weight.clamp(0, max_weight) as u32,
        drain: r.drain.unwrap_or(false),
        health,
    };
    (tunnel, via_idx)
}

/// `tunnel[ti]`'s `local` (one of our addresses) and `remote`, of one family.
fn endpoints(
    ti: usize,
    r: &TunnelSection,
    who: &str,
    ports: &PortIndex,
    errs: &mut Errs,
) -> (Option<IpAddr>, Option<IpAddr>) {
    let at = |k: &'static str| [Key("tunnel"), Index(ti), Key(k)];
    let local = r
        .local
        .parse::<IpAddr>()
        .map_err(|_| errs.add(&at("local"), format!("{who}: {:?}: expected an IP address", r.local)))
        .ok();
    let remote = r
        .remote
        .parse::<IpAddr>()
        .map_err(|_| errs.add(&at("remote"), format!("{who}: {:?}: expected an IP address", r.remote)))
        .ok();
    if let (Some(l), Some(rm)) = (local, remote) {
        if l.is_ipv4() != rm.is_ipv4() {
            errs.add(
                &at("remote"),
                format!("{who}: local {l} and remote {rm} are of different families"),
            );
        }
        if !ports.is_local(l) {
            errs.add(
                &at("local"),
                format!("{who}: {l} is not a local address of any [[port]]"),
            );
        }
    }
    (local, remote)
}

/// How `tunnel[ti]`'s packets leave: exactly one of `port` (with `next_hop_mac`) or `via`.
fn route(
    ti: usize,
    r: &TunnelSection,
    who: &str,
    names: &Names,
    ports: &PortIndex,
    errs: &mut Errs,
) -> (TunnelVia, Option<usize>) {
    let at = |k: &'static str| [Key("tunnel"), Index(ti), Key(k)];
    match (&r.port, &r.via) {
        (Some(dev), None) => {
            let pi = ports.device(dev);
            if pi.is_none() {
                errs.add(&at("port"), format!("{who}: no [[port]] has device {dev:?}"));
            }
            let mac = next_hop_mac(ti, r, who, errs);
            (TunnelVia::Port(pi.unwrap_or(0), mac), None)
        }
        (None, Some(name)) => {
            let via_idx = names.get(name).map(|&(i, _)| i);
            if via_idx.is_none() {
                errs.add(&at("via"), format!("{who}: no tunnel is named {name:?}"));
            }
            if r.next_hop_mac.is_some() {
                errs.add(
                    &at("next_hop_mac"),
                    format!("{who}: next_hop_mac belongs to the tunnel that carries it"),
                );
            }
            (TunnelVia::Tunnel(via_idx.unwrap_or(0)), via_idx)
        }
        _ => {
            errs.add(
                &at("port"),
                format!("{who}: give exactly one of port (a [[port]] device) or via (another tunnel)"),
            );
            (TunnelVia::Port(0, EthernetAddress::default()), None)
        }
    }
}

/// `tunnel[ti].next_hop_mac`, which a tunnel that leaves by a port needs.
fn next_hop_mac(ti: usize, r: &TunnelSection, who: &str, errs: &mut Errs) -> EthernetAddress {
    let at = [Key("tunnel"), Index(ti), Key("next_hop_mac")];
    match r.next_hop_mac.as_deref().map(str::parse::<EthernetAddress>) {
        Some(Ok(m)) if m.is_unicast() => m,
        Some(_) => {
            errs.add(&at, format!("{who}: expected a unicast MAC like \"02:00:00:00:00:fe\""));
            EthernetAddress::default()
        }
        None => {
            errs.add(&at, format!("{who}: a tunnel that leaves by a port needs next_hop_mac"));
            EthernetAddress::default()
        }
    }
}

/// Depth along `via` chains; a chain that revisits a tunnel is a loop (a tunnel
/// routed into itself), one longer than MAX_DEPTH nests too deep.
fn set_depths(out: &mut [TunnelConfig], vias: &[Option<usize>], errs: &mut Errs) {
    for ti in 0..out.len() {
        match depth(ti, vias, out) {
            Ok(depth) => out[ti].depth = depth,
            Err(msg) => errs.add(
                &[Key("tunnel"), Index(ti), Key("via")],
                format!("tunnel {:?}: {msg}", out[ti].name),
            ),
        }
    }
}

/// The tunnel headers around a packet sent through `tunnel[ti]`, or what is wrong with its chain.
fn depth(ti: usize, vias: &[Option<usize>], out: &[TunnelConfig]) -> Result<usize, String> {
    let mut seen = vec![ti];
    let mut cur = ti;
    let mut depth = 1;
    while let Some(next) = vias[cur] {
        if seen.contains(&next) {
            return Err(format!(
                "loop: {} is carried through itself",
                seen.iter()
                    .chain([&next])
                    .map(|&i| out[i].name.as_str())
                    .collect::<Vec<_>>()
                    .join(" -> ")
            ));
        }
        seen.push(next);
        depth += 1;
        cur = next;
        if depth > MAX_DEPTH {
            return Err(format!(
                "nested {depth} deep or more; at most {MAX_DEPTH} tunnel headers are allowed"
            ));
        }
    }
    Ok(depth)
}
