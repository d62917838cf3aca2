//! Every key a config file may write, and what a reload does when its value changes.
//!
//! [`KEYS`] is the one list: for each key its [`Reload`] (applied live, or refused because only
//! a restart can apply it) and how to read its effective value, defaults applied, from a
//! validated [`Config`]. The reload's refusal and the line it logs for an applied change are
//! both made from it (see `changes.rs`); a unit test fails when a field of the file's serde
//! structs has no entry here, or an entry names no field.
//!
//! Adding a key: add the field to its section's serde struct, then its entry here, in the
//! section's place. `Restart` says what reads the key at start-up; check `daemon/startup.rs`
//! (anything it reads from the config rather than from the published tables is restart-only).

use super::{fingerprint, Config, KeySource, LcoreMode, PortConfig, ServiceConfig, TunnelConfig, TunnelVia};
use fastpath::pipeline::{Action, FanoutMode};
use fastpath::wire::IpProtocol;
use std::fmt::{Debug, Display};

/// What a reload does with a key whose effective value changed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Reload {
    /// Applied: the new generation's tables carry it, and every lcore adopts it between two
    /// bursts.
    Live,
    /// Read only at start-up (the text says by what): a reload that changes it is refused,
    /// naming the key and its line, and the running config stays. A restart applies it.
    Restart(&'static str),
}

/// One key of the file.
#[derive(Debug)]
pub struct KeySpec {
    /// The dotted key without indexes, as the docs name it: `lcores.mode`, `port.forward_to`,
    /// `service.ports`; an array of tables alone (`port`, `service`, `tunnel`) stands for adding
    /// or removing one.
    pub key: &'static str,
    /// What a reload does when it changes.
    pub reload: Reload,
    pub(super) get: Get,
}

