//! The key table against the file's serde structs, and every key's getter against a config
//! where only that key changed.

use super::introspect::{keys, Shape};
use super::*;
use crate::config::{parse, FileConfig};

/// Every key set: see `full.toml`.
const FULL: &str = include_str!("full.toml");

/// The keys the file's serde structs accept: values and arrays of tables (a plain table such
/// as `[dpdk]` is not a key of its own).
fn file_keys() -> Vec<String> {
    keys::<FileConfig>()
        .into_iter()
        .filter(|(_, shape)| *shape != Shape::Table)
        .map(|(k, _)| k)
        .collect()
}

#[test]
fn every_key_of_the_file_has_an_entry_and_every_entry_is_a_key() {
    let file = file_keys();
    // The walk sees nested and optional sections alike.
    for k in [
        "lcores.mode",
        "port",
        "port.forward_to",
        "service.tunnels",
        "icmp.exempt",
        "tunnel.next_hop_mac",
    ] {
        assert!(file.contains(&k.to_string()), "{k} not found by the walk: {file:?}");
    }
    for k in &file {
        assert!(
            spec(k).is_some(),
            "config key `{k}` has no entry in config::keys::KEYS: add one saying whether a reload \
             applies it (live) or only a restart can (and what reads it at start-up)"
        );
    }
    for s in KEYS {
        assert!(
            file.iter().any(|k| k == s.key),
            "KEYS has `{}`, which no config struct has",
            s.key
        );
        assert_eq!(
            KEYS.iter().filter(|o| o.key == s.key).count(),
            1,
            "`{}` twice in KEYS",
            s.key
        );
        if let Get::Alias(to) = s.get {
            assert!(
                spec(to).is_some(),
                "`{}` is an alias of `{to}`, which has no entry",
                s.key
            );
        }
    }
    // FULL sets every key but the ones that exclude another it sets (their edits set them), so
    // the next test exercises every getter.
    let full: toml::Value = toml::from_str(FULL).unwrap();
    let mut written = Vec::new();
    walk(&full, "", &mut written);
    for k in &file {
        if let Some((_, other)) = EXCLUSIVE.iter().find(|(x, _)| x == k) {
            assert!(written.contains(&other.to_string()), "full.toml does not set `{other}`");
            assert!(
                !written.contains(k),
                "full.toml sets `{k}` with `{other}`, which it excludes"
            );
            continue;
        }
        assert!(written.contains(k), "full.toml does not set `{k}`");
    }
}

/// Keys that cannot be set together with another that FULL sets: (key, the other).
const EXCLUSIVE: &[(&str, &str)] = &[("rss.key_file", "rss.key")];

/// FULL's `[rss] key` line, and a key file with another key in its place.
const FULL_KEY: &str = "key = \"6d5a56da255b0ec24167253d43a38fb0d0ca2bcbae7b30b477cb2da38030f20c6a42b73bbeac01fa\"";
const FULL_KEY_FILE: &str = concat!(
    "key_file = \"",
    env!("CARGO_MANIFEST_DIR"),
    "/src/config/keys/full.key\""
);

/// The key paths a TOML document sets, without indexes.
fn walk(v: &toml::Value, path: &str, out: &mut Vec<String>) {
    let join = |k: &str| {
        if path.is_empty() {
            k.to_string()
        } else {
            format!("{path}.{k}")
        }
    };
    match v {
        toml::Value::Table(t) => {
            for (k, v) in t {
                let p = join(k);
                match v {
                    toml::Value::Table(_) => walk(v, &p, out),
                    toml::Value::Array(a) if a.iter().all(toml::Value::is_table) && !a.is_empty() => {
                        out.push(p.clone());
                        a.iter().for_each(|e| walk(e, &p, out));
                    }
                    _ => out.push(p),
                }
            }
        }
        _ => out.push(path.to_string()),
    }
}

