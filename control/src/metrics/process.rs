//! The process (TSC rate, mbufs, build, start time) and what the metrics endpoint did.

use super::*;

const TSC_HZ: Def = Def::gauge(
    "fastpath_tsc_hz",
    "TSC ticks per second, to turn cycle counters into time.",
);
const MBUFS_IN_USE: Def = Def::gauge(
    "fastpath_mbufs_in_use",
    "Mbufs allocated from the packet pools (one per NUMA socket with a port) and the reassembly pool right now.",
);
const MBUFS_CAPACITY: Def = Def::gauge(
    "fastpath_mbufs_capacity",
    "Mbufs the pools hold (dpdk.mbufs per packet pool, one per NUMA socket with a port, plus reassembly.buffers): fastpath_mbufs_in_use / fastpath_mbufs_capacity is how full they are.",
);
const BUILD_INFO: Def = Def::gauge("fastpath_build_info", "Build information; the value is always 1.");
const START_TIME_SECONDS: Def = Def::gauge(
    "fastpath_start_time_seconds",
    "Start time of the process since the Unix epoch.",
);
const METRICS_RENDERS_TOTAL: Def = Def::counter(
    "fastpath_metrics_renders_total",
    "Bodies the metrics endpoint rendered; a scrape within [metrics] cache_ms of one (and no reload since) gets its bytes.",
);
const METRICS_CONNECTIONS_EVICTED_TOTAL: Def = Def::counter(
    "fastpath_metrics_connections_evicted_total",
    "Metrics connections waiting for a request closed to let in one more over [metrics] max_connections.",
);
const METRICS_CONNECTIONS_REFUSED_TOTAL: Def = Def::counter(
    "fastpath_metrics_connections_refused_total",
    "Metrics connections answered 503 because every one held had a request in hand.",
);
const METRICS_CONNECTIONS_TIMED_OUT_TOTAL: Def = Def::counter(
    "fastpath_metrics_connections_timed_out_total",
    "Metrics connections closed at a deadline: first_request, idle (keep-alive), head, busy (answer and write).",
);

/// Every family of this area.
pub(super) const FAMILIES: &[Def] = &[
    TSC_HZ,
    MBUFS_IN_USE,
    MBUFS_CAPACITY,
    BUILD_INFO,
    START_TIME_SECONDS,
    METRICS_RENDERS_TOTAL,
    METRICS_CONNECTIONS_EVICTED_TOTAL,
    METRICS_CONNECTIONS_REFUSED_TOTAL,
    METRICS_CONNECTIONS_TIMED_OUT_TOTAL,
];

/// This area's families and their samples.
pub(super) fn collect(x: &Scrape) -> Named {
    let mut named = process_families(x.sources);
    named.extend(http_families(&x.sources.http));
    named
}

/// The process: TSC rate, mbufs in use, build and start time.
fn process_families(s: &Sources) -> Named {
    vec![
        (TSC_HZ, vec![(vec![], s.tsc_hz as f64)]),
        (MBUFS_IN_USE, vec![(vec![], (s.mbufs_in_use)() as f64)]),
        (MBUFS_CAPACITY, vec![(vec![], s.mbufs_capacity as f64)]),
        (
            BUILD_INFO,
            vec![(
                vec![
                    ("version", env!("CARGO_PKG_VERSION").to_string()),
                    ("dpdk_version", s.dpdk_version.clone()),
                ],
                1.0,
            )],
        ),
        (START_TIME_SECONDS, vec![(vec![], s.start_time)]),
    ]
}

/// What the metrics endpoint did.
fn http_families(h: &crate::http::HttpStats) -> Named {
    let one = |c: &std::sync::atomic::AtomicU64| vec![(vec![], c.load(Relaxed) as f64)];
    let timed_out = crate::http::Deadline::ALL
        .iter()
        .map(|&d| {
            (
                vec![("deadline", d.label().to_string())],
                h.timed_out[d as usize].load(Relaxed) as f64,
            )
        })
        .collect();
    vec![
        (METRICS_RENDERS_TOTAL, one(&h.renders)),
        (METRICS_CONNECTIONS_EVICTED_TOTAL, one(&h.evicted)),
        (METRICS_CONNECTIONS_REFUSED_TOTAL, one(&h.refused)),
        (METRICS_CONNECTIONS_TIMED_OUT_TOTAL, timed_out),
    ]
}