/// How to read a key's effective value from a validated config, as the log shows it.
#[derive(Clone, Copy, Debug)]
pub(super) enum Get {
    /// A key of a plain table (`[dpdk]`, `[lcores]`, ...).
    Top(fn(&Config) -> String),
    /// A key of a `[[port]]`; ports are matched by position.
    Port(fn(&Config, &PortConfig) -> String),
    /// A key of a `[[service]]`; services are matched by name.
    Service(fn(&Config, &ServiceConfig) -> String),
    /// A key of a `[[tunnel]]`; tunnels are matched by name.
    Tunnel(fn(&Config, &TunnelConfig) -> String),
    /// An array of tables: a section added or removed (for ports, a changed number of them).
    Sections,
    /// What matches a service or tunnel across a reload: a new name is a removal and an addition.
    Name,
    /// Folded into another key's value (`service.tunnel` is one more `service.tunnels` entry).
    #[cfg_attr(not(test), allow(dead_code))]
    Alias(&'static str),
}

const fn live(key: &'static str, get: Get) -> KeySpec {
    KeySpec {
        key,
        reload: Reload::Live,
        get,
    }
}

const fn restart(key: &'static str, read_by: &'static str, get: Get) -> KeySpec {
    KeySpec {
        key,
        reload: Reload::Restart(read_by),
        get,
    }
}

fn dbg<T: Debug>(v: &T) -> String {
    format!("{v:?}")
}

fn opt<T: Display>(v: &Option<T>) -> String {
    v.as_ref().map_or_else(|| "none".to_string(), T::to_string)
}

/// Addresses as written: `a/len` where a prefix length was given.
fn prefixed<T: Display>(addrs: &[T], prefixes: &[u8], max: u8) -> String {
    let one = |(a, &l): (&T, &u8)| if l == max { a.to_string() } else { format!("{a}/{l}") };
    format!(
        "[{}]",
        addrs.iter().zip(prefixes).map(one).collect::<Vec<_>>().join(", ")
    )
}

fn list<T: Display>(v: &[T]) -> String {
    format!("[{}]", v.iter().map(T::to_string).collect::<Vec<_>>().join(", "))
}

const EAL: &str = "passed to rte_eal_init at start-up";
const POOL: &str = "sizes the packet pool, made at start-up";
const PORTS: &str = "the ports are opened and started at start-up";
const LCORES: &str = "the lcores are launched at start-up";
const METRICS: &str = "the metrics endpoint is bound at start-up";
const NIC_HASH: &str = "programmed into the NICs' RSS at start-up";

/// Every key, in file order of the sections.
pub static KEYS: &[KeySpec] = &[
    restart("dpdk.eal_args", EAL, Get::Top(|c| dbg(&c.dpdk.eal_args))),
    restart("dpdk.mbufs", POOL, Get::Top(|c| c.dpdk.mbufs.to_string())),
    restart("dpdk.mbuf_cache", POOL, Get::Top(|c| c.dpdk.mbuf_cache.to_string())),
    restart("dpdk.mempool_ops", POOL, Get::Top(|c| dbg(&c.dpdk.mempool_ops))),
    restart("dpdk.rx_desc", PORTS, Get::Top(|c| c.dpdk.rx_desc.to_string())),
    restart("dpdk.tx_desc", PORTS, Get::Top(|c| c.dpdk.tx_desc.to_string())),
    restart("port", PORTS, Get::Sections),
    restart("port.device", PORTS, Get::Port(|_, p| dbg(&p.device))),
    restart("port.rx_queues", PORTS, Get::Port(|_, p| p.rx_queues.to_string())),
    restart("port.tx_queues", PORTS, Get::Port(|_, p| p.tx_queues.to_string())),
    live("port.ipv4", Get::Port(|_, p| prefixed(&p.ipv4, &p.ipv4_prefix, 32))),
    live("port.ipv6", Get::Port(|_, p| prefixed(&p.ipv6, &p.ipv6_prefix, 128))),
    live("port.mac", Get::Port(|_, p| opt(&p.mac))),
    restart(
        "port.kernel_interface",
        "the kernel interface is created with the port at start-up",
        Get::Port(|_, p| opt(&p.kernel_interface)),
    ),
    restart(
        "port.mtu",
        "set on the port, and sizes the mbufs, at start-up",
        Get::Port(|_, p| opt(&p.mtu)),
    ),
    restart(
        "port.forward_to",
        "the forward mode's TX ports are given to the RX lcores at start-up",
        Get::Port(|c, p| opt(&p.forward_to.map(|i| &c.ports[i].device))),
    ),
    restart("lcores.rx", LCORES, Get::Top(|c| dbg(&c.lcores.rx))),
    restart("lcores.workers", LCORES, Get::Top(|c| dbg(&c.lcores.workers))),
    restart(
        "lcores.cpus",
        "the EAL places the lcores on their CPUs at start-up",
        Get::Top(|c| opt(&c.lcores.cpus)),
    ),
    restart(
        "lcores.idle_sleep_us",
        "the lcores' idle policy is fixed when they are launched at start-up",
        Get::Top(|c| c.lcores.idle_sleep_us.to_string()),
    ),
    restart(
        "lcores.idle_poll_us",
        "the lcores' idle policy is fixed when they are launched at start-up",
        Get::Top(|c| c.lcores.idle_poll_us.to_string()),
    ),
    restart(
        "lcores.idle_wait_ms",
        "the lcores' idle policy is fixed when they are launched at start-up",
        Get::Top(|c| c.lcores.idle_wait_ms.to_string()),
    ),
    restart(
        "lcores.mode",
        "the RX lcores' loop is chosen when they are launched at start-up",
        Get::Top(|c| mode(c.lcores.mode).to_string()),
    ),
    restart("metrics.listen", METRICS, Get::Top(|c| opt(&c.metrics.listen))),
    restart(
        "metrics.enabled",
        METRICS,
        Get::Top(|c| c.metrics.listen.is_some().to_string()),
    ),
    restart(
        "metrics.cache_ms",
        METRICS,
        Get::Top(|c| c.metrics.cache.as_millis().to_string()),
    ),
    restart(
        "metrics.max_connections",
        METRICS,
        Get::Top(|c| c.metrics.max_connections.to_string()),
    ),
    // The key is secret: the log and the refusal show its fingerprint, never its bytes.
    restart("rss.key", NIC_HASH, Get::Top(rss_key)),
    restart("rss.key_file", NIC_HASH, Get::Top(rss_key_file)),
    restart("rss.symmetric", NIC_HASH, Get::Top(|c| c.rss.symmetric.to_string())),
    live("service", Get::Sections),
    live("service.name", Get::Name),
    live(
        "service.protocol",
        Get::Service(|_, s| protocol(s.protocol).to_string()),
    ),
    live("service.ports", Get::Service(|_, s| dbg(&s.ports))),
    live("service.addresses", Get::Service(|_, s| dbg(&s.addresses))),
    live("service.sockets", Get::Service(|_, s| s.sockets.to_string())),
    live(
        "service.socket_capacity",
        Get::Service(|_, s| s.socket_capacity.to_string()),
    ),
    live("service.fanout", Get::Service(|_, s| fanout(s.fanout).to_string())),
    live("service.rollover", Get::Service(|_, s| s.rollover.to_string())),
    live("service.action", Get::Service(|_, s| action(&s.action))),
    live("service.tunnels", Get::Service(service_tunnels)),
    live("service.tunnel", Get::Alias("service.tunnels")),
    live("service.cost_ns", Get::Service(|_, s| s.cost_ns.to_string())),
    live("service.free_on_rx", Get::Service(|_, s| s.free_on_rx.to_string())),
    live(
        "service.echo_allow_low_ports",
        Get::Service(|_, s| s.echo_allow_low_ports.to_string()),
    ),
    live(
        "service.huge_flow_rollover",
        Get::Service(|_, s| s.huge_flows.to_string()),
    ),
    live("service.flow_limit", Get::Service(|_, s| s.flow_limit.to_string())),
    live("service.tcp_state", Get::Service(|_, s| s.tcp_state.to_string())),
    live(
        "port.deny",
        Get::Port(|_, p| super::filter::inline_shown(&p.filter.deny)),
    ),
    live(
        "port.allow",
        Get::Port(|_, p| super::filter::inline_shown(&p.filter.allow)),
    ),
    live(
        "port.deny_file",
        Get::Port(|_, p| super::filter::file_shown(&p.filter.deny)),
    ),
    live(
        "port.allow_file",
        Get::Port(|_, p| super::filter::file_shown(&p.filter.allow)),
    ),
    live(
        "service.deny",
        Get::Service(|_, s| super::filter::inline_shown(&s.filter.deny)),
    ),
    live(
        "service.allow",
        Get::Service(|_, s| super::filter::inline_shown(&s.filter.allow)),
    ),
    live(
        "service.deny_file",
        Get::Service(|_, s| super::filter::file_shown(&s.filter.deny)),
    ),
    live(
        "service.allow_file",
        Get::Service(|_, s| super::filter::file_shown(&s.filter.allow)),
    ),
    live("flow_limit.enabled", Get::Top(|c| c.flow_limit.enabled.to_string())),
    live("flow_limit.table_len", Get::Top(|c| c.flow_limit.table_len.to_string())),
    live("flow_limit.lcores", Get::Top(flow_limit_lcores)),
    live("tunnel", Get::Sections),
    live("tunnel.name", Get::Name),
    live("tunnel.local", Get::Tunnel(|_, t| t.local.to_string())),
    live("tunnel.remote", Get::Tunnel(|_, t| t.remote.to_string())),
    live("tunnel.key", Get::Tunnel(|_, t| opt(&t.key))),
    live("tunnel.sequence", Get::Tunnel(|_, t| t.sequence.to_string())),
    live("tunnel.checksum", Get::Tunnel(|_, t| t.checksum.to_string())),
    live("tunnel.ttl", Get::Tunnel(|_, t| t.ttl.to_string())),
    live("tunnel.max_seq_jump", Get::Tunnel(|_, t| t.max_seq_jump.to_string())),
    live("tunnel.port", Get::Tunnel(tunnel_port)),
    live("tunnel.via", Get::Tunnel(tunnel_via)),
    live("tunnel.next_hop_mac", Get::Tunnel(tunnel_next_hop)),
    live("tunnel.weight", Get::Tunnel(|_, t| t.weight.to_string())),
    live("tunnel.drain", Get::Tunnel(|_, t| t.drain.to_string())),
    live("tunnel.health", Get::Tunnel(|_, t| health(t, |h| dbg(&h.spec)))),
    live(
        "tunnel.health_interval_ms",
        Get::Tunnel(|_, t| health(t, |h| h.interval.as_millis().to_string())),
    ),
    live(
        "tunnel.health_timeout_ms",
        Get::Tunnel(|_, t| health(t, |h| h.timeout.as_millis().to_string())),
    ),
    live(
        "tunnel.health_rise",
        Get::Tunnel(|_, t| health(t, |h| h.rise.to_string())),
    ),
    live(
        "tunnel.health_fall",
        Get::Tunnel(|_, t| health(t, |h| h.fall.to_string())),
    ),
    live(
        "reassembly.policy",
        Get::Top(|c| c.reassembly.policy.label().to_string()),
    ),
    live(
        "reassembly.high_thresh_bytes",
        Get::Top(|c| c.reassembly.high_thresh_bytes.to_string()),
    ),
    live(
        "reassembly.timeout_ms",
        Get::Top(|c| (c.reassembly.timeout_ns / 1_000_000).to_string()),
    ),
    live(
        "reassembly.max_fragments",
        Get::Top(|c| c.reassembly.max_fragments.to_string()),
    ),
    live(
        "reassembly.max_per_source",
        Get::Top(|c| c.reassembly.max_per_source.to_string()),
    ),
    live(
        "reassembly.max_datagrams",
        Get::Top(|c| c.reassembly.max_datagrams.to_string()),
    ),
    restart(
        "reassembly.buffers",
        "sizes the reassembly buffer pool, made at start-up",
        Get::Top(|c| c.reassembly_buffers.to_string()),
    ),
    live("icmp.ratemask", Get::Top(|c| format!("{:#x}", c.icmp.ratemask))),
    live("icmp.msgs_per_sec", Get::Top(|c| c.icmp.msgs_per_sec.to_string())),
    live("icmp.burst", Get::Top(|c| c.icmp.burst.to_string())),
    live(
        "icmp.peer_interval_ms",
        Get::Top(|c| c.icmp.peer_interval_ms.to_string()),
    ),
    live("icmp.peer_burst", Get::Top(|c| c.icmp.peer_burst.to_string())),
    live("icmp.exempt", Get::Top(|c| list(c.icmp.exempt.prefixes()))),
    live("tcp_reset.exempt", Get::Top(|c| list(c.tcp_reset.exempt.prefixes()))),
    live("icmp.peer_table_size", Get::Top(|c| c.icmp.peer_table_size.to_string())),
    live("icmp.build_first", Get::Top(|c| c.icmp.build_first.to_string())),
    live("tcp_reset.enabled", Get::Top(|c| c.tcp_reset.enabled.to_string())),
    live(
        "tcp_reset.msgs_per_sec",
        Get::Top(|c| c.tcp_reset.msgs_per_sec.to_string()),
    ),
    live("tcp_reset.burst", Get::Top(|c| c.tcp_reset.burst.to_string())),
    live(
        "tcp_reset.peer_interval_ms",
        Get::Top(|c| c.tcp_reset.peer_interval_ms.to_string()),
    ),
    live("tcp_reset.peer_burst", Get::Top(|c| c.tcp_reset.peer_burst.to_string())),
    live(
        "tcp_reset.peer_table_size",
        Get::Top(|c| c.tcp_reset.peer_table_size.to_string()),
    ),
    restart(
        "conntrack.entries",
        "sizes each worker's connection table, made at start-up",
        Get::Top(|c| c.conntrack.entries.to_string()),
    ),
    live(
        "conntrack.tcp_timeout_s",
        Get::Top(|c| c.conntrack.tcp_timeout_s.to_string()),
    ),
    live(
        "conntrack.tcp_closing_timeout_s",
        Get::Top(|c| c.conntrack.tcp_closing_timeout_s.to_string()),
    ),
    live(
        "conntrack.udp_timeout_s",
        Get::Top(|c| c.conntrack.udp_timeout_s.to_string()),
    ),
    live(
        "conntrack.unconfirmed_timeout_s",
        Get::Top(|c| c.conntrack.unconfirmed_timeout_s.to_string()),
    ),
    live(
        "conntrack.icmp_per_sec",
        Get::Top(|c| c.conntrack.icmp_per_sec.to_string()),
    ),
    live("control.watch", Get::Top(|c| c.control.watch.to_string())),
    live(
        "control.debounce_ms",
        Get::Top(|c| c.control.debounce.as_millis().to_string()),
    ),
    restart(
        "control.socket",
        "the control socket is bound at start-up",
        Get::Top(|c| c.control.socket.display().to_string()),
    ),
    live("kernel.punt", Get::Top(|c| dbg(&c.kernel.punt))),
    live(
        "kernel.socket_capacity",
        Get::Top(|c| c.kernel.socket_capacity.to_string()),
    ),
    live("kernel.punt_rate", Get::Top(|c| c.kernel.punt_rate.to_string())),
    live("kernel.punt_burst", Get::Top(|c| c.kernel.punt_burst.to_string())),
    live("kernel.rollover", Get::Top(|c| c.kernel.rollover.to_string())),
    live("kernel.flow_limit", Get::Top(|c| c.kernel.flow_limit.to_string())),
    restart(
        "kernel.offloads",
        "the kernel interfaces are made at start-up",
        Get::Top(|c| c.kernel.offloads.to_string()),
    ),
    live("filter.deny", Get::Top(|c| super::filter::inline_shown(&c.filter.deny))),
    live(
        "filter.allow",
        Get::Top(|c| super::filter::inline_shown(&c.filter.allow)),
    ),
    live(
        "filter.deny_file",
        Get::Top(|c| super::filter::file_shown(&c.filter.deny)),
    ),
    live(
        "filter.allow_file",
        Get::Top(|c| super::filter::file_shown(&c.filter.allow)),
    ),
    live("source_limit.rate", Get::Top(|c| c.source_limit.rate.to_string())),
    live("source_limit.burst", Get::Top(|c| c.source_limit.burst.to_string())),
    live(
        "source_limit.new_rate",
        Get::Top(|c| c.source_limit.new_rate.to_string()),
    ),
    live(
        "source_limit.new_burst",
        Get::Top(|c| c.source_limit.new_burst.to_string()),
    ),
    live(
        "source_limit.ipv4_prefix",
        Get::Top(|c| c.source_limit.ipv4_prefix.to_string()),
    ),
    live(
        "source_limit.ipv6_prefix",
        Get::Top(|c| c.source_limit.ipv6_prefix.to_string()),
    ),
    live("source_limit.entries", Get::Top(|c| c.source_limit.entries.to_string())),
    live("source_limit.idle_ms", Get::Top(|c| c.source_limit.idle_ms.to_string())),
    live("source_limit.calm_ms", Get::Top(|c| c.source_limit.calm_ms.to_string())),
    live("source_limit.services", Get::Top(|c| dbg(&c.source_limit.services))),
    restart(
        "tcp_state.entries",
        "sizes each RX lcore's TCP state table, made when a service first asks for it",
        Get::Top(|c| c.tcp_state.entries.to_string()),
    ),
    live(
        "tcp_state.handshake_timeout_s",
        Get::Top(|c| c.tcp_state.handshake_timeout_s.to_string()),
    ),
    live(
        "tcp_state.established_timeout_s",
        Get::Top(|c| c.tcp_state.established_timeout_s.to_string()),
    ),
    live(
        "tcp_state.closing_timeout_s",
        Get::Top(|c| c.tcp_state.closing_timeout_s.to_string()),
    ),
    live("tcp_state.learn_s", Get::Top(|c| c.tcp_state.learn_s.to_string())),
    live("tcp_state.syn_rate", Get::Top(|c| c.tcp_state.syn_rate.to_string())),
    live("tcp_state.syn_burst", Get::Top(|c| c.tcp_state.syn_burst.to_string())),
    live(
        "tcp_state.syn_new_rate",
        Get::Top(|c| c.tcp_state.syn_new_rate.to_string()),
    ),
    live(
        "tcp_state.syn_new_burst",
        Get::Top(|c| c.tcp_state.syn_new_burst.to_string()),
    ),
];

/// The entry of `key` (`port.forward_to`), if there is one.
pub fn spec(key: &str) -> Option<&'static KeySpec> {
    KEYS.iter().find(|s| s.key == key)
}

