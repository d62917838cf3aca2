//! The config's unit tests: parsing, defaults, and every error with its key and line.

use super::*;

const GOOD: &str = r#"
[dpdk]
eal_args = ["--no-huge", "--vdev=net_null0"]

[[port]]
device = "net_null0"
rx_queues = 1
tx_queues = 2
ipv4 = ["192.0.2.1"]
ipv6 = ["2001:db8::1"]

[lcores]
rx = [0]
workers = [1]
"#;

/// A machine with these CPUs, plenty of hugepages, and no sysfs.
fn cpus(list: &[u32]) -> Machine {
    Machine {
        cpus: Some(list.to_vec()),
        hugepages: Some(Hugepages {
            free_bytes: u64::MAX,
            mounted: true,
        }),
        sys: std::path::PathBuf::from("/nonexistent"),
    }
}

fn errors(src: &str) -> Vec<ConfigError> {
    parse(src, "t.toml").unwrap_err().errors
}

#[test]
fn good_config_and_defaults() {
    let c = parse(GOOD, "t.toml").unwrap();
    assert_eq!(c.ports[0].ipv4, vec![Ipv4Addr::new(192, 0, 2, 1)]);
    assert_eq!(c.dpdk.mbufs, 16383);
    assert_eq!(c.lcores.idle_sleep_us, 50);
    assert_eq!(c.lcores.idle_wait_ms, 10);
    assert_eq!(
        c.eal_argv(&["--x".into()]),
        vec!["fastpathd", "-l", "0,1", "--no-huge", "--vdev=net_null0", "--x"]
    );
    assert_eq!(c.rx_assignment(), vec![vec![(0, 0)]]);
}

#[test]
fn idle_wait_ms_is_at_most_100_and_0_is_allowed() {
    let with = |v: &str| GOOD.replace("workers = [1]", &format!("workers = [1]\nidle_wait_ms = {v}"));
    assert_eq!(parse(&with("0"), "t.toml").unwrap().lcores.idle_wait_ms, 0);
    assert_eq!(parse(&with("100"), "t.toml").unwrap().lcores.idle_wait_ms, 100);
    let e = errors(&with("101"));
    assert_eq!(e.len(), 1, "{e:#?}");
    assert_eq!(
        (e[0].line, e[0].key.as_str()),
        (Some(15), "lcores.idle_wait_ms"),
        "{e:#?}"
    );
}

#[test]
fn unknown_key_names_key_and_line() {
    let e = errors(&GOOD.replace("rx_queues = 1", "rx_queue = 1"));
    assert_eq!(e.len(), 1);
    assert_eq!(e[0].line, Some(7));
    assert!(e[0].message.contains("unknown field `rx_queue`"), "{:?}", e[0]);
    assert!(e[0].key.starts_with("port[0]"), "{:?}", e[0]);
}

#[test]
fn type_errors_unknown_keys_and_meaning_errors_are_all_reported_at_once() {
    let bad = GOOD
        .replace("rx_queues = 1", "rx_queue = 1\nrx_queues = 1")
        .replace("tx_queues = 2", "tx_queues = \"two\"")
        .replace("\"192.0.2.1\"", "\"192.0.2.300\"")
        .replace("workers = [1]", "workers = [1]\nidle_sleep_us = -5\nmode = \"fast\"")
        + "\n[icmp]\nburst = true\nbrust = 3\n";
    let e = errors(&bad);
    let got: Vec<(Option<usize>, &str)> = e.iter().map(|e| (e.line, e.key.as_str())).collect();
    assert_eq!(
        got,
        vec![
            (Some(7), "port[0].rx_queue"),
            (Some(9), "port[0].tx_queues"),
            (Some(10), "port[0].ipv4[0]"),
            (Some(16), "lcores.idle_sleep_us"),
            (Some(17), "lcores.mode"),
            (Some(20), "icmp.burst"),
            (Some(21), "icmp.brust"),
        ],
        "{e:#?}"
    );
    assert!(e[0].message.contains("unknown field `rx_queue`") && e[0].message.contains("known keys here"));
    assert!(e[1].message.contains("invalid type"), "{:?}", e[1]);
    // In words, not Rust's type names.
    assert!(
        !e[1].message.contains("expected u") && !e[1].message.contains("expected i64"),
        "{:?}",
        e[1]
    );
    assert!(
        e[1].message.contains("whole number") || e[1].message.contains("true or false"),
        "{:?}",
        e[1]
    );
    // A missing required key ends the reading of the sections; what was found is still listed.
    let e = errors(
        &GOOD
            .replace("device = \"net_null0\"", "")
            .replace("tx_queues = 2", "tx_queues = \"two\""),
    );
    assert!(e.iter().any(|e| e.message.contains("missing field `device`")), "{e:#?}");
    assert!(e.iter().any(|e| e.key == "port[0].tx_queues"), "{e:#?}");
}

#[test]
fn wrong_type_names_key_and_line() {
    let e = errors(&GOOD.replace("tx_queues = 2", "tx_queues = \"two\""));
    assert_eq!(e[0].key, "port[0].tx_queues");
    assert_eq!(e[0].line, Some(8));
}

#[test]
fn every_semantic_error_is_reported_with_its_line() {
    let bad = GOOD
        .replace("tx_queues = 2", "tx_queues = 1")
        .replace("\"192.0.2.1\"", "\"192.0.2.300\"")
        .replace("workers = [1]", "workers = [0]")
        .replace("\"--vdev=net_null0\"", "\"--vdev=net_null0\", \"-l\", \"0\"");
    let e = errors(&bad);
    let msgs: Vec<String> = e.iter().map(|e| format!("{:?}:{}", e.line, e.key)).collect();
    assert!(msgs.contains(&"Some(3):dpdk.eal_args[2]".to_string()), "{msgs:?}");
    assert!(
        msgs.contains(&"Some(8):port[0].tx_queues".to_string()) || msgs.iter().any(|m| m.ends_with("tx_queues")),
        "{msgs:?}"
    );
    assert!(msgs.contains(&"Some(9):port[0].ipv4[0]".to_string()), "{msgs:?}");
    assert!(msgs.contains(&"Some(14):lcores.workers[0]".to_string()), "{msgs:?}");
    let text = ConfigErrors {
        file: "t.toml".into(),
        errors: e,
    }
    .to_string();
    assert!(
        text.contains("t.toml:9: port[0].ipv4[0]: \"192.0.2.300\": expected an IPv4 address"),
        "{text}"
    );
}

