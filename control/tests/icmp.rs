//! ICMP errors through the real daemon on DPDK (seed 000): a closed-port flood from one source
//! cannot take the budget from other sources, nothing is sent about what must never be answered,
//! and everything sent is well formed (tshark, checksums validated).

mod common;

use common::*;
use std::collections::BTreeMap;

#[test]
fn a_flooding_source_does_not_steal_other_sources_errors() {
    if missing(&["tshark"]) {
        return;
    }
    let s = Scratch::new("icmp");
    let q0 = s.path("q0.pcap");
    let vdev = format!(
        "--vdev=net_pcap0,rx_pcap={},tx_pcap={}",
        repo().join("configs/captures/icmp.pcap").display(),
        q0.display()
    );
    let cfg = s.write(
        "c.toml",
        &format!(
            "[dpdk]\neal_args = {}\nmbufs = 16383\n\n[[port]]\ndevice = \"net_pcap0\"\ntx_queues = 1\n\
             ipv4 = [\"192.0.2.1\"]\nipv6 = [\"2001:db8::1\"]\nmac = \"02:00:00:00:00:01\"\n\n\
             [lcores]\nrx = [0]\nidle_sleep_us = 100\n{METRICS_ANY_PORT}\n\
             [icmp]\nmsgs_per_sec = 1000\nburst = 300\npeer_interval_ms = 1000\npeer_burst = 6\n",
            eal_args("icmp", &[vdev])
        ),
    );
    let m = run_to_idle(&s, &cfg, 300);
    assert_eq!(assert_conservation(&m), 2205);

    let errors = tshark_checked(
        &q0,
        "icmp || icmpv6",
        &[
            "ip.dst",
            "ipv6.dst",
            "icmp.type",
            "icmp.code",
            "icmpv6.type",
            "icmpv6.code",
            "icmp.checksum.status",
            "icmpv6.checksum.status",
        ],
    );
    let mut per_dst: BTreeMap<String, usize> = BTreeMap::new();
    for e in &errors {
        // The outer destination is the first address (the quote carries the original).
        let dst = if e[0].is_empty() {
            e[1].split(',').next()
        } else {
            e[0].split(',').next()
        }
        .unwrap()
        .to_string();
        *per_dst.entry(dst).or_default() += 1;
        let good = if e[0].is_empty() { e[7].as_str() } else { e[6].as_str() };
        assert_eq!(good, "1", "checksum of {e:?}");
    }
    assert_eq!(
        per_dst.get("203.0.113.66"),
        Some(&6),
        "the flooding source gets its per-destination burst only"
    );
    for n in 1..=100 {
        assert_eq!(
            per_dst.get(&format!("198.51.100.{n}")),
            Some(&1),
            "198.51.100.{n} got its error"
        );
        assert_eq!(
            per_dst.get(&format!("2001:db8:1::{n:x}")),
            Some(&1),
            "2001:db8:1::{n:x} got its error"
        );
    }
    assert_eq!(per_dst.get("198.51.100.201"), Some(&1), "protocol unreachable");
    for never in ["0.0.0.0", "224.0.0.5", "127.0.0.1", "198.51.100.200"] {
        assert_eq!(per_dst.get(never), None, "no error to {never}");
    }
    assert_eq!(errors.len(), 6 + 200 + 1);
    let malformed = tshark_fields(&q0, "_ws.malformed || _ws.expert.severity == error", &["frame.number"]);
    assert!(malformed.is_empty(), "tshark finds nothing malformed: {malformed:?}");

    assert_eq!(outcome(&m, "icmp_error"), 207);
    assert_eq!(outcome(&m, "icmp_suppressed"), 2000 - 6);
    assert_eq!(
        m["fastpath_icmp_sent_total{family=\"ipv4\",type=\"port_unreachable\"}"],
        106.0
    );
    assert_eq!(
        m["fastpath_icmp_sent_total{family=\"ipv6\",type=\"port_unreachable\"}"],
        100.0
    );
    assert_eq!(
        m["fastpath_icmp_sent_total{family=\"ipv4\",type=\"protocol_unreachable\"}"],
        1.0
    );
    assert_eq!(
        m["fastpath_icmp_rate_limited_total{family=\"ipv4\",limit=\"peer\"}"],
        1994.0
    );

    // What one host can read from the identification of its own errors says nothing of the
    // others' (the idle scan of nmap -sI): the 107 IPv4 errors, in the order sent to 102
    // hosts, are atomic (DF) and their IDs no shared sequence. A counter gives 106 steps of 1;
    // random IDs one with probability 106/65536.
    let ids: Vec<(u16, String)> = tshark_fields(&q0, "icmp", &["ip.id", "ip.flags.df"])
        .iter()
        .map(|f| {
            let id = f[0].split(',').next().unwrap().trim_start_matches("0x");
            (
                u16::from_str_radix(id, 16).unwrap(),
                f[1].split(',').next().unwrap().to_string(),
            )
        })
        .collect();
    assert_eq!(ids.len(), 107);
    assert!(
        ids.iter().all(|(_, df)| df == "1" || df == "True"),
        "ICMP errors without DF: {ids:?}"
    );
    let steps: Vec<u16> = ids.windows(2).map(|w| w[1].0.wrapping_sub(w[0].0)).collect();
    let small = steps.iter().filter(|&&d| d <= 16).count();
    assert!(
        small <= 3,
        "{small} of {} consecutive IDs within 16 of the last: {steps:?}",
        steps.len()
    );
    let distinct: std::collections::BTreeSet<u16> = steps.iter().copied().collect();
    assert!(
        distinct.len() >= 95,
        "{} distinct steps of {}",
        distinct.len(),
        steps.len()
    );
}
