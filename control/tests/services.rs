//! Services through the real daemon on DPDK: fanout rollover under one dominant flow.

mod common;

use common::*;

/// A config replaying rollover.pcap (2200 UDP datagrams to 192.0.2.1:9000, one dominant flow
/// and 50 small ones) on lcore 0, with a worker on lcore 1, and `sections` (the services).
fn rollover_config(s: &Scratch, name: &str, sections: &str) -> std::path::PathBuf {
    let vdev = format!(
        "--vdev=net_pcap0,rx_pcap={},tx_pcap=/dev/null,tx_pcap=/dev/null",
        repo().join("configs/captures/rollover.pcap").display()
    );
    s.write(
        "c.toml",
        &format!(
            "[dpdk]\neal_args = {}\nmbufs = 16383\n\n[[port]]\ndevice = \"net_pcap0\"\ntx_queues = 2\n\
             ipv4 = [\"192.0.2.1\"]\nmac = \"02:00:00:00:00:01\"\n\n[lcores]\nrx = [0]\nworkers = [1]\n\
             idle_sleep_us = 100\n{METRICS_ANY_PORT}\n{sections}",
            eal_args(name, &[vdev])
        ),
    )
}

/// Packets the workers of service "bulk"'s `sockets` sockets consumed (`sink`); every series
/// must be there.
fn sunk(m: &std::collections::BTreeMap<String, f64>, sockets: usize) -> f64 {
    (0..sockets)
        .map(|i| {
            let series = format!("fastpath_socket_processed_total{{service=\"bulk\",socket=\"{i}\",result=\"sunk\"}}");
            m[&series]
        })
        .sum()
}

/// Seed 002's experiment in small (flow limit off, to see rollover alone): one dominant flow and 50 small ones to a 4-socket service
/// whose consumer is slow (100 µs per packet). The dominant flow's socket reaches LOW room, the
/// flow is found huge and spread over the other sockets; the small flows are never moved (every
/// rollover is a huge-flow rollover); nothing is dropped; every packet is counted.
#[test]
fn a_dominant_flow_is_spread_and_small_flows_stay() {
    let s = Scratch::new("rollover");
    let cfg = rollover_config(
        &s,
        "rollover",
        "[flow_limit]\nenabled = false\n\n[[service]]\nname = \"bulk\"\nports = [9000]\nsockets = 4\n\
         socket_capacity = 1024\nfanout = \"hash\"\nrollover = true\naction = \"sink\"\ncost_ns = 100000\n",
    );
    let m = run_to_idle(&s, &cfg, 500);
    assert_eq!(assert_conservation(&m), 2200);
    assert_eq!(outcome(&m, "delivered"), 2200, "nothing dropped");
    let per_socket = |family: &str| -> Vec<f64> {
        (0..4)
            .map(|i| m[&format!("{family}{{service=\"bulk\",socket=\"{i}\"}}")])
            .collect()
    };
    let delivered = per_socket("fastpath_socket_delivered_total");
    let rollover: f64 = per_socket("fastpath_rollover_total").iter().sum();
    let huge: f64 = per_socket("fastpath_rollover_huge_total").iter().sum();
    let failed: f64 = per_socket("fastpath_rollover_failed_total").iter().sum();
    eprintln!("delivered per socket {delivered:?}; rollovers {rollover} (huge {huge}, failed {failed})");
    assert!(
        huge > 500.0,
        "the dominant flow rolled over while its socket still had room"
    );
    assert_eq!(
        rollover, huge,
        "every packet that moved belonged to the huge flow: small flows stayed"
    );
    assert_eq!(failed, 0.0);
    assert!(
        delivered.iter().filter(|&&d| d > 300.0).count() >= 2,
        "spread over sockets: {delivered:?}"
    );
    // Clean stop: the workers drained every socket and ran the action on every packet.
    assert_eq!(sunk(&m, 4), 2200.0);
    assert_eq!(per_socket("fastpath_socket_queue_depth").iter().sum::<f64>(), 0.0);
}

/// Runs storm.pcap through an echo service with the flow limit on or off; returns the fraction
/// of the normal flows' datagrams that were answered (read back from the echo capture by
/// tshark) and the metrics.
fn storm(limit: bool) -> (f64, std::collections::BTreeMap<String, f64>) {
    let name = if limit { "storm-on" } else { "storm-off" };
    let s = Scratch::new(name);
    let replies = s.path("replies.pcap");
    let vdev = format!(
        "--vdev=net_pcap0,rx_pcap={},tx_pcap=/dev/null,tx_pcap={}",
        repo().join("configs/captures/storm.pcap").display(),
        replies.display()
    );
    let cfg = s.write(
        "c.toml",
        &format!(
            "[dpdk]\neal_args = {}\nmbufs = 16383\n\n[[port]]\ndevice = \"net_pcap0\"\ntx_queues = 2\n\
             ipv4 = [\"192.0.2.1\"]\nmac = \"02:00:00:00:00:01\"\n\n[lcores]\nrx = [0]\nworkers = [1]\n\
             idle_sleep_us = 100\n{METRICS_ANY_PORT}\n[flow_limit]\nenabled = {limit}\n\n\
             [[service]]\nname = \"echo\"\nports = [7]\nsockets = 1\nsocket_capacity = 2048\n\
             action = \"echo\"\ncost_ns = 200000\n",
            eal_args(name, &[vdev])
        ),
    );
    let m = run_to_idle(&s, &cfg, 500);
    assert_eq!(assert_conservation(&m), 8400);
    let answered = tshark_fields(&replies, "udp.dstport >= 7000 && udp.dstport < 7020", &["udp.dstport"]).len();
    (answered as f64 / 400.0, m)
}