/// `[icmp]` values the limiter cannot take are refused with their key, line and the range.
#[test]
fn icmp_peer_limits_name_key_line_and_range() {
    let base = GOOD.lines().count() + 1;
    for (text, key, message) in [
        (
            "peer_table_size = 1000",
            "icmp.peer_table_size",
            "1000 is not a power of two between 1 and 1048576",
        ),
        (
            "peer_table_size = 0",
            "icmp.peer_table_size",
            "0 is not a power of two between 1 and 1048576",
        ),
        (
            "peer_table_size = 2097152",
            "icmp.peer_table_size",
            "2097152 is not a power of two between 1 and 1048576",
        ),
        ("peer_burst = 0", "icmp.peer_burst", "0 is not between 1 and 10000"),
        (
            "peer_burst = 10001",
            "icmp.peer_burst",
            "10001 is not between 1 and 10000",
        ),
        (
            "peer_interval_ms = 3600001",
            "icmp.peer_interval_ms",
            "3600001 is more than 3600000",
        ),
    ] {
        let e = errors(&format!("{GOOD}\n[icmp]\n{text}\n"));
        assert_eq!(e.len(), 1, "{text}: {e:?}");
        let got = (e[0].key.as_str(), e[0].line, e[0].message.as_str());
        assert_eq!(got, (key, Some(base + 2), message), "{text}");
    }
}

/// `[tcp_reset]` values the limiter cannot take are refused with their key and line; a good
/// section is read as written.
#[test]
fn tcp_reset_errors_name_key_and_line() {
    let base = GOOD.lines().count() + 1;
    for (text, key) in [
        ("peer_table_size = 3", "tcp_reset.peer_table_size"),
        ("peer_burst = 0", "tcp_reset.peer_burst"),
        ("peer_interval_ms = 3600001", "tcp_reset.peer_interval_ms"),
    ] {
        let e = errors(&format!("{GOOD}\n[tcp_reset]\n{text}\n"));
        assert_eq!(e.len(), 1, "{text}: {e:?}");
        assert_eq!((e[0].key.as_str(), e[0].line), (key, Some(base + 2)), "{text}");
    }
    let c = parse(
        &format!("{GOOD}\n[tcp_reset]\nenabled = false\nmsgs_per_sec = 7\npeer_burst = 2\n"),
        "t.toml",
    )
    .unwrap();
    assert_eq!(
        (c.tcp_reset.enabled, c.tcp_reset.msgs_per_sec, c.tcp_reset.peer_burst),
        (false, 7, 2)
    );
}

/// `[conntrack]`: each out-of-range value named with its key and line; 0 entries turns the table
/// off; the defaults when the section is absent.
#[test]
fn conntrack_errors_name_key_and_line() {
    let base = GOOD.lines().count() + 1;
    for (text, key) in [
        ("entries = 100", "conntrack.entries"),
        ("entries = -1", "conntrack.entries"),
        ("tcp_timeout_s = 0", "conntrack.tcp_timeout_s"),
        ("tcp_closing_timeout_s = 86401", "conntrack.tcp_closing_timeout_s"),
        ("udp_timeout_s = 0", "conntrack.udp_timeout_s"),
        ("unconfirmed_timeout_s = 601", "conntrack.unconfirmed_timeout_s"),
        ("icmp_per_sec = -5", "conntrack.icmp_per_sec"),
    ] {
        let e = errors(&format!("{GOOD}\n[conntrack]\n{text}\n"));
        assert_eq!(e.len(), 1, "{text}: {e:?}");
        assert_eq!((e[0].key.as_str(), e[0].line), (key, Some(base + 2)), "{text}");
    }
    let e = errors(&format!("{GOOD}\n[conntrack]\nentries_per_lcore = 5\n"));
    assert_eq!(e.len(), 1, "an unknown key: {e:?}");
    let c = parse(
        &format!("{GOOD}\n[conntrack]\nentries = 0\ntcp_timeout_s = 60\n"),
        "t.toml",
    )
    .unwrap();
    assert_eq!((c.conntrack.entries, c.conntrack.tcp_timeout_s), (0, 60));
    let d = parse(GOOD, "t.toml").unwrap();
    assert_eq!(d.conntrack, fastpath::pipeline::conntrack::ConntrackConfig::default());
}

#[test]
fn too_few_tx_queues_for_lcores() {
    let e = errors(&GOOD.replace("tx_queues = 2", "tx_queues = 1"));
    assert_eq!(e.len(), 1);
    assert_eq!(e[0].key, "port[0].tx_queues");
    assert_eq!(e[0].line, Some(8));
    assert!(e[0].message.contains("own TX queue"));
}

#[test]
fn mode_defaults_to_pipeline_and_forward_to_names_a_port() {
    let c = parse(GOOD, "t.toml").unwrap();
    assert_eq!(c.lcores.mode, LcoreMode::Pipeline);
    assert_eq!(c.ports[0].forward_to, None);
    let two = GOOD
        .replace("\"--vdev=net_null0\"", "\"--vdev=net_null0\", \"--vdev=net_null1\"")
        .replace(
            "ipv6 = [\"2001:db8::1\"]\n",
            "ipv6 = [\"2001:db8::1\"]\nforward_to = \"net_null1\"\n",
        )
        .replace(
            "[lcores]\n",
            "[[port]]\ndevice = \"net_null1\"\ntx_queues = 2\n\n[lcores]\nmode = \"forward\"\n",
        );
    let c = parse(&two, "t.toml").unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(c.lcores.mode, LcoreMode::Forward);
    assert_eq!(c.ports[0].forward_to, Some(1));
    assert_eq!(c.ports[1].forward_to, None);

    // forward_to without forward mode, and to a device that is no [[port]].
    let e = errors(
        &two.replace("mode = \"forward\"\n", "")
            .replace("forward_to = \"net_null1\"", "forward_to = \"net_null9\""),
    );
    let keys: Vec<_> = e.iter().map(|e| (e.key.as_str(), e.line)).collect();
    assert_eq!(
        keys,
        vec![("port[0].forward_to", Some(11)), ("port[0].forward_to", Some(11))],
        "{e:?}"
    );
    assert!(e[0].message.contains("mode = \"forward\"") || e[1].message.contains("mode = \"forward\""));
}

#[test]
fn unknown_mode_names_key_and_line() {
    let e = errors(&GOOD.replace("workers = [1]", "workers = [1]\nmode = \"turbo\""));
    assert_eq!(e.len(), 1, "{e:?}");
    assert_eq!(e[0].key, "lcores.mode");
    assert_eq!(e[0].line, Some(15));
    assert!(e[0].message.contains("expected \"pipeline\" or \"forward\""), "{e:?}");
}

