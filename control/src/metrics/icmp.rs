//! The ICMP errors sent and held back.

use super::*;

const ICMP_SENT_TOTAL: Def = Def::counter(
    "fastpath_icmp_sent_total",
    "ICMP and ICMPv6 errors sent, by family and type.",
);
const ICMP_RATE_LIMITED_TOTAL: Def = Def::counter(
    "fastpath_icmp_rate_limited_total",
    "ICMP errors held back by a rate limit (global or per destination), by family.",
);

/// Every family of this area.
pub(super) const FAMILIES: &[Def] = &[ICMP_SENT_TOTAL, ICMP_RATE_LIMITED_TOTAL];

/// This area's families and their samples.
pub(super) fn collect(x: &Scrape) -> Named {
    icmp_families(x.tables)
}

/// ICMP errors sent by family and type, and held back by family and limit.
fn icmp_families(tables: &Tables) -> Named {
    use fastpath::pipeline::icmp_error::{Limit, FAMILY_LABELS, TYPE_LABELS};
    let mut sent = Vec::new();
    let mut limited = Vec::new();
    for (fi, fam) in FAMILY_LABELS.iter().enumerate() {
        for (ti, ty) in TYPE_LABELS.iter().enumerate() {
            let n: u64 = tables.icmp_counters.rx.iter().map(|c| c.sent[fi][ti].get()).sum();
            sent.push((vec![("family", fam.to_string()), ("type", ty.to_string())], n as f64));
        }
        for l in Limit::ALL {
            let n: u64 = tables
                .icmp_counters
                .rx
                .iter()
                .map(|c| c.limited[fi][l.index()].get())
                .sum();
            limited.push((
                vec![("family", fam.to_string()), ("limit", l.label().to_string())],
                n as f64,
            ));
        }
    }
    vec![(ICMP_SENT_TOTAL, sent), (ICMP_RATE_LIMITED_TOTAL, limited)]
}
