//! The RX lcores' TCP state tables.

use super::*;

const TCP_STATE_TOTAL: Def = Def::counter(
    "fastpath_tcp_state_total",
    "TCP segments of services with tcp_state the RX lcores' TCP state table decided without an entry's say-so, by reason: dropped as tcp_out_of_state (no_flow, rst_no_flow, bad_handshake, syn_over_budget), or admitted (table_full: bucket full of established flows, failing open; learned: mid-stream in the learning window).",
);
const TCP_STATE_ENTRIES: Def = Def::gauge(
    "fastpath_tcp_state_entries",
    "Entries in use in the RX lcores' TCP state tables, by state (established; handshake: a SYN's or a learned flow's, not yet confirmed).",
);

/// Every family of this area.
pub(super) const FAMILIES: &[Def] = &[TCP_STATE_TOTAL, TCP_STATE_ENTRIES];

/// This area's families and their samples.
pub(super) fn collect(x: &Scrape) -> Named {
    tcp_state_families(x.tables)
}

/// The RX lcores' TCP state tables: their decisions by reason, their entries by state.
fn tcp_state_families(tables: &Tables) -> Named {
    use fastpath::pipeline::tcp_state::Reason;
    let c = &tables.tcp_state_counters;
    let on = tables.tcp_state.entries > 0 || c.rx.iter().any(|l| l.table.insertions.get() > 0);
    if !on {
        return vec![(TCP_STATE_TOTAL, Vec::new()), (TCP_STATE_ENTRIES, Vec::new())];
    }
    let reasons = Reason::ALL
        .iter()
        .map(|&r| {
            (
                vec![("reason", Reason::LABELS[r as usize].to_string())],
                c.total(r) as f64,
            )
        })
        .collect();
    let (all, established) = c.rx.iter().fold((0u64, 0u64), |(a, e), l| {
        (a + l.table.entries.get(), e + l.table.confirmed.get())
    });
    let entries = vec![
        (vec![("state", "established".to_string())], established as f64),
        (
            vec![("state", "handshake".to_string())],
            all.saturating_sub(established) as f64,
        ),
    ];
    vec![(TCP_STATE_TOTAL, reasons), (TCP_STATE_ENTRIES, entries)]
}