#[test]
fn mempool_ops_defaults_to_a_stack_and_names_key_and_line() {
    let c = parse(GOOD, "t.toml").unwrap();
    assert_eq!(c.dpdk.mempool_ops, "stack");
    let with = |v: &str| GOOD.replace("[dpdk]\n", &format!("[dpdk]\nmempool_ops = \"{v}\"\n"));
    assert_eq!(
        parse(&with("ring_mp_mc"), "t.toml").unwrap().dpdk.mempool_ops,
        "ring_mp_mc"
    );
    let e = errors(&with("heap"));
    assert_eq!(e.len(), 1, "{e:?}");
    assert_eq!((e[0].key.as_str(), e[0].line), ("dpdk.mempool_ops", Some(3)));
    assert!(
        e[0].message
            .contains("\"heap\": expected one of stack, lf_stack, ring_mp_mc"),
        "{e:?}"
    );
    let e = errors(&with("ring_sp_sc"));
    assert_eq!(e[0].key, "dpdk.mempool_ops", "a single-producer pool is refused: {e:?}");
    let b = parse(&with("ring_mp_mc"), "t.toml").unwrap();
    assert_eq!(c.restart_only_changes(&b), vec!["dpdk.mempool_ops"]);
}

#[test]
fn missing_sections() {
    let e = errors("[dpdk]\n");
    assert!(e[0].message.contains("missing field `lcores`"), "{e:?}");
    let e = errors("[dpdk]\n[lcores]\nrx = [0]\n");
    assert_eq!(e[0].key, "port");
}

#[test]
fn metrics_listen() {
    let c = parse(GOOD, "t.toml").unwrap();
    assert_eq!(c.metrics.listen, Some("127.0.0.1:9464".parse().unwrap()));
    let c = parse(&format!("{GOOD}\n[metrics]\nlisten = \"[::1]:0\"\n"), "t.toml").unwrap();
    assert_eq!(c.metrics.listen, Some("[::1]:0".parse().unwrap()));
    let c = parse(&format!("{GOOD}\n[metrics]\nenabled = false\n"), "t.toml").unwrap();
    assert_eq!(c.metrics.listen, None);
    let e = errors(&format!("{GOOD}\n[metrics]\nlisten = \"localhost\"\n"));
    assert_eq!((e[0].key.as_str(), e[0].line), ("metrics.listen", Some(17)));
}

#[test]
fn metrics_cache_and_connection_cap() {
    let c = parse(GOOD, "t.toml").unwrap();
    assert_eq!(c.metrics.cache, std::time::Duration::from_millis(500));
    assert_eq!(c.metrics.max_connections, 16);
    let c = parse(
        &format!("{GOOD}\n[metrics]\ncache_ms = 0\nmax_connections = 1\n"),
        "t.toml",
    )
    .unwrap();
    assert_eq!(
        (c.metrics.cache, c.metrics.max_connections),
        (std::time::Duration::ZERO, 1)
    );
    let e = errors(&format!("{GOOD}\n[metrics]\ncache_ms = 60001\n"));
    assert_eq!((e[0].key.as_str(), e[0].line), ("metrics.cache_ms", Some(17)));
    assert!(e[0].message.contains("0 to 60000"), "{}", e[0].message);
    let e = errors(&format!("{GOOD}\n[metrics]\nmax_connections = 0\n"));
    assert_eq!((e[0].key.as_str(), e[0].line), ("metrics.max_connections", Some(17)));
}

#[test]
fn rss_key() {
    let c = parse(GOOD, "t.toml").unwrap();
    assert_eq!(c.rss.key.as_bytes()[..4], [0x6d, 0x5a, 0x56, 0xda]);
    assert_eq!(c.rss.source, KeySource::Default);
    let k = "6d:5a".repeat(20);
    let c = parse(&format!("{GOOD}\n[rss]\nkey = \"{k}\"\nsymmetric = true\n"), "t.toml").unwrap();
    assert_eq!(c.rss.key.as_bytes(), &[0x6d, 0x5a].repeat(20)[..]);
    assert!(c.rss.symmetric);
    let e = errors(&format!("{GOOD}\n[rss]\nkey = \"6d5a\"\n"));
    assert_eq!((e[0].key.as_str(), e[0].line), ("rss.key", Some(17)));
}

const SERVICE: &str =
    "\n[[service]]\nname = \"echo\"\nports = [7]\nsockets = 4\nsocket_capacity = 256\naction = \"echo\"\n";

#[test]
fn services() {
    let c = parse(&format!("{GOOD}{SERVICE}"), "t.toml").unwrap();
    let s = &c.services[0];
    assert_eq!(
        (s.name.as_str(), s.ports.as_slice(), s.sockets, s.socket_capacity),
        ("echo", &[7u16][..], 4, 256)
    );
    assert!(s.rollover);
    assert_eq!(s.fanout, fastpath::pipeline::FanoutMode::Hash);
}

#[test]
fn bad_services_are_rejected_naming_the_service() {
    let cases = [
        (
            "sockets = 4",
            "sockets = 0",
            "service[0].sockets",
            "service \"echo\": 0 sockets",
        ),
        (
            "socket_capacity = 256",
            "socket_capacity = 100000",
            "service[0].socket_capacity",
            "more than the whole mbuf pool",
        ),
        (
            "socket_capacity = 256",
            "socket_capacity = 0",
            "service[0].socket_capacity",
            "a socket ring holds",
        ),
        (
            "action = \"echo\"",
            "action = \"mirror\"",
            "service[0].action",
            "unknown action \"mirror\"",
        ),
        (
            "name = \"echo\"\n",
            "name = \"echo\"\nprotocol = \"tcp\"\n",
            "service[0].action",
            "UDP echo server",
        ),
    ];
    for (from, to, key, msg) in cases {
        let e = errors(&format!("{GOOD}{}", SERVICE.replace(from, to)));
        assert!(e.iter().any(|e| e.key == key && e.message.contains(msg)), "{to}: {e:?}");
    }
    let dup = format!(
        "{GOOD}{SERVICE}{}",
        SERVICE.replace("\"echo\"\nports", "\"other\"\nports")
    );
    let e = errors(&dup);
    assert!(
        e.iter()
            .any(|e| e.key == "service[1].ports[0]" && e.message.contains("already belongs to service \"echo\"")),
        "{e:?}"
    );
    // One port, two services: allowed when each is bound to addresses of its own (an IPv4 and
    // an IPv6 service address with their own backends), refused when either listens on every
    // address or they share one.
    let bound = |name: &str, addrs: &str| {
        SERVICE
            .replace("\"echo\"\nports", &format!("\"{name}\"\nports"))
            .replace("ports = [7]", &format!("ports = [7]\naddresses = [{addrs}]"))
    };
    let c = parse(
        &format!(
            "{GOOD}{}{}",
            bound("echo", "\"192.0.2.1\""),
            bound("echo6", "\"2001:db8::1\"")
        ),
        "t.toml",
    )
    .unwrap();
    assert_eq!(c.services[1].ports, [7]);
    for second in [
        SERVICE.replace("\"echo\"\nports", "\"other\"\nports"),
        bound("other", "\"2001:db8::1\", \"192.0.2.1\""),
    ] {
        let e = errors(&format!("{GOOD}{}{second}", bound("echo", "\"192.0.2.1\"")));
        assert!(
            e.iter().any(|e| e.key == "service[1].ports[0]"
                && e.message
                    .contains("already belongs to service \"echo\" (services share a port only")),
            "{second}: {e:?}"
        );
    }
    let no_workers = format!(
        "{}{SERVICE}",
        GOOD.replace("workers = [1]", "workers = []")
            .replace("tx_queues = 2", "tx_queues = 1")
    );
    assert!(errors(&no_workers).iter().any(|e| e.key == "lcores.workers"));
}