fn mode(m: LcoreMode) -> &'static str {
    match m {
        LcoreMode::Pipeline => "pipeline",
        LcoreMode::Forward => "forward",
    }
}

fn protocol(p: IpProtocol) -> &'static str {
    if p == IpProtocol::TCP {
        "tcp"
    } else {
        "udp"
    }
}

fn fanout(f: FanoutMode) -> &'static str {
    match f {
        FanoutMode::Hash => "hash",
        FanoutMode::RoundRobin => "roundrobin",
        FanoutMode::Random => "random",
    }
}

/// `Echo`, `Sink` or `Tunnel` (the tunnels are `service.tunnels`).
fn action(a: &Action) -> String {
    match a {
        Action::Tunnel(_) => "Tunnel".to_string(),
        a => dbg(a),
    }
}

/// `rss.key` as written (`none` when it is not): its fingerprint.
fn rss_key(c: &Config) -> String {
    match c.rss.source {
        KeySource::Inline => fingerprint(&c.rss.key),
        _ => "none".to_string(),
    }
}

/// `rss.key_file`: the file and the fingerprint of the key read from it, so a reload sees a
/// changed file as a changed value.
fn rss_key_file(c: &Config) -> String {
    match &c.rss.source {
        KeySource::File(path) => format!("{} ({})", path.display(), fingerprint(&c.rss.key)),
        _ => "none".to_string(),
    }
}