/// For each key: edits of FULL (text replaced, each found exactly once) that change it, and
/// every change the diff must then find, as errors name them.
/// (key, [(text, replacement)], changes found).
type Edit = (
    &'static str,
    &'static [(&'static str, &'static str)],
    &'static [&'static str],
);

const EDITS: &[Edit] = &[
    ("dpdk.eal_args", &[("\"--vdev=net_null1\"]", "\"--vdev=net_null1\", \"--no-pci\"]")], &["dpdk.eal_args"]),
    ("dpdk.mbufs", &[("mbufs = 16383", "mbufs = 32767")], &["dpdk.mbufs"]),
    ("dpdk.mbuf_cache", &[("mbuf_cache = 128", "mbuf_cache = 64")], &["dpdk.mbuf_cache"]),
    ("dpdk.mempool_ops", &[("\"stack\"", "\"ring_mp_mc\"")], &["dpdk.mempool_ops"]),
    ("dpdk.rx_desc", &[("rx_desc = 512", "rx_desc = 1024")], &["dpdk.rx_desc"]),
    ("dpdk.tx_desc", &[("tx_desc = 512", "tx_desc = 1024")], &["dpdk.tx_desc"]),
    (
        "port",
        &[("\n[lcores]", "[[port]]\ndevice = \"net_null2\"\ntx_queues = 2\n\n[lcores]")],
        &["port"],
    ),
    (
        "port.device",
        &[
            ("device = \"net_null1\"", "device = \"net_null2\""),
            ("forward_to = \"net_null1\"", "forward_to = \"net_null2\""),
            ("port = \"net_null1\"", "port = \"net_null2\""),
        ],
        &["port[0].forward_to", "port[1].device", "tunnel[2].port"],
    ),
    ("port.rx_queues", &[("rx_queues = 1", "rx_queues = 2")], &["port[0].rx_queues"]),
    ("port.tx_queues", &[("tx_queues = 4", "tx_queues = 3")], &["port[1].tx_queues"]),
    ("port.ipv4", &[("\"192.0.2.5\"]", "\"192.0.2.5\", \"192.0.2.6\"]")], &["port[0].ipv4"]),
    ("port.ipv6", &[("[\"2001:db8::1\"]", "[\"2001:db8::2\"]")], &["port[0].ipv6"]),
    ("port.kernel_interface", &[("\"fpk0\"", "\"fpk1\"")], &["port[0].kernel_interface"]),
    ("port.deny", &[("deny = [\"100.64.0.0/10\"]", "deny = []")], &["port[0].deny"]),
    ("port.allow", &[("\"0.0.0.0/1\", \"128.0.0.0/1\"", "\"0.0.0.0/0\"")], &["port[0].allow"]),
    ("port.deny_file", &[("keys/port-deny.list", "keys/deny.list")], &["port[0].deny_file"]),
    ("port.allow_file", &[("keys/port-allow.list", "keys/allow.list")], &["port[0].allow_file"]),
    ("port.mac", &[("\"02:00:00:00:00:01\"", "\"02:00:00:00:00:02\"")], &["port[0].mac"]),
    ("port.mtu", &[("mtu = 1500", "mtu = 9000")], &["port[0].mtu"]),
    ("port.forward_to", &[("forward_to = \"net_null1\"", "forward_to = \"net_null0\"")], &["port[0].forward_to"]),
    (
        "lcores.rx",
        &[("rx = [0]", "rx = [2]"), ("lcores = [0]", "lcores = [2]")],
        &["lcores.rx", "flow_limit.lcores"],
    ),
    ("lcores.workers", &[("workers = [1]", "workers = [3]")], &["lcores.workers"]),
    ("lcores.cpus", &[("cpus = \"0@0,1@0\"", "cpus = \"0@0,1@1\"")], &["lcores.cpus"]),
    ("lcores.idle_sleep_us", &[("idle_sleep_us = 50", "idle_sleep_us = 0")], &["lcores.idle_sleep_us"]),
    ("lcores.idle_poll_us", &[("idle_poll_us = 2000", "idle_poll_us = 0")], &["lcores.idle_poll_us"]),
    ("lcores.idle_wait_ms", &[("idle_wait_ms = 10", "idle_wait_ms = 0")], &["lcores.idle_wait_ms"]),
    (
        "lcores.mode",
        &[("mode = \"forward\"", "mode = \"pipeline\""), ("forward_to = \"net_null1\"\n", "")],
        &["port[0].forward_to", "lcores.mode"],
    ),
    ("metrics.listen", &[("9464\"", "9465\"")], &["metrics.listen"]),
    ("metrics.enabled", &[("enabled = true\ncache_ms", "enabled = false\ncache_ms")], &["metrics.listen", "metrics.enabled"]),
    ("metrics.cache_ms", &[("cache_ms = 500", "cache_ms = 0")], &["metrics.cache_ms"]),
    ("metrics.max_connections", &[("max_connections = 16", "max_connections = 64")], &["metrics.max_connections"]),
    ("rss.key", &[("key = \"6d5a", "key = \"7d5a")], &["rss.key"]),
    ("rss.key_file", &[(FULL_KEY, FULL_KEY_FILE)], &["rss.key", "rss.key_file"]),
    ("rss.symmetric", &[("symmetric = false", "symmetric = true")], &["rss.symmetric"]),
    (
        "service",
        &[("\n[flow_limit]", "[[service]]\nname = \"echo\"\nports = [8]\naction = \"echo\"\n\n[flow_limit]")],
        &["service[1]"],
    ),
    ("service.name", &[("name = \"gateway\"", "name = \"gw\""), ("services = [\"gateway\"]", "services = [\"gw\"]")], &["service[0]", "service", "source_limit.services"]),
    ("service.protocol", &[("protocol = \"udp\"", "protocol = \"tcp\"")], &["service[0].protocol"]),
    ("service.ports", &[("ports = [7]", "ports = [7, 9]")], &["service[0].ports"]),
    ("service.addresses", &[("addresses = [\"192.0.2.1\"]", "addresses = []")], &["service[0].addresses"]),
    ("service.sockets", &[("sockets = 2", "sockets = 3")], &["service[0].sockets"]),
    ("service.socket_capacity", &[("capacity = 256", "capacity = 512")], &["service[0].socket_capacity"]),
    ("service.fanout", &[("\"hash\"", "\"roundrobin\"")], &["service[0].fanout"]),
    ("service.rollover", &[("\nrollover = true", "\nrollover = false")], &["service[0].rollover"]),
    (
        "service.action",
        &[("action = \"tunnel\"", "action = \"sink\""), ("tunnel = \"gre\"\n", ""), ("tunnels = [\"inner\"]\n", "")],
        &["service[0].action", "service[0].tunnels"],
    ),
    ("service.tunnels", &[("[\"inner\"]", "[\"outer\"]")], &["service[0].tunnels"]),
    ("service.tunnel", &[("tunnel = \"gre\"", "tunnel = \"outer\"")], &["service[0].tunnels"]),
    ("service.cost_ns", &[("cost_ns = 0", "cost_ns = 100")], &["service[0].cost_ns"]),
    ("service.free_on_rx", &[("free_on_rx = false", "free_on_rx = true")], &["service[0].free_on_rx"]),
    (
        "service.echo_allow_low_ports",
        &[("echo_allow_low_ports = false", "echo_allow_low_ports = true")],
        &["service[0].echo_allow_low_ports"],
    ),
    (
        "service.huge_flow_rollover",
        &[("huge_flow_rollover = true", "huge_flow_rollover = false")],
        &["service[0].huge_flow_rollover"],
    ),
    (
        "service.flow_limit",
        &[("\nflow_limit = true\n", "\nflow_limit = false\n")],
        &["service[0].flow_limit"],
    ),
    ("flow_limit.enabled", &[("enabled = true\ntable_len", "enabled = false\ntable_len")], &["flow_limit.enabled"]),
    ("flow_limit.table_len", &[("table_len = 4096", "table_len = 1024")], &["flow_limit.table_len"]),
    ("flow_limit.lcores", &[("lcores = [0]\n", "")], &["flow_limit.lcores"]),
    (
        "tunnel",
        &[(
            "\n[reassembly]",
            "[[tunnel]]\nname = \"more\"\nlocal = \"192.0.2.1\"\nremote = \"198.51.100.9\"\nvia = \"outer\"\n\n[reassembly]",
        )],
        &["tunnel[3]"],
    ),
    ("tunnel.name", &[("name = \"outer\"", "name = \"outer2\"")], &["tunnel[2]", "tunnel"]),
    ("tunnel.local", &[("local = \"192.0.2.5\"", "local = \"192.0.2.1\"")], &["tunnel[1].local"]),
    ("tunnel.remote", &[("198.51.100.2\"", "198.51.100.20\"")], &["tunnel[0].remote"]),
    ("tunnel.key", &[("key = 1\n", "key = 2\n")], &["tunnel[0].key"]),
    ("tunnel.sequence", &[("sequence = false", "sequence = true")], &["tunnel[0].sequence"]),
    ("tunnel.checksum", &[("checksum = false", "checksum = true")], &["tunnel[0].checksum"]),
    ("tunnel.ttl", &[("ttl = 64", "ttl = 32")], &["tunnel[0].ttl"]),
    ("tunnel.max_seq_jump", &[("max_seq_jump = 65536", "max_seq_jump = 1000")], &["tunnel[0].max_seq_jump"]),
    ("tunnel.port", &[("port = \"net_null0\"", "port = \"net_null1\"")], &["tunnel[0].port"]),
    ("tunnel.via", &[("via = \"gre\"", "via = \"outer\"")], &["tunnel[1].via"]),
    ("tunnel.next_hop_mac", &[("00:00:fe\"", "00:00:fc\"")], &["tunnel[0].next_hop_mac"]),
    ("tunnel.weight", &[("weight = 3", "weight = 5")], &["tunnel[0].weight"]),
    ("tunnel.drain", &[("drain = false", "drain = true")], &["tunnel[0].drain"]),
    ("tunnel.health", &[("health = \"tcp:80\"", "health = \"http://remote:8080/healthz\"")], &["tunnel[0].health"]),
    ("tunnel.health_interval_ms", &[("health_interval_ms = 1000", "health_interval_ms = 2000")], &["tunnel[0].health_interval_ms"]),
    ("tunnel.health_timeout_ms", &[("health_timeout_ms = 500", "health_timeout_ms = 200")], &["tunnel[0].health_timeout_ms"]),
    ("tunnel.health_rise", &[("health_rise = 2", "health_rise = 5")], &["tunnel[0].health_rise"]),
    ("tunnel.health_fall", &[("health_fall = 3", "health_fall = 1")], &["tunnel[0].health_fall"]),
    (
        "reassembly.high_thresh_bytes",
        &[("high_thresh_bytes = 4194304", "high_thresh_bytes = 8388608")],
        &["reassembly.high_thresh_bytes"],
    ),
    ("reassembly.timeout_ms", &[("timeout_ms = 30000", "timeout_ms = 10000")], &["reassembly.timeout_ms"]),
    ("reassembly.max_fragments", &[("max_fragments = 64", "max_fragments = 128")], &["reassembly.max_fragments"]),
    ("reassembly.max_per_source", &[("max_per_source = 16", "max_per_source = 8")], &["reassembly.max_per_source"]),
    ("reassembly.max_datagrams", &[("max_datagrams = 1024", "max_datagrams = 512")], &["reassembly.max_datagrams"]),
    ("reassembly.policy", &[("policy = \"probation\"", "policy = \"linux\"")], &["reassembly.policy"]),
    ("reassembly.buffers", &[("buffers = 256", "buffers = 512")], &["reassembly.buffers"]),
    ("icmp.ratemask", &[("ratemask = 6168", "ratemask = 0")], &["icmp.ratemask"]),
    ("icmp.msgs_per_sec", &[("msgs_per_sec = 1000", "msgs_per_sec = 100")], &["icmp.msgs_per_sec"]),
    ("icmp.burst", &[("burst = 50", "burst = 20")], &["icmp.burst"]),
    ("icmp.peer_interval_ms", &[("peer_interval_ms = 1000", "peer_interval_ms = 0")], &["icmp.peer_interval_ms"]),
    ("icmp.peer_burst", &[("peer_burst = 6", "peer_burst = 2")], &["icmp.peer_burst"]),
    ("icmp.exempt", &[("[\"198.51.100.0/24\"]", "[]")], &["icmp.exempt"]),
    ("tcp_reset.exempt", &[("[\"203.0.113.0/24\"]", "[\"203.0.113.0/25\"]")], &["tcp_reset.exempt"]),
    ("icmp.peer_table_size", &[("peer_table_size = 4096", "peer_table_size = 1024")], &["icmp.peer_table_size"]),
    ("icmp.build_first", &[("build_first = false", "build_first = true")], &["icmp.build_first"]),
    ("tcp_reset.enabled", &[("enabled = true\nmsgs_per_sec = 200", "enabled = false\nmsgs_per_sec = 200")], &["tcp_reset.enabled"]),
    ("tcp_reset.msgs_per_sec", &[("msgs_per_sec = 200", "msgs_per_sec = 20")], &["tcp_reset.msgs_per_sec"]),
    ("tcp_reset.burst", &[("burst = 40", "burst = 5")], &["tcp_reset.burst"]),
    ("tcp_reset.peer_interval_ms", &[("peer_interval_ms = 100\n", "peer_interval_ms = 0\n")], &["tcp_reset.peer_interval_ms"]),
    ("tcp_reset.peer_burst", &[("peer_burst = 10", "peer_burst = 3")], &["tcp_reset.peer_burst"]),
    ("tcp_reset.peer_table_size", &[("peer_table_size = 2048", "peer_table_size = 1024")], &["tcp_reset.peer_table_size"]),
    ("conntrack.entries", &[("entries = 4096", "entries = 8192")], &["conntrack.entries"]),
    ("conntrack.tcp_timeout_s", &[("tcp_timeout_s = 600", "tcp_timeout_s = 60")], &["conntrack.tcp_timeout_s"]),
    ("conntrack.tcp_closing_timeout_s", &[("tcp_closing_timeout_s = 20", "tcp_closing_timeout_s = 2")], &["conntrack.tcp_closing_timeout_s"]),
    ("conntrack.udp_timeout_s", &[("udp_timeout_s = 120", "udp_timeout_s = 12")], &["conntrack.udp_timeout_s"]),
    ("conntrack.unconfirmed_timeout_s", &[("unconfirmed_timeout_s = 5", "unconfirmed_timeout_s = 1")], &["conntrack.unconfirmed_timeout_s"]),
    ("conntrack.icmp_per_sec", &[("icmp_per_sec = 500", "icmp_per_sec = 0")], &["conntrack.icmp_per_sec"]),
    ("control.watch", &[("watch = true", "watch = false")], &["control.watch"]),
    ("control.debounce_ms", &[("debounce_ms = 250", "debounce_ms = 1000")], &["control.debounce_ms"]),
    ("control.socket", &[("full.sock", "other.sock")], &["control.socket"]),
    ("kernel.punt", &[("\"tcp:22\"]", "\"tcp:22\", \"udp:53\"]")], &["kernel.punt"]),
    ("kernel.socket_capacity", &[("socket_capacity = 512", "socket_capacity = 2048")], &["kernel.socket_capacity"]),
    ("kernel.punt_rate", &[("punt_rate = 20000", "punt_rate = 0")], &["kernel.punt_rate"]),
    ("kernel.punt_burst", &[("punt_burst = 1500", "punt_burst = 3000")], &["kernel.punt_burst"]),
    ("kernel.rollover", &[("\nrollover = false\n", "\nrollover = true\n")], &["kernel.rollover"]),
    ("kernel.flow_limit", &[("\nflow_limit = false\n", "\nflow_limit = true\n")], &["kernel.flow_limit"]),
    ("kernel.offloads", &[("\noffloads = true\n", "\noffloads = false\n")], &["kernel.offloads"]),
    ("filter.deny", &[("\"203.0.113.0/24\", ", "")], &["filter.deny"]),
    ("filter.allow", &[("\"0.0.0.0/0\", ", "")], &["filter.allow"]),
    ("filter.deny_file", &[("keys/deny.list", "keys/svc-deny.list")], &["filter.deny_file"]),
    ("filter.allow_file", &[("keys/allow.list", "keys/svc-allow.list")], &["filter.allow_file"]),
    ("service.deny", &[("deny = [\"198.51.100.128/25\"]", "deny = []")], &["service[0].deny"]),
    ("service.allow", &[(", \"2001:db8:5::/48\"]", "]")], &["service[0].allow"]),
    ("service.deny_file", &[("keys/svc-deny.list", "keys/deny.list")], &["service[0].deny_file"]),
    ("service.allow_file", &[("keys/svc-allow.list", "keys/allow.list")], &["service[0].allow_file"]),
    ("source_limit.rate", &[("\nrate = 2345", "\nrate = 3000")], &["source_limit.rate"]),
    ("source_limit.burst", &[("\nburst = 234\n", "\nburst = 300\n")], &["source_limit.burst"]),
    ("source_limit.new_rate", &[("new_rate = 23456", "new_rate = 30000")], &["source_limit.new_rate"]),
    ("source_limit.new_burst", &[("new_burst = 2346", "new_burst = 3000")], &["source_limit.new_burst"]),
    ("source_limit.ipv4_prefix", &[("ipv4_prefix = 31", "ipv4_prefix = 24")], &["source_limit.ipv4_prefix"]),
    ("source_limit.ipv6_prefix", &[("ipv6_prefix = 63", "ipv6_prefix = 48")], &["source_limit.ipv6_prefix"]),
    ("source_limit.entries", &[("entries = 32768", "entries = 4096")], &["source_limit.entries"]),
    ("source_limit.idle_ms", &[("idle_ms = 12345", "idle_ms = 5000")], &["source_limit.idle_ms"]),
    ("source_limit.calm_ms", &[("calm_ms = 23456", "calm_ms = 500")], &["source_limit.calm_ms"]),
    ("source_limit.services", &[("services = [\"gateway\"]", "services = []")], &["source_limit.services"]),
    (
        "service.tcp_state",
        &[("tcp_state = false", "tcp_state = true"), ("protocol = \"udp\"", "protocol = \"tcp\"")],
        &["service[0].protocol", "service[0].tcp_state"],
    ),
    ("tcp_state.entries", &[("entries = 8192", "entries = 16384")], &["tcp_state.entries"]),
    ("tcp_state.handshake_timeout_s", &[("handshake_timeout_s = 7", "handshake_timeout_s = 9")], &["tcp_state.handshake_timeout_s"]),
    ("tcp_state.established_timeout_s", &[("established_timeout_s = 3456", "established_timeout_s = 3600")], &["tcp_state.established_timeout_s"]),
    ("tcp_state.closing_timeout_s", &[("closing_timeout_s = 17", "closing_timeout_s = 19")], &["tcp_state.closing_timeout_s"]),
    ("tcp_state.learn_s", &[("learn_s = 45", "learn_s = 0")], &["tcp_state.learn_s"]),
    ("tcp_state.syn_rate", &[("syn_rate = 123", "syn_rate = 0")], &["tcp_state.syn_rate"]),
    ("tcp_state.syn_burst", &[("syn_burst = 34", "syn_burst = 40")], &["tcp_state.syn_burst"]),
    ("tcp_state.syn_new_rate", &[("syn_new_rate = 12345", "syn_new_rate = 20000")], &["tcp_state.syn_new_rate"]),
    ("tcp_state.syn_new_burst", &[("syn_new_burst = 1234", "syn_new_burst = 2000")], &["tcp_state.syn_new_burst"]),
];