#[test]
fn flow_limit_table_len_is_checked() {
    let c = parse(GOOD, "t.toml").unwrap();
    assert_eq!(c.flow_limit.for_slot(0), Some(4096));
    for bad in ["0", "1000", "2097152", "-4"] {
        let e = errors(&format!("{GOOD}\n[flow_limit]\ntable_len = {bad}\n"));
        assert_eq!(
            (e[0].key.as_str(), e[0].line),
            ("flow_limit.table_len", Some(17)),
            "{bad}"
        );
        assert!(e[0].message.contains("power of two"));
    }
    let c = parse(
        &format!("{GOOD}\n[flow_limit]\ntable_len = 1048576\nlcores = [0]\n"),
        "t.toml",
    )
    .unwrap();
    assert_eq!(c.flow_limit.for_slot(0), Some(1 << 20));
    let e = errors(&format!("{GOOD}\n[flow_limit]\nlcores = [1]\n"));
    assert_eq!(e[0].key, "flow_limit.lcores[0]");
    let c = parse(&format!("{GOOD}\n[flow_limit]\nenabled = false\n"), "t.toml").unwrap();
    assert_eq!(c.flow_limit.for_slot(0), None);
}

fn tunnel(name: &str, out: &str) -> String {
    format!("\n[[tunnel]]\nname = \"{name}\"\nlocal = \"192.0.2.1\"\nremote = \"198.51.100.2\"\n{out}\n")
}

#[test]
fn tunnels_nest_to_depth_three_and_loops_are_refused() {
    let port = "port = \"net_null0\"\nnext_hop_mac = \"02:00:00:00:00:fe\"";
    let ok = format!(
        "{GOOD}{}{}{}",
        tunnel("a", port),
        tunnel("b", "via = \"a\""),
        tunnel("c", "via = \"b\"")
    );
    let c = parse(&ok, "t.toml").unwrap();
    assert_eq!(c.tunnels.iter().map(|t| t.depth).collect::<Vec<_>>(), vec![1, 2, 3]);
    assert_eq!(c.tunnels[2].via, TunnelVia::Tunnel(1));

    let deep = format!("{ok}{}", tunnel("d", "via = \"c\""));
    let e = errors(&deep);
    assert!(
        e.iter()
            .any(|e| e.key == "tunnel[3].via" && e.message.contains("at most 3")),
        "{e:?}"
    );

    let looped = format!("{GOOD}{}{}", tunnel("a", "via = \"b\""), tunnel("b", "via = \"a\""));
    let e = errors(&looped);
    assert!(
        e.iter()
            .any(|e| e.key == "tunnel[0].via" && e.message.contains("loop: a -> b -> a")),
        "{e:?}"
    );
    let selfish = format!("{GOOD}{}", tunnel("a", "via = \"a\""));
    assert!(errors(&selfish)
        .iter()
        .any(|e| e.message.contains("carried through itself")));

    let e = errors(&format!("{GOOD}{}", tunnel("a", "port = \"nope\"")));
    assert!(e.iter().any(|e| e.key == "tunnel[0].port"), "{e:?}");
    assert!(e.iter().any(|e| e.key == "tunnel[0].next_hop_mac"), "{e:?}");
    let e = errors(&format!("{GOOD}{}", tunnel("a", "")));
    assert!(e.iter().any(|e| e.message.contains("exactly one of port")), "{e:?}");
}

#[test]
fn tunnel_actions_name_existing_tunnels() {
    let port = "port = \"net_null0\"\nnext_hop_mac = \"02:00:00:00:00:fe\"";
    let svc = SERVICE.replace("action = \"echo\"", "action = \"tunnel\"\ntunnels = [\"a\", \"zz\"]");
    let e = errors(&format!("{GOOD}{}{svc}", tunnel("a", port)));
    assert!(
        e.iter()
            .any(|e| e.key == "service[0].tunnels[1]" && e.message.contains("\"zz\"")),
        "{e:?}"
    );
    let svc = SERVICE.replace("action = \"echo\"", "action = \"tunnel\"\ntunnel = \"a\"");
    let c = parse(&format!("{GOOD}{}{svc}", tunnel("a", port)), "t.toml").unwrap();
    match &c.services[0].action {
        fastpath::pipeline::Action::Tunnel(b) => assert_eq!(b.tunnels, vec![0]),
        other => panic!("{other:?}"),
    }
}

#[test]
fn reload_classifies_changes() {
    let a = parse(GOOD, "t.toml").unwrap();
    let b = parse(
        &GOOD.replace("[\"192.0.2.1\"]", "[\"192.0.2.1\", \"192.0.2.5\"]"),
        "t.toml",
    )
    .unwrap();
    assert!(a.restart_only_changes(&b).is_empty());
    assert_eq!(a.describe_changes(&b).len(), 1);
    let c = parse(
        &GOOD
            .replace("rx_queues = 1", "rx_queues = 2")
            .replace("workers = [1]", "workers = [2]"),
        "t.toml",
    )
    .unwrap();
    assert_eq!(a.restart_only_changes(&c), vec!["port[0].rx_queues", "lcores.workers"]);
}

#[test]
fn every_shipped_config_is_valid() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../configs");
    let mut n = 0;
    for entry in std::fs::read_dir(&dir).unwrap() {
        let p = entry.unwrap().path();
        if p.extension().is_some_and(|e| e == "toml") {
            load(&p).unwrap_or_else(|e| panic!("{e}"));
            n += 1;
        }
    }
    assert!(n >= 1, "no config in {}", dir.display());
    // The package's /etc/fastpathd/fastpathd.toml.
    load(&dir.join("../packaging/fastpathd.toml")).unwrap_or_else(|e| panic!("{e}"));
}

#[test]
fn a_sequence_jump_bound_must_stay_below_half_the_number_space() {
    let port = "port = \"net_null0\"\nnext_hop_mac = \"02:00:00:00:00:fe\"";
    for (v, ok) in [
        ("1", true),
        ("65536", true),
        ("2147483647", true),
        ("0", false),
        ("2147483648", false),
    ] {
        let cfg = format!(
            "{GOOD}{}",
            tunnel("s", &format!("{port}\nsequence = true\nmax_seq_jump = {v}"))
        );
        match parse(&cfg, "t.toml") {
            Ok(c) => assert!(ok, "{v} accepted: {:?}", c.tunnels[0].max_seq_jump),
            Err(e) => {
                assert!(!ok, "{v} refused: {e}");
                assert!(e.errors.iter().any(|e| e.key == "tunnel[0].max_seq_jump"), "{v}: {e}");
            }
        }
    }
}