/// A health-check key of `t`, or `none` without a check.
fn health(t: &TunnelConfig, f: impl Fn(&super::HealthConfig) -> String) -> String {
    t.health.as_ref().map_or_else(|| "none".to_string(), f)
}

/// The tunnels a `tunnel` service sends into, by name.
fn service_tunnels(c: &Config, s: &ServiceConfig) -> String {
    match &s.action {
        Action::Tunnel(set) => list(&set.tunnels.iter().map(|&i| &c.tunnels[i].name).collect::<Vec<_>>()),
        _ => "[]".to_string(),
    }
}

/// The RX lcores the flow limit applies to (`all` when not given).
pub(super) fn flow_limit_lcores(c: &Config) -> String {
    match &c.flow_limit.rx_slots {
        Some(slots) => dbg(&slots.iter().map(|&s| c.lcores.rx[s]).collect::<Vec<_>>()),
        None => "all".to_string(),
    }
}

fn tunnel_port(c: &Config, t: &TunnelConfig) -> String {
    match t.via {
        TunnelVia::Port(pi, _) => dbg(&c.ports[pi].device),
        TunnelVia::Tunnel(_) => "none".to_string(),
    }
}

fn tunnel_via(c: &Config, t: &TunnelConfig) -> String {
    match t.via {
        TunnelVia::Tunnel(i) => dbg(&c.tunnels[i].name),
        TunnelVia::Port(..) => "none".to_string(),
    }
}

fn tunnel_next_hop(_: &Config, t: &TunnelConfig) -> String {
    match t.via {
        TunnelVia::Port(_, mac) => mac.to_string(),
        TunnelVia::Tunnel(_) => "none".to_string(),
    }
}

#[cfg(test)]
mod introspect;
#[cfg(test)]
mod tests;
