//! The metrics' own tests: the contract and the dashboard name only emitted families, and the
//! text is the crate encoder's.

use super::*;

#[test]
fn the_contract_lists_every_family_and_nothing_else() {
    let contract = include_str!("../../../docs/contract.md");
    let section = contract
        .split("## Metric families")
        .nth(1)
        .and_then(|s| s.split("\n## ").next())
        .expect("docs/contract.md has a Metric families section");
    // The first column of the tables' rows: one family, or several in backticks.
    let mut listed: Vec<&str> = section
        .lines()
        .filter_map(|l| l.strip_prefix("| `"))
        .filter_map(|l| l.split(" |").next())
        .flat_map(|cell| cell.split('`'))
        .filter(|t| t.starts_with("fastpath_"))
        .collect();
    listed.sort_unstable();
    listed.dedup();
    let mut ours: Vec<&str> = families().map(|d| d.name).collect();
    ours.sort_unstable();
    let all = ours.len();
    ours.dedup();
    assert_eq!(ours.len(), all, "a family declared twice");
    assert_eq!(
        listed, ours,
        "docs/contract.md's metric tables and the families emitted differ"
    );
}

/// The label values that come from a closed set in the code (`label_set!` and the like) are
/// each listed in their family's row of docs/contract.md: a new reason, limit or list fails
/// here until the contract has it.
#[test]
fn the_contract_lists_every_value_of_the_closed_labels() {
    use fastpath::pipeline::{filter, icmp_error, reasm, source_limit, tcp_state};
    let contract = include_str!("../../../docs/contract.md");
    let closed: &[(&str, &str, &[&str])] = &[
        ("fastpath_reasm_refused_total", "reason", &reasm::Reason::LABELS),
        ("fastpath_tcp_state_total", "reason", &tcp_state::Reason::LABELS),
        (
            "fastpath_source_limited_total",
            "reason",
            &source_limit::Refusal::LABELS,
        ),
        ("fastpath_filtered_total", "list", &filter::List::LABELS),
        ("fastpath_icmp_sent_total", "type", &icmp_error::ErrorType::LABELS),
        ("fastpath_icmp_rate_limited_total", "limit", &icmp_error::Limit::LABELS),
        (
            "fastpath_tcp_resets_rate_limited_total",
            "limit",
            &icmp_error::Limit::LABELS,
        ),
        (
            "fastpath_metrics_connections_timed_out_total",
            "deadline",
            &crate::http::Deadline::LABELS,
        ),
        ("fastpath_lcore_wakeups_total", "reason", &fastpath::stats::WAKE_REASONS),
    ];
    for (name, label, values) in closed {
        assert!(families().any(|d| d.name == *name), "{name} is not emitted");
        let row = contract
            .lines()
            .find(|l| l.starts_with(&format!("| `{name}` |")))
            .unwrap_or_else(|| panic!("docs/contract.md has no row for {name}"));
        let labels = row.split(" | ").nth(2).unwrap_or_default();
        assert!(
            labels.contains(&format!("`{label}`")),
            "{name}: no label {label} in {row}"
        );
        for v in *values {
            assert!(
                labels.contains(&format!("`{v}`")),
                "docs/contract.md's row of {name} does not list {label} value {v}"
            );
        }
    }
}

#[test]
fn dashboard_charts_only_known_families() {
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../configs/grafana-dashboard.json");
    let dash: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap();
    let mut exprs = 0;
    for panel in dash["panels"].as_array().unwrap() {
        assert!(panel["title"].is_string());
        for t in panel["targets"].as_array().unwrap() {
            let e = t["expr"].as_str().unwrap();
            exprs += 1;
            for word in e.split(|c: char| !(c.is_ascii_alphanumeric() || c == '_')) {
                if word.starts_with("fastpath_") {
                    assert!(
                        families().any(|d| d.name == word),
                        "dashboard uses unknown family {word}"
                    );
                }
            }
        }
    }
    assert!(exprs >= 10);
    // An instance variable, and every query filters on it.
    let vars = dash["templating"]["list"].as_array().unwrap();
    assert!(vars.iter().any(|v| v["name"] == "instance"), "{vars:?}");
    let all: Vec<&str> = dash["panels"]
        .as_array()
        .unwrap()
        .iter()
        .flat_map(|p| p["targets"].as_array().unwrap())
        .map(|t| t["expr"].as_str().unwrap())
        .collect();
    for e in &all {
        let selectors = e.matches("fastpath_").count();
        assert_eq!(e.matches("instance=~\"$instance\"").count(), selectors, "{e}");
    }
    // What an on-call engineer looks for first is charted.
    for family in [
        "fastpath_port_link_up",
        "fastpath_port_rx_missed_total",
        "fastpath_port_rx_nombuf_total",
        "fastpath_port_rx_errors_total",
        "fastpath_socket_full_total",
        "outcome=~\"socket_full|flow_limited\"",
    ] {
        assert!(all.iter().any(|e| e.contains(family)), "no panel charts {family}");
    }
}
use fastpath::stats::QueueCounters;

