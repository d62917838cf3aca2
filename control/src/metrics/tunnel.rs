//! GRE tunnels, their backends' health, and the workers' connection tables.

use super::*;

const GRE_ENCAP_TOTAL: Def = Def::counter(
    "fastpath_gre_encap_total",
    "Packets encapsulated and sent into each GRE tunnel.",
);
const GRE_DECAP_TOTAL: Def = Def::counter("fastpath_gre_decap_total", "Packets decapsulated from each GRE tunnel.");
const GRE_SEQ_DROPPED_TOTAL: Def = Def::counter(
    "fastpath_gre_seq_dropped_total",
    "Packets of a sequence tunnel dropped by the RFC 2890 receive rule.",
);
const GRE_TOO_BIG_TOTAL: Def = Def::counter(
    "fastpath_gre_too_big_total",
    "Packets too big for the tunnel path after encapsulation.",
);
const GRE_HANDOFF_TOTAL: Def = Def::counter(
    "fastpath_gre_handoff_total",
    "Packets handed to a sequence tunnel's owning worker by another lcore.",
);
const GRE_TX_FULL_TOTAL: Def = Def::counter("fastpath_gre_tx_full_total", "Encapsulated packets a TX queue refused.");
const GRE_RECURSION_DROPPED_TOTAL: Def = Def::counter(
    "fastpath_gre_recursion_dropped_total",
    "Packets nested in more tunnel headers than the recursion limit (3).",
);
const BACKEND_UP: Def = Def::gauge(
    "fastpath_backend_up",
    "1 while the tunnel takes its share of its tunnel services' flows as far as its health check says (always 1 without a check), 0 while its check has failed health_fall times in a row.",
);
const BACKEND_TRANSITIONS_TOTAL: Def = Def::counter(
    "fastpath_backend_transitions_total",
    "Changes of a checked tunnel's health state, by the state it went to (up, down).",
);
const SERVICE_BACKENDS_ALL_DOWN: Def = Def::gauge(
    "fastpath_service_backends_all_down",
    "1 while every backend of a tunnel service fails its health check and the service keeps sending to all of them.",
);
const CONNTRACK_HITS_TOTAL: Def = Def::counter(
    "fastpath_conntrack_hits_total",
    "Packets of tunnel services whose flow had an entry in the worker's connection table.",
);
const CONNTRACK_MISSES_TOTAL: Def = Def::counter(
    "fastpath_conntrack_misses_total",
    "Packets of tunnel services whose flow had no entry (they take the Maglev pick).",
);
const CONNTRACK_INSERTIONS_TOTAL: Def = Def::counter(
    "fastpath_conntrack_insertions_total",
    "Entries inserted (unconfirmed) into a worker's connection table.",
);
const CONNTRACK_EVICTIONS_TOTAL: Def = Def::counter(
    "fastpath_conntrack_evictions_total",
    "Live unconfirmed entries replaced by a new flow (confirmed ones never are).",
);
const CONNTRACK_EXPIRED_TOTAL: Def = Def::counter(
    "fastpath_conntrack_expired_total",
    "Entries removed after their idle timeout.",
);
const CONNTRACK_REFUSED_TOTAL: Def = Def::counter(
    "fastpath_conntrack_refused_total",
    "New flows not tracked: their bucket held only live confirmed entries.",
);
const CONNTRACK_CONFIRMATIONS_TOTAL: Def = Def::counter(
    "fastpath_conntrack_confirmations_total",
    "Entries confirmed (the handshake's ACK, or a packet a second after the first).",
);
const CONNTRACK_REPINNED_TOTAL: Def = Def::counter(
    "fastpath_conntrack_repinned_total",
    "Tracked flows whose backend was removed or down, moved to the Maglev pick.",
);
const CONNTRACK_ENTRIES: Def = Def::gauge(
    "fastpath_conntrack_entries",
    "Entries in use in each worker's connection table, by state.",
);
const CONNTRACK_CAPACITY: Def = Def::gauge(
    "fastpath_conntrack_capacity",
    "Entries each worker's connection table holds at most.",
);
const ICMP_TO_BACKEND_TOTAL: Def = Def::counter(
    "fastpath_icmp_to_backend_total",
    "ICMP errors about a tunnel service's flow: forwarded to the flow's backend, or over the rate limit.",
);

/// Every family of this area.
pub(super) const FAMILIES: &[Def] = &[
    GRE_ENCAP_TOTAL,
    GRE_DECAP_TOTAL,
    GRE_SEQ_DROPPED_TOTAL,
    GRE_TOO_BIG_TOTAL,
    GRE_HANDOFF_TOTAL,
    GRE_TX_FULL_TOTAL,
    GRE_RECURSION_DROPPED_TOTAL,
    BACKEND_UP,
    BACKEND_TRANSITIONS_TOTAL,
    SERVICE_BACKENDS_ALL_DOWN,
    CONNTRACK_HITS_TOTAL,
    CONNTRACK_MISSES_TOTAL,
    CONNTRACK_INSERTIONS_TOTAL,
    CONNTRACK_EVICTIONS_TOTAL,
    CONNTRACK_EXPIRED_TOTAL,
    CONNTRACK_REFUSED_TOTAL,
    CONNTRACK_CONFIRMATIONS_TOTAL,
    CONNTRACK_REPINNED_TOTAL,
    CONNTRACK_ENTRIES,
    CONNTRACK_CAPACITY,
    ICMP_TO_BACKEND_TOTAL,
];