#[test]
fn virtio_user_on_hugepages_gets_single_file_segments() {
    let args = |s: &str| s.split_whitespace().map(String::from).collect::<Vec<_>>();
    let vu = "--vdev=net_virtio_user0,path=/tmp/v.sock,server=1";
    assert_eq!(
        virtio_user_memory(&args(&format!("-m 256 {vu}"))),
        Ok(Some("--single-file-segments"))
    );
    assert_eq!(
        virtio_user_memory(&args(&format!("--vdev {}", &vu[7..]))),
        Ok(Some("--single-file-segments"))
    );
    for fine in ["--no-huge", "--single-file-segments", "--huge-unlink=never"] {
        let want = if fine.contains("never") {
            Some("--single-file-segments")
        } else {
            None
        };
        assert_eq!(virtio_user_memory(&args(&format!("{fine} {vu}"))), Ok(want), "{fine}");
    }
    assert_eq!(virtio_user_memory(&args("-m 256 --vdev=net_tap0")), Ok(None));
    for bad in ["--legacy-mem", "--huge-unlink", "--huge-unlink=always"] {
        let e = virtio_user_memory(&args(&format!("{vu} {bad}"))).unwrap_err();
        assert_eq!(e.0, 1, "{bad}");
        assert!(e.1.contains("--single-file-segments") && e.1.contains(bad), "{e:?}");
    }
    // In a config: refused with the key and line of the argument.
    let e = errors(&GOOD.replace(
        "\"--no-huge\", \"--vdev=net_null0\"",
        &format!("\"--legacy-mem\", \"{vu}\""),
    ));
    assert_eq!(e.len(), 1, "{e:?}");
    assert_eq!((e[0].key.as_str(), e[0].line), ("dpdk.eal_args[0]", Some(3)));
}

#[test]
fn held_fragments_are_charged_the_packet_buffers_real_size() {
    let c = parse(GOOD, "t.toml").unwrap();
    assert_eq!(
        c.reassembly.buffer_truesize,
        fastpath::pipeline::reasm::DEFAULT_TRUESIZE
    );
    let c = parse(&GOOD.replace("rx_queues = 1", "rx_queues = 1\nmtu = 9000"), "t.toml").unwrap();
    assert_eq!(c.reassembly.buffer_truesize, 128 + 9000 + 26 + 128);
}

/// `[lcores] cpus`: DPDK's `--lcores` syntax places lcores on CPUs; several lcores on one CPU
/// is a warning; a CPU the machine lacks is refused by the machine check.
#[test]
fn lcore_cpus_place_lcores_and_reach_the_eal() {
    let four = GOOD
        .replace("eal_args = [", "mbufs = 32767\neal_args = [")
        .replace("rx_queues = 1", "rx_queues = 4")
        .replace("tx_queues = 2", "tx_queues = 6")
        .replace("rx = [0]", "rx = [0, 1, 2, 3]")
        .replace("workers = [1]", "workers = [4, 5]\ncpus = \"(0,1)@0,2-3@1,4@(0-1),5\"");
    let l = parse_checked(&four, "t.toml").expect("valid");
    let c = &l.config;
    let want: Vec<(u32, Vec<u32>)> = vec![
        (0, vec![0]),
        (1, vec![0]),
        (2, vec![1]),
        (3, vec![1]),
        (4, vec![0, 1]),
        (5, vec![5]),
    ];
    assert_eq!(c.lcores.placement.clone().into_iter().collect::<Vec<_>>(), want);
    assert_eq!(&c.eal_argv(&[])[1..3], ["--lcores", "0@0,1@0,2@1,3@1,4@(0,1),5@5"]);
    assert_eq!(c.lcores.cpus_of(&c.lcores.rx), vec![0, 1]);
    assert_eq!(c.lcores.cpus_of(&c.lcores.workers), vec![0, 1, 5]);
    let w = l.warnings.to_string();
    assert!(w.contains("lcores [0, 1, 4] share CPU 0"), "{w}");
    assert!(w.contains("lcores [2, 3, 4] share CPU 1"), "{w}");
    assert!(
        l.warnings
            .errors
            .iter()
            .all(|e| e.key == "lcores.cpus" && e.line == Some(16)),
        "{w}"
    );
    // On a machine with CPUs 0 and 1 only, lcore 5 cannot run.
    let e = check_machine(c, &[], &four, "t.toml", &cpus(&[0, 1])).unwrap_err();
    assert_eq!(e.errors.len(), 1, "{e}");
    assert_eq!((e.errors[0].key.as_str(), e.errors[0].line), ("lcores.cpus", Some(16)));
    assert!(e.errors[0].message.contains("lcore 5 would run on CPU(s) [5]"), "{e}");
    assert!(check_machine(c, &[], &four, "t.toml", &cpus(&[0, 1, 5])).is_ok());
    // Without `cpus`, lcore N runs on CPU N: the check names lcores.rx.
    let plain = parse(&GOOD.replace("workers = [1]", "workers = [3]"), "t.toml").unwrap();
    let src = GOOD.replace("workers = [1]", "workers = [3]");
    let e = check_machine(&plain, &[], &src, "t.toml", &cpus(&[0, 1])).unwrap_err();
    assert_eq!(e.errors[0].key, "lcores.rx", "{e}");
    assert!(parse_checked(GOOD, "t.toml").unwrap().warnings.errors.is_empty());
}