#[test]
fn own_encoder_writes_what_the_crate_writes_escapes_included() {
    let r = Registry::new();
    let c = prometheus::CounterVec::new(
        prometheus::Opts::new("odd_total", "help with \\ backslash\nand a newline"),
        &["v"],
    )
    .unwrap();
    r.register(Box::new(c.clone())).unwrap();
    c.with_label_values(&["quote \" back \\ nl \n end"]).inc_by(3.0);
    c.with_label_values(&["plain"]).inc_by(0.75);
    let g = prometheus::Gauge::new("odd_gauge", "a gauge").unwrap();
    r.register(Box::new(g.clone())).unwrap();
    g.set(-1.5e-7);
    let ours = render(&r);
    assert_eq!(ours, render_with_crate(&r.gather()));
    assert!(
        ours.contains(r#"odd_total{v="quote \" back \\ nl \n end"} 3"#),
        "{ours}"
    );
}

#[test]
fn renders_summed_counters_with_labels() {
    let a = Arc::new(LcoreStats::new(
        0,
        vec![QueueCounters::new(0, 0)],
        vec![QueueCounters::new(0, 0)],
    ));
    let b = Arc::new(LcoreStats::new(
        1,
        vec![QueueCounters::new(0, 1)],
        vec![QueueCounters::new(0, 1)],
    ));
    a.rx[0].packets.add(3);
    b.rx[0].packets.add(4);
    a.outcome(Outcome::ArpReply);
    b.outcome(Outcome::ArpReply);
    a.busy_cycles.add(300);
    a.busy_polls.add(1);
    a.idle_polls.add(3);
    let worker = Arc::new(LcoreStats::new(2, vec![], vec![]));
    worker.idle_polls.add(10);
    let src = Arc::new(Sources {
        port_names: vec!["net_pcap0".into()],
        port_info: vec![Some(PortInfo {
            driver: "net_pcap".into(),
            rss: false,
            rx_checksum_offload: "none".into(),
        })],
        lcores: vec![a, b, worker],
        dpdk_version: "DPDK 22.11.11".into(),
        start_time: 1.0,
        tsc_hz: 2_000_000_000,
        mbufs_in_use: Box::new(|| 7),
        mbufs_capacity: 8447,
        port_stats: Box::new(|id| {
            (id == 0).then_some(PortStats {
                ipackets: 11,
                imissed: 5,
                ..Default::default()
            })
        }),
        port_xstats: Box::new(|id| {
            if id == 0 {
                vec![("rx_q0_errors".into(), 3)]
            } else {
                Vec::new()
            }
        }),
        published: Arc::new(Published::new(Arc::new(fastpath::pipeline::Tables {
            generation: 3,
            ..Default::default()
        }))),
        reload: Arc::new(ReloadStats::default()),
        http: Default::default(),
        health: {
            let h = Arc::new(crate::health::Health::new(1));
            let port = crate::health::WatchedPort {
                id: 0,
                name: "net_pcap0".into(),
                kernel_interface: None,
            };
            let mut w = crate::health::Watch::new(vec![port], &[], 0, 3, std::time::Instant::now());
            w.tick(&[], 3, &h, std::time::Instant::now(), |_| {
                crate::health::LinkReading::Down(String::new())
            });
            h
        },
        backends: Arc::default(),
    });
    let reg = registry(src);
    let text = render(&reg);
    assert_eq!(
        text,
        render_with_crate(&reg.gather()),
        "same bytes as the crate's encoder"
    );
    assert!(
        text.contains("fastpath_rx_packets_total{port=\"net_pcap0\",queue=\"1\"} 4"),
        "{text}"
    );
    assert!(
        text.contains("fastpath_packets_total{outcome=\"arp_reply\"} 2"),
        "{text}"
    );
    assert!(
        text.contains("fastpath_packets_total{outcome=\"malformed\"} 0"),
        "{text}"
    );
    assert!(text.contains("# TYPE fastpath_packets_total counter"), "{text}");
    assert!(text.contains("fastpath_mbufs_in_use 7"), "{text}");
    assert!(text.contains("fastpath_mbufs_capacity 8447"), "{text}");
    assert!(text.contains("fastpath_tsc_hz 2000000000"), "{text}");
    assert!(
        text.contains("fastpath_port_rx_packets_total{port=\"net_pcap0\"} 11"),
        "{text}"
    );
    assert!(
        text.contains(
            "fastpath_port_info{port=\"net_pcap0\",driver=\"net_pcap\",rss=\"off\",rx_checksum_offload=\"none\"} 1"
        ),
        "{text}"
    );
    assert!(text.contains("fastpath_port_link_up{port=\"net_pcap0\"} 0"), "{text}");
    assert!(
        text.contains("fastpath_port_rx_missed_total{port=\"net_pcap0\"} 5")
            && text.contains("fastpath_port_xstats_total{port=\"net_pcap0\",name=\"rx_q0_errors\"} 3"),
        "{text}"
    );
    assert!(text.contains("fastpath_lcore_packets_total{lcore=\"0\"} 3"), "{text}");
    assert!(
        text.contains("fastpath_lcore_cycles_per_packet{lcore=\"0\"} 100"),
        "{text}"
    );
    assert!(
        text.contains("fastpath_lcore_cycles_per_packet{lcore=\"1\"} 0"),
        "{text}"
    );
    assert!(
        !text.contains("fastpath_lcore_cycles_per_packet{lcore=\"2\"}"),
        "workers receive nothing: {text}"
    );
    assert!(
        text.contains("fastpath_lcore_idle_poll_ratio{lcore=\"0\"} 0.75"),
        "{text}"
    );
    assert!(text.contains("fastpath_lcore_idle_poll_ratio{lcore=\"2\"} 1"), "{text}");
    assert!(text.contains("# TYPE fastpath_lcore_cycles_per_packet gauge"), "{text}");
    assert!(text.contains("dpdk_version=\"DPDK 22.11.11\""), "{text}");
    assert!(text.contains("fastpath_config_generation 3"), "{text}");
    assert!(
        text.contains("fastpath_config_reloads_total{result=\"failure\"} 0"),
        "{text}"
    );
}