fn edited(edits: &[(&str, &str)]) -> String {
    let mut text = FULL.to_string();
    for (from, to) in edits {
        assert_eq!(text.matches(from).count(), 1, "{from:?} must be found exactly once");
        text = text.replace(from, to);
    }
    text
}

#[test]
fn each_key_changed_alone_is_the_change_found_and_classified_by_the_table() {
    let full = parse(FULL, "full.toml").unwrap_or_else(|e| panic!("{e}"));
    assert!(full.changes(&full).is_empty());
    for s in KEYS {
        assert!(
            EDITS.iter().any(|(k, _, _)| *k == s.key),
            "no edit of `{}` in EDITS: add one, so its getter is tested",
            s.key
        );
    }
    for (key, edits, expect) in EDITS {
        let new = parse(&edited(edits), "full.toml").unwrap_or_else(|e| panic!("{key}: {e}"));
        let changes = full.changes(&new);
        let found: Vec<&str> = changes.iter().map(|c| c.key.as_str()).collect();
        assert_eq!(found, *expect, "{key}: {changes:#?}");
        // Restart-only is the table's word, nothing else's.
        let restart: Vec<String> = changes
            .iter()
            .filter(|c| matches!(c.spec.reload, Reload::Restart(_)))
            .map(|c| c.key.clone())
            .collect();
        assert_eq!(full.restart_only_changes(&new), restart, "{key}");
        // Every change is on the log line of an applied reload: its service or tunnel, its key,
        // or (`[flow_limit]`, one phrase of its whole state) its new state.
        let described = full.describe_changes(&new);
        assert!(!described.is_empty(), "{key}");
        for c in &changes {
            let field = c.spec.key.rsplit('.').next().unwrap();
            let on_line = |d: &String| match &c.element {
                Some(e) => d.contains(e),
                None if c.spec.key.starts_with("flow_limit.") => d.starts_with("flow_limit "),
                None => d.contains(field),
            };
            assert!(
                described.iter().any(on_line),
                "{key}: {} is not in the log line {described:?}",
                c.key
            );
        }
    }
}

