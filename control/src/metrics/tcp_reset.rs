//! The TCP resets sent and held back.

use super::*;

const TCP_RESETS_SENT_TOTAL: Def = Def::counter(
    "fastpath_tcp_resets_sent_total",
    "TCP resets sent for segments to a closed port, by family.",
);
const TCP_RESETS_RATE_LIMITED_TOTAL: Def = Def::counter(
    "fastpath_tcp_resets_rate_limited_total",
    "TCP resets held back by a rate limit (global or per destination), by family.",
);

/// Every family of this area.
pub(super) const FAMILIES: &[Def] = &[TCP_RESETS_SENT_TOTAL, TCP_RESETS_RATE_LIMITED_TOTAL];

/// This area's families and their samples.
pub(super) fn collect(x: &Scrape) -> Named {
    tcp_reset_families(x.tables)
}

/// TCP resets sent by family, and held back by family and limit.
fn tcp_reset_families(tables: &Tables) -> Named {
    use fastpath::pipeline::icmp_error::{Limit, FAMILY_LABELS};
    let counters = &tables.tcp_reset_counters.rx;
    let mut sent = Vec::new();
    let mut limited = Vec::new();
    for (fi, fam) in FAMILY_LABELS.iter().enumerate() {
        let n: u64 = counters.iter().map(|c| c.sent[fi].get()).sum();
        sent.push((vec![("family", fam.to_string())], n as f64));
        for l in Limit::ALL {
            let n: u64 = counters.iter().map(|c| c.limited[fi][l.index()].get()).sum();
            limited.push((
                vec![("family", fam.to_string()), ("limit", l.label().to_string())],
                n as f64,
            ));
        }
    }
    vec![(TCP_RESETS_SENT_TOTAL, sent), (TCP_RESETS_RATE_LIMITED_TOTAL, limited)]
}
