//! Reassembly through the real daemon on DPDK: fragmented UDP (v4, v6) to an echo service and a
//! fragmented 4000-byte ping are reassembled and answered (the answers fragmented again for the
//! MTU, and reassembled by tshark with checksums checked); overlapping, tiny and never-completed
//! fragments get their own outcomes; every fragment is counted exactly once.

mod common;

use common::*;

#[test]
fn fragmented_datagrams_are_reassembled_answered_and_counted() {
    if missing(&["tshark"]) {
        return;
    }
    let s = Scratch::new("reasm");

    let (q0, q1) = (s.path("q0.pcap"), s.path("q1.pcap"));
    let vdev = format!(
        "--vdev=net_pcap0,rx_pcap={},tx_pcap={},tx_pcap={}",
        repo().join("configs/captures/frags.pcap").display(),
        q0.display(),
        q1.display()
    );
    let cfg = s.write(
        "c.toml",
        &format!(
            "[dpdk]\neal_args = {}\nmbufs = 16383\n\n[[port]]\ndevice = \"net_pcap0\"\ntx_queues = 2\n\
             ipv4 = [\"192.0.2.1\"]\nipv6 = [\"2001:db8::1\"]\nmac = \"02:00:00:00:00:01\"\n\n\
             [lcores]\nrx = [0]\nworkers = [1]\nidle_sleep_us = 100\n{METRICS_ANY_PORT}\n\
             [reassembly]\ntimeout_ms = 300\nbuffers = 32\n\n\
             [[service]]\nname = \"echo\"\nports = [7]\nsockets = 2\naction = \"echo\"\n",
            eal_args("reasm", &[vdev])
        ),
    );
    // Idle long enough for the lone first fragment's datagram to time out while running.
    let m = run_to_idle(&s, &cfg, 1500);
    assert_eq!(assert_conservation(&m), 13);
    for (o, n) in [
        ("reassembled", 6),
        ("delivered", 2),
        ("echo_reply", 1),
        ("reassembly_refused", 3),
        // The lone first fragment timed out: it is answered with Time Exceeded (below).
        ("icmp_error", 1),
        ("reassembly_timeout", 0),
    ] {
        assert_eq!(outcome(&m, o), n, "outcome {o}");
    }
    assert_eq!(m["fastpath_reasm_completed_total{family=\"ipv4\"}"], 2.0);
    assert_eq!(m["fastpath_reasm_completed_total{family=\"ipv6\"}"], 1.0);
    assert_eq!(m["fastpath_reasm_timeouts_total{family=\"ipv4\"}"], 1.0);
    assert_eq!(
        m["fastpath_reasm_refused_total{family=\"ipv4\",reason=\"overlap\"}"],
        2.0
    );
    assert_eq!(m["fastpath_reasm_refused_total{family=\"ipv4\",reason=\"tiny\"}"], 1.0);
    assert_eq!(m["fastpath_reasm_memory_bytes{lcore=\"0\"}"], 0.0);

    // The ping's answer: 4000 bytes back, sent as fragments that fit the 1500-byte MTU.
    let frames = tshark_fields(&q0, "", &["frame.len"]);
    assert!(
        frames.iter().all(|f| f[0].parse::<usize>().unwrap() <= 1514),
        "{frames:?}"
    );
    let reply = tshark_checked(
        &q0,
        "icmp.type == 0",
        &["ip.dst", "data.len", "icmp.checksum.status", "ip.fragment.count"],
    );
    assert_eq!(
        reply,
        vec![vec!["192.0.2.17", "4000", "1", "3"]],
        "reassembled by tshark"
    );
    // RFC 792 / RFC 1122 §3.3.2: Time Exceeded code 1 to the sender of the first fragment.
    let te = tshark_checked(
        &q0,
        "icmp.type == 11",
        &["ip.dst", "icmp.code", "icmp.checksum.status", "ip.checksum.status"],
    );
    assert_eq!(te, vec![vec!["192.0.2.20,192.0.2.1", "1", "1", "1,1"]], "{te:?}");
    assert_eq!(
        m["fastpath_icmp_sent_total{family=\"ipv4\",type=\"time_exceeded\"}"],
        1.0
    );
    // The echo service's answers, v4 and v6, 3000 bytes each, fragmented on the way out.
    let mut echoes = tshark_checked(
        &q1,
        "udp.srcport == 7",
        &["ip.dst", "ipv6.dst", "udp.dstport", "udp.length", "udp.checksum.status"],
    );
    echoes.sort();
    assert_eq!(
        echoes,
        vec![
            vec!["", "2001:db8::17", "40002", "3008", "1"],
            vec!["192.0.2.17", "", "40001", "3008", "1"],
        ],
        "UDP echoes reassembled by tshark with good checksums"
    );
}

