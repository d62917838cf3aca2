//! Each lcore's counters: packets and bytes per queue, outcomes, polls, cycles, wake-ups,
//! the generation it runs.

use super::*;

const RX_PACKETS_TOTAL: Def = Def::counter("fastpath_rx_packets_total", "Packets received, per port and RX queue.");
const RX_BYTES_TOTAL: Def = Def::counter(
    "fastpath_rx_bytes_total",
    "Bytes received, per port and RX queue (not counted in the plain forward mode: see fastpath_port_rx_bytes_total).",
);
const TX_PACKETS_TOTAL: Def = Def::counter("fastpath_tx_packets_total", "Packets sent, per port and TX queue.");
const TX_BYTES_TOTAL: Def = Def::counter(
    "fastpath_tx_bytes_total",
    "Bytes sent, per port and TX queue (not counted in the plain forward mode: see fastpath_port_tx_bytes_total).",
);
const PACKETS_TOTAL: Def = Def::counter(
    "fastpath_packets_total",
    "Received packets by outcome; every received packet lands in exactly one outcome.",
);
const LCORE_IDLE_POLLS_TOTAL: Def = Def::counter(
    "fastpath_lcore_idle_polls_total",
    "Loop iterations that found no work, per lcore.",
);
const LCORE_BUSY_POLLS_TOTAL: Def = Def::counter(
    "fastpath_lcore_busy_polls_total",
    "Loop iterations that received packets, per lcore.",
);
const LCORE_WAKEUPS_TOTAL: Def = Def::counter(
    "fastpath_lcore_wakeups_total",
    "Times an idle lcore blocked and woke, by reason: io (a wake-up fd of its RX queues or kernel interfaces had input), bell (another lcore handed it packets, or a stop), timeout (the idle_wait_ms bound passed).",
);
const LCORE_BUSY_CYCLES_TOTAL: Def = Def::counter(
    "fastpath_lcore_busy_cycles_total",
    "TSC cycles spent in loop iterations that received packets, per lcore.",
);
const LCORE_CYCLES_TOTAL: Def = Def::counter(
    "fastpath_lcore_cycles_total",
    "TSC cycles of each lcore's loop by state: busy (iterations that received packets) and idle (iterations that found none, the idle policy's sleep included); their sum is the lcore's time, busy / sum its load.",
);
const LCORE_OUTCOME_CYCLES_TOTAL: Def = Def::counter(
    "fastpath_lcore_outcome_cycles_total",
    "TSC cycles of an RX lcore's sampled polls (one in 64 that received packets), shared among the outcomes their packets took in proportion to their packets; over fastpath_lcore_outcome_sampled_total, an outcome's cycles per packet.",
);
const LCORE_OUTCOME_SAMPLED_TOTAL: Def = Def::counter(
    "fastpath_lcore_outcome_sampled_total",
    "Packets of an RX lcore's sampled polls, by outcome (fastpath_lcore_outcome_cycles_total's divisor).",
);
const LCORE_PACKETS_TOTAL: Def = Def::counter(
    "fastpath_lcore_packets_total",
    "Packets received by the RX queues an lcore polls, per lcore.",
);
const LCORE_CYCLES_PER_PACKET: Def = Def::gauge(
    "fastpath_lcore_cycles_per_packet",
    "Busy TSC cycles per received packet since start, per RX lcore (0 before the first packet); \
         rate(fastpath_lcore_busy_cycles_total) / rate(fastpath_lcore_packets_total) gives it over a window.",
);
const LCORE_IDLE_POLL_RATIO: Def = Def::gauge(
    "fastpath_lcore_idle_poll_ratio",
    "Share of loop iterations since start that found no work, per lcore (0 to 1).",
);
const LCORE_CONFIG_GENERATION: Def = Def::gauge(
    "fastpath_lcore_config_generation",
    "The config generation each lcore runs.",
);
const FLOW_LIMIT_DROPPED_TOTAL: Def = Def::counter(
    "fastpath_flow_limit_dropped_total",
    "Packets shed by the flow limit, per RX lcore.",
);

/// Every family of this area.
pub(super) const FAMILIES: &[Def] = &[
    RX_PACKETS_TOTAL,
    RX_BYTES_TOTAL,
    TX_PACKETS_TOTAL,
    TX_BYTES_TOTAL,
    PACKETS_TOTAL,
    LCORE_IDLE_POLLS_TOTAL,
    LCORE_BUSY_POLLS_TOTAL,
    LCORE_WAKEUPS_TOTAL,
    LCORE_BUSY_CYCLES_TOTAL,
    LCORE_CYCLES_TOTAL,
    LCORE_OUTCOME_CYCLES_TOTAL,
    LCORE_OUTCOME_SAMPLED_TOTAL,
    LCORE_PACKETS_TOTAL,
    LCORE_CYCLES_PER_PACKET,
    LCORE_IDLE_POLL_RATIO,
    LCORE_CONFIG_GENERATION,
    FLOW_LIMIT_DROPPED_TOTAL,
];

/// This area's families and their samples.
pub(super) fn collect(x: &Scrape) -> Named {
    let mut named = queue_families(x.sources, x.counts);
    named.extend(lcore_families(x.sources, x.counts, x.outcomes));
    named
}