/// A NIC on NUMA node 1 polled by an RX lcore on node 0: a warning on that lcore's entry, from
/// sysfs (`--check-config`, before any EAL); its lcore on node 1 is fine.
#[test]
fn an_rx_lcore_on_another_numa_node_than_its_port_is_warned_of() {
    let sys = std::env::temp_dir().join(format!("fp-numa-check-{}", std::process::id()));
    for (n, list) in [(0, "0-3"), (1, "4-7")] {
        let d = sys.join(format!("devices/system/node/node{n}"));
        std::fs::create_dir_all(&d).unwrap();
        std::fs::write(d.join("cpulist"), format!("{list}\n")).unwrap();
    }
    let nic = sys.join("bus/pci/devices/0000:3b:00.0");
    std::fs::create_dir_all(&nic).unwrap();
    std::fs::create_dir_all(sys.join("bus/pci/drivers/vfio-pci")).unwrap();
    std::os::unix::fs::symlink(sys.join("bus/pci/drivers/vfio-pci"), nic.join("driver")).unwrap();
    std::fs::write(nic.join("numa_node"), "1\n").unwrap();
    let src = GOOD
        .replace(
            "\"--no-huge\", \"--vdev=net_null0\"",
            "\"--no-huge\", \"-a\", \"0000:3b:00.0\"",
        )
        .replace(
            "device = \"net_null0\"\nrx_queues = 1\ntx_queues = 2",
            "device = \"0000:3b:00.0\"\nrx_queues = 2\ntx_queues = 3",
        )
        .replace("rx = [0]\nworkers = [1]", "rx = [0, 4]\nworkers = [5]");
    let c = parse(&src, "t.toml").expect("valid");
    let m = Machine {
        sys: sys.clone(),
        ..cpus(&(0..8).collect::<Vec<_>>())
    };
    let (_, w) = check_machine(&c, &[], &src, "t.toml", &m).expect("fits");
    assert_eq!(w.errors.len(), 1, "{w}");
    assert_eq!((w.errors[0].key.as_str(), w.errors[0].line), ("lcores.rx[0]", Some(13)));
    assert!(
        w.errors[0]
            .message
            .contains("RX lcore 0 (NUMA socket 0) polls queue 0 of port[0] 0000:3b:00.0 (socket 1)"),
        "{w}"
    );
    // Both RX lcores on node 1: nothing to say.
    let both = src.replace("rx = [0, 4]\nworkers = [5]", "rx = [6, 4]\nworkers = [5]");
    let c = parse(&both, "t.toml").expect("valid");
    let (_, w) = check_machine(&c, &[], &both, "t.toml", &m).expect("fits");
    assert!(w.errors.is_empty(), "{w}");
    // Without NUMA information in sysfs it is said to be unchecked.
    let flat = Machine {
        sys: std::path::PathBuf::from("/nonexistent"),
        ..m.clone()
    };
    let c = parse(GOOD, "t.toml").unwrap();
    let (unchecked, _) = check_machine(&c, &[], GOOD, "t.toml", &flat).expect("fits");
    assert!(unchecked.iter().any(|u| u.contains("NUMA placement")), "{unchecked:?}");
    std::fs::remove_dir_all(&sys).unwrap();
}

#[test]
fn bad_lcore_cpus_are_refused_with_key_and_line() {
    for (cpus, why) in [
        ("0@0,", "trailing comma"),
        ("0@x", "\"x\" is not a number"),
        ("(0,1@0", "unclosed"),
        ("3-1@0", "bad range"),
        ("0@0;1@1", "not a number"),
        ("0@0,0@1", "placed twice"),
        ("0@2000", "CPU 2000"),
        ("", "empty"),
    ] {
        let src = GOOD.replace("workers = [1]", &format!("workers = [1]\ncpus = {cpus:?}"));
        let e = errors(&src);
        assert_eq!(e.len(), 1, "{cpus:?}: {e:?}");
        assert_eq!((e[0].key.as_str(), e[0].line), ("lcores.cpus", Some(15)), "{cpus:?}");
        assert!(e[0].message.contains(why), "{cpus:?}: {}", e[0].message);
    }
    // An lcore without a role: warned, ignored.
    let src = GOOD.replace("workers = [1]", "workers = [1]\ncpus = \"0@0,1@1,7@1\"");
    let l = parse_checked(&src, "t.toml").unwrap();
    assert!(l.warnings.to_string().contains("lcore 7 has no role"), "{}", l.warnings);
    assert_eq!(&l.config.eal_argv(&[])[1..3], ["--lcores", "0@0,1@1"]);
}

#[test]
fn the_kernel_path_config_and_its_errors_with_keys_and_lines() {
    let with = GOOD
        .replace(
            "ipv4 = [\"192.0.2.1\"]",
            "ipv4 = [\"192.0.2.1/24\"]\nkernel_interface = \"fp0\"",
        )
        .replace("ipv6 = [\"2001:db8::1\"]", "ipv6 = [\"2001:db8::1/64\"]");
    let c = parse(&with, "t.toml").unwrap();
    assert_eq!(c.ports[0].kernel_interface.as_deref(), Some("fp0"));
    assert_eq!(
        (c.ports[0].ipv4_prefix.clone(), c.ports[0].ipv6_prefix.clone()),
        (vec![24], vec![64])
    );
    assert_eq!(c.ports[0].ipv4, vec![Ipv4Addr::new(192, 0, 2, 1)]);
    // Default: what no stage handles goes to the kernel.
    assert!(c.kernel.unhandled && c.kernel.ports.is_empty());
    assert_eq!(c.kernel.socket_capacity, 1024);
    // A budget for what is punted, on by default.
    assert_eq!((c.kernel.punt_rate, c.kernel.punt_burst), (10_000, 1_000));
    let c = parse(
        &format!(
            "{with}\n[[service]]\nname = \"dns\"\nports = [53]\naction = \"kernel\"\n\n[kernel]\n\
             punt = [\"tcp:22\", \"udp:5353\"]\nsocket_capacity = 64\npunt_rate = 0\npunt_burst = 7\n"
        ),
        "t.toml",
    )
    .unwrap();
    assert!(!c.kernel.unhandled);
    assert_eq!((c.kernel.punt_rate, c.kernel.punt_burst), (0, 7));
    assert_eq!(
        c.kernel.ports,
        vec![
            (fastpath::wire::IpProtocol::TCP, 22),
            (fastpath::wire::IpProtocol::UDP, 5353)
        ]
    );
    assert_eq!(c.services[0].action, fastpath::pipeline::Action::Kernel);

    // Every problem, with its key and line.
    let bad = format!(
        "{}\n[[service]]\nname = \"kernel\"\nports = [53]\naction = \"sink\"\n\n[kernel]\n\
         punt = [\"tcp:22\", \"udp:53\", \"tcp:0\", \"sctp:9\", \"tcp:22\"]\nsocket_capacity = 0\n\
         punt_rate = -1\npunt_burst = 0\n",
        with.replace("\"fp0\"", "\"a/b\"")
    );
    let e = errors(&bad);
    let got: Vec<(&str, Option<usize>)> = e.iter().map(|e| (e.key.as_str(), e.line)).collect();
    assert_eq!(
        got,
        vec![
            ("port[0].kernel_interface", Some(10)),
            ("service[0].name", Some(18)),
            ("kernel.punt[1]", Some(23)),
            ("kernel.punt[2]", Some(23)),
            ("kernel.punt[3]", Some(23)),
            ("kernel.punt[4]", Some(23)),
            ("kernel.socket_capacity", Some(24)),
            ("kernel.punt_rate", Some(25)),
            ("kernel.punt_burst", Some(26)),
        ],
        "{e:#?}"
    );
    assert!(
        e[2].message.contains("belongs to service \"kernel\""),
        "{}",
        e[2].message
    );
    // [kernel] with no kernel interface; a kernel service on a port without one; a kernel
    // interface without workers.
    let e = errors(&format!("{GOOD}\n[kernel]\npunt = [\"unhandled\"]\n"));
    assert_eq!((e[0].key.as_str(), e[0].line), ("kernel", Some(16)));
    let e = errors(&format!(
        "{GOOD}\n[[service]]\nname = \"k\"\nports = [53]\naction = \"kernel\"\n"
    ));
    assert_eq!(e[0].key, "service[0].action");
    assert!(e[0].message.contains("has no kernel_interface"), "{}", e[0].message);
    let e = errors(&with.replace("workers = [1]", "workers = []"));
    assert!(
        e.iter()
            .any(|e| e.key == "lcores.workers" && e.message.contains("kernel_interface")),
        "{e:#?}"
    );
    // A prefix length out of range.
    let e = errors(&GOOD.replace("\"192.0.2.1\"", "\"192.0.2.1/33\""));
    assert_eq!((e[0].key.as_str(), e[0].line), ("port[0].ipv4[0]", Some(9)));
}