#[test]
fn the_start_up_only_keys_are_restart_only() {
    for k in [
        "lcores.mode",
        "port.forward_to",
        "lcores.idle_sleep_us",
        "lcores.idle_poll_us",
        "lcores.idle_wait_ms",
        "reassembly.buffers",
        "rss.key",
        "rss.key_file",
    ] {
        assert!(matches!(spec(k).unwrap().reload, Reload::Restart(_)), "{k}");
    }
    for k in [
        "port.ipv4",
        "service.ports",
        "tunnel.ttl",
        "flow_limit.table_len",
        "icmp.burst",
    ] {
        assert_eq!(spec(k).unwrap().reload, Reload::Live, "{k}");
    }
}

#[test]
fn restart_errors_name_the_key_and_its_line_in_the_new_file() {
    let full = parse(FULL, "full.toml").unwrap();
    let text = edited(&[("forward_to = \"net_null1\"", "forward_to = \"net_null0\"")]);
    let new = parse(&text, "full.toml").unwrap();
    let e = full.restart_errors(&new, &text, "full.toml").expect("refused");
    assert_eq!(e.errors.len(), 1, "{e}");
    let line = text.lines().position(|l| l.starts_with("forward_to")).unwrap() + 1;
    assert_eq!(
        (e.errors[0].key.as_str(), e.errors[0].line),
        ("port[0].forward_to", Some(line))
    );
    assert!(
        e.to_string().starts_with(&format!(
            "full.toml:{line}: port[0].forward_to: net_null1 -> net_null0: the forward mode's TX ports are given to the RX lcores at start-up, so only a restart applies it"
        )),
        "{e}"
    );
    let text = edited(&[
        ("mode = \"forward\"", "mode = \"pipeline\""),
        ("forward_to = \"net_null1\"\n", ""),
    ]);
    let new = parse(&text, "full.toml").unwrap();
    let e = full.restart_errors(&new, &text, "full.toml").expect("refused");
    let mode_line = text.lines().position(|l| l.starts_with("mode")).unwrap() + 1;
    let keys: Vec<_> = e.errors.iter().map(|e| (e.key.as_str(), e.line)).collect();
    // A removed key is placed at its table.
    assert_eq!(
        keys,
        [("port[0].forward_to", Some(10)), ("lcores.mode", Some(mode_line))],
        "{e}"
    );
    assert!(e.to_string().contains("lcores.mode: forward -> pipeline: "), "{e}");
    // Only live keys: nothing to refuse.
    let text = edited(&[("ttl = 64", "ttl = 32")]);
    assert!(full.restart_errors(&parse(&text, "f").unwrap(), &text, "f").is_none());
}