/// Packets and bytes per port and queue, as the lcores count them (the packets from `counts`,
/// the lcores' consistent reads, in the order of `s.lcores`).
fn queue_families(s: &Sources, counts: &[PacketCounts]) -> Named {
    let mut rx_p = Vec::new();
    let mut rx_b = Vec::new();
    let mut tx_p = Vec::new();
    let mut tx_b = Vec::new();
    for (l, c) in s.lcores.iter().zip(counts) {
        for (q, &packets) in l.rx.iter().zip(&c.rx) {
            let lb = vec![("port", s.port(q.port)), ("queue", q.queue.to_string())];
            rx_p.push((lb.clone(), packets as f64));
            if q.counts_bytes {
                rx_b.push((lb, q.bytes.get() as f64));
            }
        }
        for q in l.tx.iter() {
            let lb = vec![("port", s.port(q.port)), ("queue", q.queue.to_string())];
            tx_p.push((lb.clone(), q.packets.get() as f64));
            if q.counts_bytes {
                tx_b.push((lb, q.bytes.get() as f64));
            }
        }
    }
    vec![
        (RX_PACKETS_TOTAL, rx_p),
        (RX_BYTES_TOTAL, rx_b),
        (TX_PACKETS_TOTAL, tx_p),
        (TX_BYTES_TOTAL, tx_b),
    ]
}

/// Outcomes, and each lcore's loop: polls, cycles, packets, the generation it runs, and the
/// packets the flow limit shed on each RX lcore.
fn lcore_families(s: &Sources, counts: &[PacketCounts], outcomes: &[u64; Outcome::COUNT]) -> Named {
    let mut idle = Vec::new();
    let mut busy = Vec::new();
    let mut cycles = Vec::new();
    let mut generations = Vec::new();
    let mut lcore_pkts = Vec::new();
    let mut per_packet = Vec::new();
    let mut idle_ratio = Vec::new();
    let mut flow_limited = Vec::new();
    let mut by_state = Vec::new();
    let (mut cost_cycles, mut cost_packets) = (Vec::new(), Vec::new());
    let mut wakeups = Vec::new();
    for (l, c) in s.lcores.iter().zip(counts) {
        for o in Outcome::ALL.iter().filter(|o| l.cost.packets[o.index()].get() > 0) {
            let lb = vec![("lcore", l.lcore.to_string()), ("outcome", o.name().to_string())];
            cost_cycles.push((lb.clone(), l.cost.cycles[o.index()].get() as f64));
            cost_packets.push((lb, l.cost.packets[o.index()].get() as f64));
        }
        for (reason, n) in fastpath::stats::WAKE_REASONS.iter().zip(&l.wakeups) {
            wakeups.push((
                vec![("lcore", l.lcore.to_string()), ("reason", reason.to_string())],
                n.get() as f64,
            ));
        }
        let lb = vec![("lcore", l.lcore.to_string())];
        let (idle_n, busy_n, busy_c) = (l.idle_polls.get(), l.busy_polls.get(), l.busy_cycles.get());
        idle.push((lb.clone(), idle_n as f64));
        busy.push((lb.clone(), busy_n as f64));
        cycles.push((lb.clone(), busy_c as f64));
        for (state, c) in [("busy", busy_c), ("idle", l.idle_cycles.get())] {
            by_state.push((
                vec![("lcore", l.lcore.to_string()), ("state", state.to_string())],
                c as f64,
            ));
        }
        let polls = idle_n + busy_n;
        idle_ratio.push((lb.clone(), if polls == 0 { 0.0 } else { idle_n as f64 / polls as f64 }));
        if !l.rx.is_empty() {
            let pkts = c.rx_packets();
            lcore_pkts.push((lb.clone(), pkts as f64));
            flow_limited.push((lb.clone(), c.outcomes[Outcome::FlowLimited.index()] as f64));
            per_packet.push((lb, if pkts == 0 { 0.0 } else { busy_c as f64 / pkts as f64 }));
        }
        generations.push((vec![("lcore", l.lcore.to_string())], l.generation() as f64));
    }
    let outcome_samples = Outcome::ALL
        .iter()
        .map(|o| (vec![("outcome", o.name().to_string())], outcomes[o.index()] as f64))
        .collect();
    vec![
        (PACKETS_TOTAL, outcome_samples),
        (LCORE_IDLE_POLLS_TOTAL, idle),
        (LCORE_BUSY_POLLS_TOTAL, busy),
        (LCORE_WAKEUPS_TOTAL, wakeups),
        (LCORE_BUSY_CYCLES_TOTAL, cycles),
        (LCORE_CYCLES_TOTAL, by_state),
        (LCORE_OUTCOME_CYCLES_TOTAL, cost_cycles),
        (LCORE_OUTCOME_SAMPLED_TOTAL, cost_packets),
        (LCORE_PACKETS_TOTAL, lcore_pkts),
        (LCORE_CYCLES_PER_PACKET, per_packet),
        (LCORE_IDLE_POLL_RATIO, idle_ratio),
        (LCORE_CONFIG_GENERATION, generations),
        (FLOW_LIMIT_DROPPED_TOTAL, flow_limited),
    ]
}
