//! The services' sockets: depth, pressure, deliveries, rollovers, what workers did.

use super::*;

const SOCKET_QUEUE_DEPTH: Def = Def::gauge("fastpath_socket_queue_depth", "Packets queued in each service socket.");
const SOCKET_CAPACITY: Def = Def::gauge("fastpath_socket_capacity", "Packets each service socket can hold.");
const SOCKET_PRESSURE: Def = Def::gauge(
    "fastpath_socket_pressure",
    "1 while a socket is flagged under pressure (rollover skips it).",
);
const SOCKET_DELIVERED_TOTAL: Def = Def::counter(
    "fastpath_socket_delivered_total",
    "Packets enqueued to each service socket.",
);
const SOCKET_FULL_TOTAL: Def = Def::counter(
    "fastpath_socket_full_total",
    "Packets for a socket that had no room (outcome socket_full).",
);
const ROLLOVER_TOTAL: Def = Def::counter(
    "fastpath_rollover_total",
    "Packets moved from the socket their fanout chose to another.",
);
const ROLLOVER_HUGE_TOTAL: Def = Def::counter(
    "fastpath_rollover_huge_total",
    "Rollovers of a huge flow while its socket still had some room.",
);
const ROLLOVER_FAILED_TOTAL: Def = Def::counter(
    "fastpath_rollover_failed_total",
    "Rollovers that found no socket with normal room.",
);
const SOCKET_PROCESSED_TOTAL: Def = Def::counter(
    "fastpath_socket_processed_total",
    "Packets workers took off each socket, by what the action did (echoed, sunk, kernel, tx_full, invalid, refused).",
);

/// Every family of this area.
pub(super) const FAMILIES: &[Def] = &[
    SOCKET_QUEUE_DEPTH,
    SOCKET_CAPACITY,
    SOCKET_PRESSURE,
    SOCKET_DELIVERED_TOTAL,
    SOCKET_FULL_TOTAL,
    ROLLOVER_TOTAL,
    ROLLOVER_HUGE_TOTAL,
    ROLLOVER_FAILED_TOTAL,
    SOCKET_PROCESSED_TOTAL,
];

/// This area's families and their samples.
pub(super) fn collect(x: &Scrape) -> Named {
    socket_families(x.tables)
}

/// Each service socket of the published generation: depth, pressure, deliveries, rollovers,
/// and what the workers did with its packets.
fn socket_families(tables: &Tables) -> Named {
    let mut depth = Vec::new();
    let mut capacity = Vec::new();
    let mut pressure = Vec::new();
    let mut delivered = Vec::new();
    let mut full = Vec::new();
    let mut rollover = Vec::new();
    let mut huge = Vec::new();
    let mut failed = Vec::new();
    let mut processed = Vec::new();
    for sock in &tables.sockets {
        let lb = vec![("service", sock.service.clone()), ("socket", sock.index.to_string())];
        let c = &sock.counters;
        depth.push((lb.clone(), sock.len() as f64));
        capacity.push((lb.clone(), sock.capacity() as f64));
        pressure.push((lb.clone(), sock.under_pressure() as u8 as f64));
        delivered.push((lb.clone(), c.sum(|x| &x.delivered) as f64));
        full.push((lb.clone(), c.sum(|x| &x.full) as f64));
        rollover.push((lb.clone(), c.sum(|x| &x.rollover) as f64));
        huge.push((lb.clone(), c.sum(|x| &x.rollover_huge) as f64));
        failed.push((lb.clone(), c.sum(|x| &x.rollover_failed) as f64));
        for (result, n) in [
            ("echoed", c.sum(|x| &x.echoed)),
            ("sunk", c.sum(|x| &x.sunk)),
            ("kernel", c.sum(|x| &x.kernel)),
            ("tx_full", c.sum(|x| &x.tx_full)),
            ("invalid", c.sum(|x| &x.invalid)),
            ("refused", c.sum(|x| &x.refused)),
        ] {
            let mut l = lb.clone();
            l.push(("result", result.to_string()));
            processed.push((l, n as f64));
        }
    }
    vec![
        (SOCKET_QUEUE_DEPTH, depth),
        (SOCKET_CAPACITY, capacity),
        (SOCKET_PRESSURE, pressure),
        (SOCKET_DELIVERED_TOTAL, delivered),
        (SOCKET_FULL_TOTAL, full),
        (ROLLOVER_TOTAL, rollover),
        (ROLLOVER_HUGE_TOTAL, huge),
        (ROLLOVER_FAILED_TOTAL, failed),
        (SOCKET_PROCESSED_TOTAL, processed),
    ]
}
