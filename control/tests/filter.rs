//! Prefix filters through the daemon: `[filter]`, a port's and a service's own lists refuse
//! what they should and nothing else (ARP, the closed port's answers to admitted sources), per list;
//! a reload swaps a list under traffic with every packet counted; a bad list file is refused
//! with its file and line and the running filter stays.

mod common;

use common::*;
use std::collections::BTreeMap;

const ME: [u8; 4] = [192, 0, 2, 1];
const DENIED: [u8; 4] = [198, 51, 100, 7];
const ADMITTED: [u8; 4] = [203, 0, 113, 9];
/// Admitted by `[filter]`, not in the service's allow list.
const NOT_ALLOWED: [u8; 4] = [203, 0, 113, 200];

fn v6(s: &str) -> [u8; 16] {
    s.parse::<std::net::Ipv6Addr>().unwrap().octets()
}

fn config(name: &str, rx: &str, extra: &str) -> String {
    format!(
        "[dpdk]\neal_args = {}\nmbufs = 8191\n\n[[port]]\ndevice = \"net_pcap0\"\ntx_queues = 2\n\
         ipv4 = [\"192.0.2.1\"]\nipv6 = [\"2001:db8::1\"]\nmac = \"02:00:00:00:00:01\"\n\n\
         [lcores]\nrx = [0]\nworkers = [1]\nidle_sleep_us = 100\n{METRICS_ANY_PORT}cache_ms = 0\n\n\
         [filter]\ndeny_file = \"deny.txt\"\n\n\
         [[service]]\nname = \"dns\"\nports = [53]\nsockets = 2\naction = \"sink\"\n\
         allow = [\"203.0.113.0/28\", \"198.51.100.0/24\"]\n{extra}",
        eal_args(
            name,
            &[format!(
                "--vdev=net_pcap0,rx_pcap={rx},tx_pcap=/dev/null,tx_pcap=/dev/null"
            )]
        ),
    )
}

fn metric(m: &BTreeMap<String, f64>, series: &str) -> f64 {
    m.get(series).copied().unwrap_or(0.0)
}

fn refused(m: &BTreeMap<String, f64>, filter: &str, list: &str) -> f64 {
    metric(
        m,
        &format!("fastpath_filtered_total{{filter=\"{filter}\",list=\"{list}\"}}"),
    )
}

#[test]
fn filters_refuse_by_list_and_leave_arp_and_admitted_sources_alone() {
    let s = Scratch::new("filter-exact");
    s.write("deny.txt", "# a feed\n198.51.100.0/24\n2001:db8:bad::/48  # v6\n");
    let mut frames = Vec::new();
    for i in 0..10u8 {
        frames.push(udp_frame(DENIED, ME, 5000 + i as u16, 53, b"denied"));
        frames.push(udp_frame(ADMITTED, ME, 5000 + i as u16, 53, b"admitted"));
        frames.push(udp_frame(NOT_ALLOWED, ME, 5000 + i as u16, 53, b"not allowed"));
    }
    for _ in 0..5 {
        frames.push(ipv6_frame(
            v6("2001:db8:bad::1"),
            v6("2001:db8::1"),
            17,
            &udp(4000, 53, b"v6"),
        ));
    }
    frames.push(echo_request(DENIED, ME));
    frames.push(echo_request(ADMITTED, ME));
    frames.push(arp_request(DENIED, ME));
    for _ in 0..3 {
        frames.push(udp_frame(ADMITTED, ME, 4000, 9, b"closed"));
    }
    // The port's own deny list, after [filter]'s.
    for _ in 0..4 {
        frames.push(udp_frame([198, 18, 5, 5], ME, 4000, 53, b"port"));
    }
    let cap = s.write_bytes("in.pcap", &pcap(&frames));
    let text = config("filter-exact", &cap.display().to_string(), "").replace(
        "mac = \"02:00:00:00:00:01\"\n",
        "mac = \"02:00:00:00:00:01\"\ndeny = [\"198.18.0.0/15\"]\n",
    );
    let cfg = s.write("c.toml", &text);
    let m = run_to_idle(&s, &cfg, 300);
    let n = assert_conservation(&m);
    assert_eq!(n as usize, frames.len());
    assert_eq!(
        refused(&m, "filter", "deny"),
        10.0 + 5.0 + 1.0,
        "UDP, IPv6 and the echo request"
    );
    assert_eq!(refused(&m, "filter", "allow"), 0.0);
    assert_eq!(refused(&m, "service:dns", "allow"), 10.0);
    assert_eq!(refused(&m, "port:net_pcap0", "deny"), 4.0);
    assert_eq!(outcome(&m, "filtered"), 30);
    assert_eq!(outcome(&m, "delivered"), 10);
    assert_eq!(outcome(&m, "echo_reply"), 1);
    assert_eq!(outcome(&m, "arp_reply"), 1, "ARP is never filtered");
    assert_eq!(outcome(&m, "icmp_error"), 3);
    assert_eq!(
        metric(&m, "fastpath_filter_prefixes{filter=\"filter\",list=\"deny\"}"),
        2.0
    );
    assert_eq!(
        metric(&m, "fastpath_filter_prefixes{filter=\"service:dns\",list=\"allow\"}"),
        2.0
    );
}

