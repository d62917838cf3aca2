//! Reassembly.

use super::*;

const REASM_COMPLETED_TOTAL: Def = Def::counter("fastpath_reasm_completed_total", "Datagrams reassembled, per family.");
const REASM_TIMEOUTS_TOTAL: Def = Def::counter(
    "fastpath_reasm_timeouts_total",
    "Datagrams that did not complete in time, per family.",
);
const REASM_REFUSED_TOTAL: Def = Def::counter(
    "fastpath_reasm_refused_total",
    "Fragments refused or dropped, per family and reason.",
);
const REASM_MEMORY_BYTES: Def = Def::gauge(
    "fastpath_reasm_memory_bytes",
    "Bytes of fragments held for reassembly, per RX lcore.",
);
const REASM_HELD_FRAGMENTS: Def = Def::gauge(
    "fastpath_reasm_held_fragments",
    "Fragments held for reassembly, per RX lcore: received, their outcome not yet counted. \
         At every scrape sum(fastpath_rx_packets_total) == sum(fastpath_packets_total) + \
         sum(fastpath_reasm_held_fragments).",
);

/// Every family of this area.
pub(super) const FAMILIES: &[Def] = &[
    REASM_COMPLETED_TOTAL,
    REASM_TIMEOUTS_TOTAL,
    REASM_REFUSED_TOTAL,
    REASM_MEMORY_BYTES,
    REASM_HELD_FRAGMENTS,
];

/// This area's families and their samples.
pub(super) fn collect(x: &Scrape) -> Named {
    reasm_families(x.sources, x.counts)
}

/// Reassembly per family (completed, timed out, refused by reason), memory and fragments held
/// per RX lcore.
fn reasm_families(s: &Sources, counts: &[PacketCounts]) -> Named {
    use fastpath::pipeline::reasm::{Family, Reason};
    let rx_lcores: Vec<_> = s.lcores.iter().filter(|l| !l.rx.is_empty()).collect();
    let mut completed = Vec::new();
    let mut timeouts = Vec::new();
    let mut refused = Vec::new();
    for f in Family::ALL {
        let fi = f.index();
        let fl = f.label().to_string();
        completed.push((
            vec![("family", fl.clone())],
            rx_lcores.iter().map(|l| l.reasm.completed[fi].get()).sum::<u64>() as f64,
        ));
        timeouts.push((
            vec![("family", fl.clone())],
            rx_lcores.iter().map(|l| l.reasm.timeouts[fi].get()).sum::<u64>() as f64,
        ));
        for r in Reason::ALL {
            let n: u64 = rx_lcores.iter().map(|l| l.reasm.refused[fi][r.index()].get()).sum();
            refused.push((
                vec![("family", fl.clone()), ("reason", r.label().to_string())],
                n as f64,
            ));
        }
    }
    let memory = rx_lcores
        .iter()
        .map(|l| (vec![("lcore", l.lcore.to_string())], l.reasm.memory.get() as f64))
        .collect();
    // Read with the packets and outcomes (`counts`), so that the three balance.
    let held = s
        .lcores
        .iter()
        .zip(counts)
        .filter(|(l, _)| !l.rx.is_empty())
        .map(|(l, c)| (vec![("lcore", l.lcore.to_string())], c.held as f64))
        .collect();
    vec![
        (REASM_COMPLETED_TOTAL, completed),
        (REASM_TIMEOUTS_TOTAL, timeouts),
        (REASM_REFUSED_TOTAL, refused),
        (REASM_MEMORY_BYTES, memory),
        (REASM_HELD_FRAGMENTS, held),
    ]
}