/// Reassembly keeps completing for as long as legitimate fragments arrive, whatever consumes the
/// datagrams. bench_frags.pcap (64 legitimate 3-fragment datagrams among 1024 first fragments that
/// never complete) replayed in a loop at full speed for several seconds; completions sampled each
/// second must keep rising, and at the end nothing is held. Scraped 250 times meanwhile (every
/// scrape rendered, `cache_ms = 0`): at each, with fragments in flight, the packets received are
/// the outcomes plus the fragments held.
fn completions_keep_rising(action: &str) {
    let s = Scratch::new(&format!("reasm-live-{action}"));
    let vdev = format!(
        "--vdev=net_pcap0,rx_pcap={},infinite_rx=1,tx_pcap=/dev/null,tx_pcap=/dev/null",
        repo().join("configs/captures/bench_frags.pcap").display()
    );
    let tunnel = if action == "tunnel" {
        "tunnel = \"t\"\n\n[[tunnel]]\nname = \"t\"\nlocal = \"192.0.2.1\"\nremote = \"203.0.113.9\"\n\
         port = \"net_pcap0\"\nnext_hop_mac = \"02:00:00:00:00:99\"\n"
    } else {
        ""
    };
    let cfg = s.write(
        "c.toml",
        &format!(
            "[dpdk]\neal_args = {}\nmbufs = 8191\n\n[[port]]\ndevice = \"net_pcap0\"\ntx_queues = 2\n\
             ipv4 = [\"192.0.2.1\"]\nipv6 = [\"2001:db8::1\"]\nmac = \"02:00:00:00:00:01\"\n\n\
             [lcores]\nrx = [0]\nworkers = [1]\nidle_sleep_us = 50\n{METRICS_ANY_PORT}cache_ms = 0\n\n\
             [[service]]\nname = \"frags\"\nports = [7]\nsockets = 1\nsocket_capacity = 1024\n\
             action = \"{action}\"\n{tunnel}",
            eal_args(&format!("reasm-live-{action}"), &[vdev])
        ),
    );
    let dump = s.path("metrics.prom");
    let d = Daemon::start(
        &s,
        &[
            "--config",
            cfg.to_str().unwrap(),
            "--metrics-dump",
            dump.to_str().unwrap(),
        ],
    );
    let completed = |m: &std::collections::BTreeMap<String, f64>| {
        m.get("fastpath_reasm_completed_total{family=\"ipv4\"}")
            .copied()
            .unwrap_or(0.0)
    };
    let mut samples = vec![];
    let mut held_seen = 0.0f64;
    for _ in 0..5 {
        let second = std::time::Instant::now() + std::time::Duration::from_secs(1);
        let mut m = d.scrape();
        for i in 0..50 {
            if i > 0 {
                std::thread::sleep(second.saturating_duration_since(std::time::Instant::now()) / (50 - i));
                m = d.scrape();
            }
            let held = family_sum(&m, "fastpath_reasm_held_fragments");
            held_seen = held_seen.max(held);
            assert_eq!(
                family_sum(&m, "fastpath_rx_packets_total"),
                family_sum(&m, "fastpath_packets_total") + held,
                "{action}: received == outcomes + fragments held, at every scrape"
            );
        }
        samples.push(completed(&m));
    }
    assert!(held_seen > 0.0, "{action}: fragments were held at some scrape");
    let (code, _) = d.stop();
    assert_eq!(code, Some(0));
    let m = parse_metrics(&std::fs::read_to_string(&dump).unwrap());
    let rx = assert_conservation(&m);
    assert_eq!(
        family_sum(&m, "fastpath_reasm_held_fragments"),
        0.0,
        "nothing held at exit"
    );
    // 64 legitimate datagrams (192 fragments) in every 1216 frames of the capture.
    let legit = rx as f64 * 64.0 / 1216.0;
    eprintln!(
        "{action}: completions each second {samples:?}; {:.1}% of the legitimate datagrams received",
        100.0 * completed(&m) / legit
    );
    for w in samples.windows(2) {
        assert!(
            w[1] >= w[0] + 100.0,
            "{action}: completions must keep rising each second: {samples:?}"
        );
    }
}

#[test]
fn reassembly_keeps_completing_into_a_sink() {
    completions_keep_rising("sink")
}

#[test]
fn reassembly_keeps_completing_into_echo() {
    completions_keep_rising("echo")
}

#[test]
fn reassembly_keeps_completing_into_a_tunnel() {
    completions_keep_rising("tunnel")
}