/// This area's families and their samples.
pub(super) fn collect(x: &Scrape) -> Named {
    let mut named = gre_families(x.tables, x.outcomes);
    named.extend(backend_families(x.sources, x.tables));
    named.extend(conntrack_families(x.sources, x.tables));
    named
}

/// Each GRE tunnel of the published generation, and the packets nested too deep.
fn gre_families(tables: &Tables, outcomes: &[u64; Outcome::COUNT]) -> Named {
    let mut gre: [Samples; 6] = Default::default();
    for t in &tables.tunnels {
        let lb = vec![("tunnel", t.name.clone())];
        let c = &t.counters;
        for (i, v) in [
            c.sum(|x| &x.encap),
            c.sum(|x| &x.decap),
            c.sum(|x| &x.seq_dropped),
            c.sum(|x| &x.too_big),
            c.sum(|x| &x.handed_off),
            c.sum(|x| &x.tx_full),
        ]
        .into_iter()
        .enumerate()
        {
            gre[i].push((lb.clone(), v as f64));
        }
    }
    let recursion = vec![(vec![], outcomes[Outcome::GreRecursion.index()] as f64)];
    let [g0, g1, g2, g3, g4, g5] = gre;
    vec![
        (GRE_ENCAP_TOTAL, g0),
        (GRE_DECAP_TOTAL, g1),
        (GRE_SEQ_DROPPED_TOTAL, g2),
        (GRE_TOO_BIG_TOTAL, g3),
        (GRE_HANDOFF_TOTAL, g4),
        (GRE_TX_FULL_TOTAL, g5),
        (GRE_RECURSION_DROPPED_TOTAL, recursion),
    ]
}

/// Each tunnel's health state and changes, and the tunnel services failing open.
fn backend_families(s: &Sources, tables: &Tables) -> Named {
    let checked = s.backends.snapshot();
    let mut up = Vec::new();
    let mut transitions = Vec::new();
    for t in &tables.tunnels {
        let h = checked.iter().find(|h| h.name == t.name);
        up.push((vec![("tunnel", t.name.clone())], h.is_none_or(|h| h.up) as u8 as f64));
        if let Some(h) = h {
            for (to, n) in [("up", h.to_up), ("down", h.to_down)] {
                transitions.push((vec![("tunnel", t.name.clone()), ("to", to.to_string())], n as f64));
            }
        }
    }
    let open = s.backends.failing_open();
    let all_down = tables
        .services
        .services()
        .iter()
        .filter(|svc| matches!(svc.action, fastpath::pipeline::Action::Tunnel(_)))
        .map(|svc| {
            (
                vec![("service", svc.name.clone())],
                open.contains(&svc.name) as u8 as f64,
            )
        })
        .collect();
    vec![
        (BACKEND_UP, up),
        (BACKEND_TRANSITIONS_TOTAL, transitions),
        (SERVICE_BACKENDS_ALL_DOWN, all_down),
    ]
}

/// Each worker's connection table, and the ICMP errors forwarded to backends.
fn conntrack_families(s: &Sources, tables: &Tables) -> Named {
    let workers: Vec<_> = s.lcores.iter().filter(|l| l.conntrack.capacity.get() > 0).collect();
    let per = |f: fn(&fastpath::stats::ConntrackCounters) -> &fastpath::stats::Counter| -> Samples {
        workers
            .iter()
            .map(|l| (vec![("lcore", l.lcore.to_string())], f(&l.conntrack).get() as f64))
            .collect()
    };
    let mut entries = Vec::new();
    for l in &workers {
        let (all, confirmed) = (l.conntrack.entries.get(), l.conntrack.confirmed.get());
        let lc = l.lcore.to_string();
        entries.push((
            vec![("lcore", lc.clone()), ("state", "confirmed".to_string())],
            confirmed as f64,
        ));
        entries.push((
            vec![("lcore", lc), ("state", "unconfirmed".to_string())],
            all.saturating_sub(confirmed) as f64,
        ));
    }
    let icmp = ["forwarded", "limited"]
        .iter()
        .enumerate()
        .map(|(i, r)| {
            let n: u64 = tables.icmp_counters.rx.iter().map(|c| c.to_backend[i].get()).sum();
            (vec![("result", r.to_string())], n as f64)
        })
        .collect();
    vec![
        (CONNTRACK_HITS_TOTAL, per(|c| &c.hits)),
        (CONNTRACK_MISSES_TOTAL, per(|c| &c.misses)),
        (CONNTRACK_INSERTIONS_TOTAL, per(|c| &c.insertions)),
        (CONNTRACK_EVICTIONS_TOTAL, per(|c| &c.evictions)),
        (CONNTRACK_EXPIRED_TOTAL, per(|c| &c.expired)),
        (CONNTRACK_REFUSED_TOTAL, per(|c| &c.refused)),
        (CONNTRACK_CONFIRMATIONS_TOTAL, per(|c| &c.confirmations)),
        (CONNTRACK_REPINNED_TOTAL, per(|c| &c.repinned)),
        (CONNTRACK_ENTRIES, entries),
        (CONNTRACK_CAPACITY, per(|c| &c.capacity)),
        (ICMP_TO_BACKEND_TOTAL, icmp),
    ]
}