#[test]
fn a_reload_swaps_a_list_under_traffic_and_a_bad_file_keeps_the_running_one() {
    let s = Scratch::new("filter-reload");
    s.write("deny.txt", "198.51.100.0/24\n");
    let frames = vec![
        udp_frame(DENIED, ME, 5000, 53, b"x"),
        udp_frame(ADMITTED, ME, 5000, 53, b"y"),
    ];
    let cap = s.write_bytes("in.pcap", &pcap(&frames));
    let rx = format!("{},infinite_rx=1", cap.display());
    let cfg = s.write("c.toml", &config("filter-reload", &rx, ""));
    let d = Daemon::start(&s, &["--config", cfg.to_str().unwrap()]);
    wait_for(20, "the denied source refused", || {
        refused(&d.scrape(), "filter", "deny") > 1000.0
    });
    let before = d.scrape();
    let delivered_before = outcome(&before, "delivered");
    // The other source denied instead, by the file alone: a reload reads it again.
    s.write("deny.txt", "# swapped\n203.0.113.0/24\n");
    d.signal("HUP");
    wait_for(20, "the reload applied", || {
        metric(&d.scrape(), "fastpath_config_reloads_total{result=\"success\"}") == 1.0
    });
    let at = d.scrape();
    wait_for(20, "the admitted source refused now, the other delivered", || {
        let m = d.scrape();
        refused(&m, "filter", "deny") > refused(&at, "filter", "deny") + 1000.0
            && outcome(&m, "delivered") > outcome(&at, "delivered") + 1000
    });
    let m = d.scrape();
    assert!(outcome(&m, "delivered") > delivered_before);
    // A bad line: refused with the file and its line; the running list stays.
    s.write("deny.txt", "203.0.113.0/24\n203.0.113.5/24\n");
    d.signal("HUP");
    wait_for(20, "the reload refused", || {
        metric(&d.scrape(), "fastpath_config_reloads_total{result=\"failure\"}") == 1.0
    });
    let log = d.log_text();
    assert!(
        log.contains("filter.deny_file") && log.contains("deny.txt:2: "),
        "{log}"
    );
    let after_bad = d.scrape();
    wait_for(20, "the running list still refuses", || {
        refused(&d.scrape(), "filter", "deny") > refused(&after_bad, "filter", "deny") + 1000.0
    });
    let (code, log) = d.stop();
    assert_eq!(code, Some(0), "{log}");
}

/// `[source_limit]` through the daemon: a looping capture of one heavy source and a light one
/// to the same service; the heavy one is held to its budget, counted `over_budget`, and every
/// packet has its outcome.
#[test]
fn source_limit_holds_a_heavy_source_to_its_budget() {
    let s = Scratch::new("source-limit");
    s.write("deny.txt", "192.0.2.128/25\n");
    let mut frames = vec![udp_frame(ADMITTED, ME, 5000, 53, b"light")];
    for i in 0..99u16 {
        frames.push(udp_frame(DENIED, ME, 6000 + i, 53, b"heavy"));
    }
    let cap = s.write_bytes("in.pcap", &pcap(&frames));
    let rx = format!("{},infinite_rx=1", cap.display());
    let extra = "\n[source_limit]\nrate = 1000\nburst = 100\nservices = [\"dns\"]\n";
    let cfg = s.write("c.toml", &config("source-limit", &rx, extra));
    let d = Daemon::start(&s, &["--config", cfg.to_str().unwrap()]);
    wait_for(20, "the heavy source held back", || {
        metric(&d.scrape(), "fastpath_source_limited_total{reason=\"over_budget\"}") > 10_000.0
    });
    let m = d.scrape();
    // Each source gets at most its burst plus 1,000 a second: the heavy one's 99% of the
    // traffic is almost all refused, the light one's 1% (at most ~10 kpps here) is not.
    let limited = outcome(&m, "source_limited") as f64;
    let rx_total = family_sum(&m, "fastpath_rx_packets_total");
    assert!(limited > 0.9 * rx_total, "{limited} of {rx_total}");
    assert_eq!(
        metric(&m, "fastpath_source_limited_total{reason=\"newcomer\"}"),
        0.0,
        "two sources, both known at once"
    );
    let (code, log) = d.stop();
    assert_eq!(code, Some(0), "{log}");
}