/// A line-rate flood of datagrams that never complete, replayed in a loop, first under seed 001's
/// `linux` policy, then reloaded live to the default `probation` policy. Per window, the share of
/// the legitimate datagrams received that were reassembled: collapsed under `linux`, at least 90%
/// under `probation`, with memory never above `high_thresh_bytes`. `free_on_rx` takes the worker
/// out of the measurement (a worker starved of CPU runs the 64 KiB buffer pool dry, `no_buffer`,
/// whatever the policy).
fn flood_then_probation(capture: &str, frames: f64, high_thresh: u64) {
    let s = Scratch::new(&format!("reasm-{capture}"));
    let vdev = format!(
        "--vdev=net_pcap0,rx_pcap={},infinite_rx=1,tx_pcap=/dev/null,tx_pcap=/dev/null",
        repo().join("configs/captures").join(capture).display()
    );
    let config = |policy: &str| {
        format!(
            "[dpdk]\neal_args = {}\nmbufs = 8191\n\n[[port]]\ndevice = \"net_pcap0\"\ntx_queues = 2\n\
             ipv4 = [\"192.0.2.1\"]\nmac = \"02:00:00:00:00:01\"\n\n\
             [lcores]\nrx = [0]\nworkers = [1]\nidle_sleep_us = 50\n{METRICS_ANY_PORT}\n\
             [reassembly]\npolicy = \"{policy}\"\nhigh_thresh_bytes = {high_thresh}\n\n\
             [[service]]\nname = \"frags\"\nports = [7]\nsockets = 1\nsocket_capacity = 1024\n\
             action = \"sink\"\nfree_on_rx = true\n",
            eal_args(&format!("reasm-{capture}"), std::slice::from_ref(&vdev))
        )
    };
    let cfg = s.write("c.toml", &config("linux"));
    let dump = s.path("metrics.prom");
    let d = Daemon::start(
        &s,
        &[
            "--config",
            cfg.to_str().unwrap(),
            "--metrics-dump",
            dump.to_str().unwrap(),
        ],
    );
    let get = |m: &std::collections::BTreeMap<String, f64>, k: &str| m.get(k).copied().unwrap_or(0.0);
    let completed = |m: &_| get(m, "fastpath_reasm_completed_total{family=\"ipv4\"}");
    let evicted = |m: &_| get(m, "fastpath_reasm_refused_total{family=\"ipv4\",reason=\"evicted\"}");
    let rx = |m: &_| family_sum(m, "fastpath_rx_packets_total");
    // The share of one window, and the highest memory sampled in it (every 100 ms).
    let window = |d: &Daemon| {
        std::thread::sleep(std::time::Duration::from_millis(500));
        let a = d.scrape();
        let mut peak: f64 = 0.0;
        for _ in 0..20 {
            std::thread::sleep(std::time::Duration::from_millis(100));
            peak = peak.max(get(&d.scrape(), "fastpath_reasm_memory_bytes{lcore=\"0\"}"));
        }
        let b = d.scrape();
        let legit = (rx(&b) - rx(&a)) * 64.0 / frames;
        assert!(legit > 1000.0, "{capture}: only {legit} legitimate datagrams received");
        ((completed(&b) - completed(&a)) / legit, peak, b)
    };
    let (linux, linux_peak, m) = window(&d);
    assert_eq!(evicted(&m), 0.0, "{capture}: linux never evicts for memory");

    std::fs::write(&cfg, config("probation")).unwrap();
    d.signal("HUP");
    wait_for(10, "the reload to probation", || {
        d.scrape()["fastpath_config_generation"] == 2.0
    });
    let (probation, probation_peak, m) = window(&d);
    eprintln!(
        "{capture}: legitimate datagrams reassembled: linux {linux:.3} (peak memory {linux_peak}), \
         probation {probation:.3} (peak {probation_peak}); evicted {}",
        evicted(&m)
    );
    assert!(linux < 0.2, "{capture}: linux {linux:.3}: the flood should win");
    assert!(probation >= 0.9, "{capture}: probation {probation:.3} < 0.9");
    assert!(
        probation_peak <= high_thresh as f64,
        "{capture}: memory {probation_peak} > {high_thresh}"
    );
    assert!(evicted(&m) > 0.0);

    let (code, _) = d.stop();
    assert_eq!(code, Some(0));
    let m = parse_metrics(&std::fs::read_to_string(&dump).unwrap());
    assert_conservation(&m);
    assert_eq!(
        get(&m, "fastpath_reasm_memory_bytes{lcore=\"0\"}"),
        0.0,
        "nothing held after the stop"
    );
}

#[test]
fn probation_survives_a_first_fragment_flood_100_times_the_table() {
    // 64 KiB: 28 buffers of 2304 bytes; 2816 pending flood datagrams.
    flood_then_probation("bench_frags_100x.pcap", 3008.0, 65536)
}

#[test]
fn probation_survives_fragmentsmack() {
    // The default 4 MiB table; 4200 buffers of FragmentSmack.
    flood_then_probation("bench_frags_smack.pcap", 4392.0, 4 << 20)
}