#[test]
fn reassembly_policy_defaults_to_probation_and_names_key_and_line() {
    use fastpath::pipeline::reasm::Policy;
    assert_eq!(parse(GOOD, "t.toml").unwrap().reassembly.policy, Policy::Probation);
    let linux = format!("{GOOD}\n[reassembly]\npolicy = \"linux\"\n");
    assert_eq!(parse(&linux, "t.toml").unwrap().reassembly.policy, Policy::Linux);
    let bad = format!("{GOOD}\n[reassembly]\npolicy = \"lru\"\n");
    let e = errors(&bad);
    assert_eq!(e.len(), 1, "{e:?}");
    let line = bad.lines().position(|l| l.starts_with("policy")).unwrap() + 1;
    assert_eq!((e[0].key.as_str(), e[0].line), ("reassembly.policy", Some(line)));
    assert!(
        e[0].message.contains("expected one of \"probation\", \"linux\""),
        "{e:?}"
    );
}

#[test]
fn port_addresses_must_be_a_hosts() {
    // Loopback, the network and broadcast addresses of the prefix, the Subnet-Router anycast
    // address: accepted, fastpathd would answer for traffic meant for every host, or none.
    for (v4, v6, bad) in [
        ("127.0.0.1/8", "2001:db8::1/64", "cannot be a local unicast address"),
        ("192.0.2.0/24", "2001:db8::1/64", "the network address"),
        ("192.0.2.255/24", "2001:db8::1/64", "the broadcast address"),
        ("192.0.2.1/24", "2001:db8::/64", "Subnet-Router anycast"),
    ] {
        let e = errors(
            &GOOD
                .replace("ipv4 = [\"192.0.2.1\"]", &format!("ipv4 = [\"{v4}\"]"))
                .replace("ipv6 = [\"2001:db8::1\"]", &format!("ipv6 = [\"{v6}\"]")),
        );
        assert_eq!(e.len(), 1, "{v4} {v6}: {e:#?}");
        assert!(e[0].key.starts_with("port[0].ipv"), "{}", e[0].key);
        assert!(e[0].message.contains(bad), "{v4} {v6}: {}", e[0].message);
    }
    // The ends of a /31 (RFC 3021), a /32, a /127 and a /128 are hosts.
    for (v4, v6) in [("192.0.2.0/31", "2001:db8::/127"), ("192.0.2.255/32", "2001:db8::/128")] {
        let c = GOOD
            .replace("ipv4 = [\"192.0.2.1\"]", &format!("ipv4 = [\"{v4}\"]"))
            .replace("ipv6 = [\"2001:db8::1\"]", &format!("ipv6 = [\"{v6}\"]"));
        parse(&c, "t.toml").unwrap();
    }
}

#[test]
fn an_af_packet_port_polls_every_queue_pair() {
    let af = |qpairs: &str, rx: u16| {
        GOOD.replace(
            "\"--vdev=net_null0\"",
            &format!("\"--vdev=net_af_packet0,iface=veth0{qpairs}\""),
        )
        .replace(
            "device = \"net_null0\"\nrx_queues = 1",
            &format!("device = \"net_af_packet0\"\nrx_queues = {rx}"),
        )
    };
    let e = errors(&af(",qpairs=2", 1));
    assert_eq!(e.len(), 1, "{e:#?}");
    assert_eq!((e[0].key.as_str(), e[0].line), ("port[0].rx_queues", Some(7)));
    assert!(e[0].message.contains("qpairs=2"), "{}", e[0].message);
    // qpairs defaults to 1.
    assert_eq!(errors(&af("", 2))[0].key, "port[0].rx_queues");
    parse(&af("", 1), "t.toml").unwrap();
    // Several rings of the default 512 frames: the PMD's fanout rollover reorders flows.
    let w = |args: &str, rx: u16| parse_checked(&af(args, rx), "t.toml").unwrap().warnings.errors;
    let warned = w(",qpairs=2", 2);
    assert_eq!(warned.len(), 1, "{warned:#?}");
    assert_eq!(warned[0].key, "port[0].device");
    assert!(warned[0].message.contains("framecnt=4096"), "{}", warned[0].message);
    assert!(w(",qpairs=2,framecnt=4096", 2).is_empty());
    assert!(w("", 1).is_empty());
}

#[test]
fn an_af_xdp_port_takes_its_queue_pairs_and_hugepages() {
    let xdp = |eal: &str, rx: u16, tx: u16, lcores: &str| {
        GOOD.replace("\"--no-huge\", \"--vdev=net_null0\"", eal)
            .replace(
                "device = \"net_null0\"\nrx_queues = 1\ntx_queues = 2",
                &format!("device = \"net_af_xdp0\"\nrx_queues = {rx}\ntx_queues = {tx}"),
            )
            .replace("rx = [0]\nworkers = [1]", lcores)
    };
    let one = "rx = [0]";
    let two = "rx = [0]\nworkers = [1]";
    // One queue pair (queue_count defaults to 1), one lcore, hugepages: good.
    parse(&xdp("\"--vdev=net_af_xdp0,iface=veth0\"", 1, 1, one), "t.toml").unwrap();
    // The same on --no-huge: the device line is named.
    let e = errors(&xdp("\"--no-huge\", \"--vdev=net_af_xdp0,iface=veth0\"", 1, 1, one));
    assert_eq!(e.len(), 1, "{e:#?}");
    assert_eq!((e[0].key.as_str(), e[0].line), ("port[0].device", Some(6)));
    assert!(e[0].message.contains("hugepages"), "{}", e[0].message);
    // A worker needs a second TX queue, and the driver then needs queue_count=2 for both.
    let e = errors(&xdp("\"--vdev=net_af_xdp0,iface=veth0\"", 2, 2, two));
    let keys: Vec<&str> = e.iter().map(|e| e.key.as_str()).collect();
    assert_eq!(keys, ["port[0].rx_queues", "port[0].tx_queues"], "{e:#?}");
    assert!(e[0].message.contains("queue_count=1"), "{}", e[0].message);
    parse(
        &xdp("\"--vdev\", \"net_af_xdp0,iface=eth1,queue_count=2\"", 2, 2, two),
        "t.toml",
    )
    .unwrap();
    // RX and TX are pairs: 1 RX with 2 TX is refused on rx_queues alone.
    let e = errors(&xdp("\"--vdev=net_af_xdp0,iface=eth1,queue_count=2\"", 1, 2, two));
    assert_eq!(e.len(), 1, "{e:#?}");
    assert_eq!(e[0].key, "port[0].rx_queues");
}

