//! Prefix filters and `[source_limit]`.

use super::*;

const FILTERED_TOTAL: Def = Def::counter(
    "fastpath_filtered_total",
    "Packets a prefix filter refused (outcome filtered), per filter ([filter]: filter; a port's: port:DEVICE; a service's: service:NAME) and list (deny: in it; allow: not in it).",
);
const FILTER_PREFIXES: Def = Def::gauge(
    "fastpath_filter_prefixes",
    "Prefixes in each filter's list (inline and file, repeats removed).",
);
const SOURCE_LIMITED_TOTAL: Def = Def::counter(
    "fastpath_source_limited_total",
    "Packets [source_limit] refused (outcome source_limited), by reason: over_budget (a known source over its own budget), newcomer (a source not yet in the table, over the newcomers' shared budget).",
);

/// Every family of this area.
pub(super) const FAMILIES: &[Def] = &[FILTERED_TOTAL, FILTER_PREFIXES, SOURCE_LIMITED_TOTAL];

/// This area's families and their samples.
pub(super) fn collect(x: &Scrape) -> Named {
    filter_families(x.tables)
}

/// Each prefix filter of the published generation: what each list refused, and its size.
fn filter_families(tables: &Tables) -> Named {
    use fastpath::pipeline::filter::List;
    let f = &tables.filters;
    let mut refused = Vec::new();
    let mut sizes = Vec::new();
    for flt in f
        .global
        .iter()
        .chain(f.ports.iter().flatten())
        .chain(f.services.iter().flatten())
    {
        for (list, set) in [(List::Deny, &flt.deny), (List::Allow, &flt.allow)] {
            let Some(set) = set else { continue };
            let lb = vec![
                ("filter", flt.name.clone()),
                ("list", List::LABELS[list as usize].to_string()),
            ];
            refused.push((lb.clone(), flt.counters.total(list) as f64));
            sizes.push((lb, set.len() as f64));
        }
    }
    let sl = &tables.source_limit_counters;
    let limited = if tables.source_limit.enabled || sl.rx.iter().flatten().any(|c| c.get() > 0) {
        use fastpath::pipeline::source_limit::Refusal;
        [Refusal::OverBudget, Refusal::Newcomer]
            .into_iter()
            .map(|r| {
                (
                    vec![("reason", Refusal::LABELS[r as usize].to_string())],
                    sl.total(r) as f64,
                )
            })
            .collect()
    } else {
        Vec::new()
    };
    vec![
        (FILTERED_TOTAL, refused),
        (FILTER_PREFIXES, sizes),
        (SOURCE_LIMITED_TOTAL, limited),
    ]
}