#[test]
fn the_log_line_describes_tunnels_and_services() {
    let full = parse(FULL, "full.toml").unwrap();
    let text = edited(&[
        ("ttl = 64", "ttl = 32"),
        ("name = \"outer\"", "name = \"outer2\""),
        ("sockets = 2", "sockets = 4"),
        ("burst = 50", "burst = 20"),
        ("table_len = 4096", "table_len = 1024"),
        ("timeout_ms = 30000", "timeout_ms = 10000"),
    ]);
    let new = parse(&text, "full.toml").unwrap();
    assert_eq!(
        full.describe_changes(&new),
        [
            "service \"gateway\" changed: sockets 2 -> 4",
            "flow_limit on table_len 4096 lcores [0] -> on table_len 1024 lcores [0]",
            "tunnel \"gre\" changed: ttl 64 -> 32",
            "tunnel \"outer2\" added",
            "tunnel \"outer\" removed",
            "reassembly limits timeout_ms 30000 -> 10000",
            "icmp limits changed: burst 50 -> 20",
        ]
    );
}

#[test]
fn the_contract_lists_every_key_and_nothing_else() {
    // Each `### [section]` / `### [[section]]` table of docs/contract.md's "Config keys", its
    // rows' first cells (`key` or `a` / `b`), against the reload-key table (arrays of tables
    // alone, `port`, `service`, `tunnel`, stand for adding or removing one and have no row).
    let contract = include_str!("../../../../docs/contract.md");
    let keys_section = contract
        .split("## Config keys")
        .nth(1)
        .and_then(|s| s.split("\n## ").next())
        .expect("docs/contract.md has a Config keys section");
    let mut listed = Vec::new();
    for sec in keys_section.split("\n### ").skip(1) {
        let head = sec.lines().next().unwrap_or_default();
        let Some(name) = head.split('`').nth(1).map(|h| h.trim_matches(|c| c == '[' || c == ']')) else {
            continue;
        };
        for cell in sec
            .lines()
            .filter_map(|l| l.strip_prefix("| `"))
            .filter_map(|l| l.split(" |").next())
        {
            for key in cell.split('`').map(str::trim).filter(|t| !t.is_empty() && *t != "/") {
                listed.push(format!("{name}.{key}"));
            }
        }
    }
    listed.sort();
    listed.dedup();
    let mut ours: Vec<String> = KEYS
        .iter()
        .map(|k| k.key.to_string())
        .filter(|k| k.contains('.'))
        .collect();
    ours.sort();
    assert_eq!(
        listed, ours,
        "docs/contract.md's key tables and the reload-key table differ"
    );
}