/// Seed 003's experiment in small, with one backlog as in the seed: 20 normal flows to a
/// one-socket echo service whose worker is slow (200 µs per packet), plus a single-flow storm 20
/// times their volume. A replay cannot pace packets, so rates are volumes here: the normal flows'
/// 400 datagrams fit in the socket above its half-full mark even if the worker served none during
/// the replay, while the storm alone could fill it 4 times. With the flow limit the storm is shed
/// once the socket is half full and at least 99% of the normal datagrams are answered; without
/// it the storm fills the socket and the normal flows lose most of theirs.
#[test]
fn the_flow_limit_sheds_a_storm_and_serves_normal_flows() {
    if missing(&["tshark"]) {
        return;
    }
    let (with, m_on) = storm(true);
    let (without, m_off) = storm(false);
    eprintln!(
        "normal flows answered: {:.1}% with the flow limit, {:.1}% without \
         (flow_limited {} / socket_full {} with; flow_limited {} / socket_full {} without)",
        with * 100.0,
        without * 100.0,
        outcome(&m_on, "flow_limited"),
        outcome(&m_on, "socket_full"),
        outcome(&m_off, "flow_limited"),
        outcome(&m_off, "socket_full"),
    );
    assert!(with >= 0.99, "with the limit: {with}");
    assert!(without < 0.6, "without the limit the storm takes the socket: {without}");
    assert!(outcome(&m_on, "flow_limited") > 5000, "the storm was shed");
    assert_eq!(
        m_on["fastpath_flow_limit_dropped_total{lcore=\"0\"}"] as u64,
        outcome(&m_on, "flow_limited")
    );
    assert_eq!(outcome(&m_off, "flow_limited"), 0);
}

/// The benchmark-only `free_on_rx`: the RX lcore frees what it would enqueue on the service's
/// sockets and counts it delivered; the worker sees nothing, and every mbuf comes back.
#[test]
fn free_on_rx_frees_on_the_rx_lcore_and_counts_delivered() {
    let s = Scratch::new("free-on-rx");
    let cfg = rollover_config(
        &s,
        "free-on-rx",
        "[[service]]\nname = \"bulk\"\nports = [9000]\nsockets = 2\nsocket_capacity = 64\n\
         action = \"sink\"\ncost_ns = 100000\nfree_on_rx = true\n",
    );
    let m = run_to_idle(&s, &cfg, 500);
    assert_eq!(assert_conservation(&m), 2200);
    // Sockets of 64 drained at 10 kpps would refuse almost all of it: freed on RX, none is.
    assert_eq!(outcome(&m, "delivered"), 2200, "every packet counted delivered");
    let sum = |family: &str| -> f64 {
        (0..2)
            .map(|i| m[&format!("{family}{{service=\"bulk\",socket=\"{i}\"}}")])
            .sum()
    };
    assert_eq!(sum("fastpath_socket_delivered_total"), 2200.0);
    assert_eq!(sunk(&m, 2), 0.0, "no worker ran the action");
    assert_eq!(m["fastpath_mbufs_in_use"], 0.0);
}

/// A sink fed by one RX lcore: its worker only counts what it takes, and the RX lcore frees
/// those mbufs on its next enqueue — or, once the traffic stops, on an idle poll, so a drained
/// socket holds no mbuf while the daemon runs (not only at exit).
#[test]
fn a_drained_sink_holds_no_mbuf_once_the_traffic_stops() {
    let s = Scratch::new("sink-idle");
    let cfg = rollover_config(
        &s,
        "sink-idle",
        "[[service]]\nname = \"bulk\"\nports = [9000]\nsockets = 2\nsocket_capacity = 1024\naction = \"sink\"\n",
    );
    let d = Daemon::start(&s, &["--config", cfg.to_str().unwrap()]);
    let mut m = Default::default();
    // Every datagram received and every one delivered sunk (a slow share of the CPU may leave
    // some refused as socket_full: not what this test is about).
    wait_for(10, "every datagram received and every delivered one sunk", || {
        m = d.scrape();
        family_sum(&m, "fastpath_rx_packets_total") == 2200.0 && sunk(&m, 2) == outcome(&m, "delivered") as f64
    });
    assert!(outcome(&m, "delivered") > 0);
    wait_for(5, "every mbuf back in the pool while running", || {
        m = d.scrape();
        m.get("fastpath_mbufs_in_use") == Some(&0.0)
    });
    let (code, log) = d.stop();
    assert_eq!(code, Some(0), "{log}");
}