#[test]
fn control_socket_default_relative_and_bad_paths() {
    let c = parse(GOOD, "/etc/fp/t.toml").unwrap();
    assert_eq!(
        c.control.socket,
        std::path::PathBuf::from("/run/fastpathd/control.sock")
    );
    let c = parse(&format!("{GOOD}\n[control]\nsocket = \"ctl.sock\"\n"), "/etc/fp/t.toml").unwrap();
    assert_eq!(c.control.socket, std::path::PathBuf::from("/etc/fp/ctl.sock"));
    let long = format!("/run/{}.sock", "x".repeat(110));
    for bad in ["", "/run/fastpathd/", long.as_str()] {
        let e = errors(&format!("{GOOD}\n[control]\nsocket = {bad:?}\n"));
        assert_eq!(e.len(), 1, "{bad:?}: {e:?}");
        assert_eq!((e[0].key.as_str(), e[0].line), ("control.socket", Some(17)), "{e:?}");
    }
}

#[test]
fn prefix_filters_read_lists_and_files_and_name_a_bad_line() {
    let dir = std::env::temp_dir().join(format!("fp-filter-cfg-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(
        dir.join("deny.txt"),
        "# feed\n198.18.0.0/15\n\n2001:db8:bad::/48 # v6\n",
    )
    .unwrap();
    std::fs::write(dir.join("bad.txt"), "198.18.0.0/15\n198.18.0.1/15\n").unwrap();
    let file = dir.join("c.toml").display().to_string();
    let text = format!(
        "{GOOD}\n[filter]\ndeny = [\"203.0.113.0/24\"]\ndeny_file = \"deny.txt\"\n{SERVICE}allow = [\"198.51.100.0/24\"]\n"
    );
    let c = parse(&text, &file).unwrap();
    let deny = c.filter.deny.as_ref().unwrap();
    assert_eq!((deny.inline.len(), deny.file.as_ref().unwrap().prefixes.len()), (1, 2));
    assert!(c.filter.allow.is_none());
    assert_eq!(c.services[0].filter.allow.as_ref().unwrap().inline.len(), 1);
    // Every problem with its key and line; a file's with the file and its line.
    let bad = text
        .replace("\"203.0.113.0/24\"", "\"203.0.113.0/24\", \"203.0.113.1/24\"")
        .replace("deny.txt", "bad.txt")
        .replace("allow = [\"198.51.100.0/24\"]", "allow = []");
    let e = parse(&bad, &file).unwrap_err().errors;
    let got: Vec<(&str, Option<usize>)> = e.iter().map(|e| (e.key.as_str(), e.line)).collect();
    assert_eq!(
        got,
        vec![
            ("filter.deny[1]", Some(17)),
            ("filter.deny_file", Some(18)),
            ("service[0].allow", Some(26)),
        ],
        "{e:#?}"
    );
    assert!(e[0].message.contains("host bits"), "{}", e[0].message);
    assert!(e[1].message.contains("bad.txt:2: "), "{}", e[1].message);
    assert!(e[2].message.contains("refuse every source"), "{}", e[2].message);
    let missing = text.replace("deny.txt", "nowhere.txt");
    let e = parse(&missing, &file).unwrap_err().errors;
    assert!(
        e[0].key == "filter.deny_file" && e[0].message.contains("cannot read"),
        "{e:?}"
    );
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn health_checks_default_and_bad_values_are_rejected_with_key_and_line() {
    let port = "port = \"net_null0\"\nnext_hop_mac = \"02:00:00:00:00:fe\"";
    let c = parse(
        &format!("{GOOD}{}", tunnel("a", &format!("{port}\nhealth = \"tcp:80\""))),
        "t.toml",
    )
    .unwrap();
    let h = c.tunnels[0].health.as_ref().unwrap();
    assert_eq!(h.check, crate::config::Check::Tcp("198.51.100.2:80".parse().unwrap()));
    assert_eq!(
        (h.interval.as_millis(), h.timeout.as_millis(), h.rise, h.fall),
        (1000, 500, 2, 3),
        "the defaults"
    );
    let c = parse(&format!("{GOOD}{}", tunnel("a", port)), "t.toml").unwrap();
    assert_eq!(c.tunnels[0].health, None, "no check without health");
    // Each bad value: its key and the line it is written on.
    for (extra, key, words) in [
        ("health = \"udp:53\"", "tunnel[0].health", "expected \"tcp:PORT\""),
        ("health = \"tcp:0\"", "tunnel[0].health", "expected 1 to 65535"),
        (
            "health = \"http://backend.example/\"",
            "tunnel[0].health",
            "HOST an IP address",
        ),
        (
            "health = \"tcp:80\"\nhealth_interval_ms = 5",
            "tunnel[0].health_interval_ms",
            "expected 10 to 3600000",
        ),
        (
            "health = \"tcp:80\"\nhealth_timeout_ms = 1000",
            "tunnel[0].health_timeout_ms",
            "less than health_interval_ms 1000",
        ),
        (
            "health = \"tcp:80\"\nhealth_interval_ms = 200\nhealth_timeout_ms = 0",
            "tunnel[0].health_timeout_ms",
            "expected 1 to 199",
        ),
        (
            "health = \"tcp:80\"\nhealth_rise = 0",
            "tunnel[0].health_rise",
            "expected 1 to 1000",
        ),
        (
            "health = \"tcp:80\"\nhealth_fall = 1001",
            "tunnel[0].health_fall",
            "expected 1 to 1000",
        ),
        ("health_fall = 2", "tunnel[0].health_fall", "without health"),
    ] {
        let src = format!("{GOOD}{}", tunnel("a", &format!("{port}\n{extra}")));
        let e = errors(&src);
        let hit = e
            .iter()
            .find(|e| e.key == key)
            .unwrap_or_else(|| panic!("{extra}: {e:?}"));
        assert!(hit.message.contains(words), "{extra}: {hit:?}");
        let last = extra.lines().last().unwrap();
        let want = src.lines().position(|l| l == last).unwrap() + 1;
        assert_eq!(hit.line, Some(want), "{extra}: {hit:?}");
    }
}
