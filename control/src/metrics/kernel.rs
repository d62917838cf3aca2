//! The kernel path, per port.

use super::*;

const KERNEL_PACKETS_TOTAL: Def = Def::counter(
    "fastpath_kernel_packets_total",
    "Packets through each port's kernel interface: written into it (to_kernel) and sent out of the port from it (from_kernel).",
);
const KERNEL_DROPPED_TOTAL: Def = Def::counter(
    "fastpath_kernel_dropped_total",
    "Packets of the kernel path the workers dropped, by reason (interface_full, port_full, invalid); a full kernel queue is the outcome kernel_full.",
);
const KERNEL_OFFLOADED_TOTAL: Def = Def::counter(
    "fastpath_kernel_offloaded_total",
    "Packets of the kernel path carried by the kernel interface's offloads (its TAP backend): written into the kernel inside a coalesced TCP frame (to_kernel), cut out of a large TCP frame the kernel wrote (from_kernel).",
);
const KERNEL_INTERFACE_DROPPED_TOTAL: Def = Def::counter(
    "fastpath_kernel_interface_dropped_total",
    "Packets the kernel dropped at each port's kernel interface, as the kernel counts them: written by fastpathd and dropped at once (to_kernel, rx_dropped), or refused on their way to fastpathd (from_kernel, tx_dropped).",
);

/// Every family of this area.
pub(super) const FAMILIES: &[Def] = &[
    KERNEL_PACKETS_TOTAL,
    KERNEL_DROPPED_TOTAL,
    KERNEL_OFFLOADED_TOTAL,
    KERNEL_INTERFACE_DROPPED_TOTAL,
];

/// This area's families and their samples.
pub(super) fn collect(x: &Scrape) -> Named {
    kernel_families(x.sources, x.tables)
}

/// Each port's kernel path: packets each way, drops by reason, what the offloads carried.
fn kernel_families(s: &Sources, tables: &Tables) -> Named {
    let mut packets = Vec::new();
    let mut dropped = Vec::new();
    let mut offloaded = Vec::new();
    let mut in_kernel = Vec::new();
    if let Some(k) = &tables.kernel {
        for (id, interface) in k.interface_of.iter().enumerate() {
            let (Some(kif), Some(Some(i))) = (interface, k.index_of.get(id)) else {
                continue;
            };
            let (c, i, port) = (&k.counters, *i as usize, s.port(id as u16));
            // The kernel's own counters of the interface (its name is the kernel interface's
            // port name), read from sysfs at the scrape.
            let name = s.port(*kif);
            for (direction, file) in [("to_kernel", "rx_dropped"), ("from_kernel", "tx_dropped")] {
                let path = format!("/sys/class/net/{name}/statistics/{file}");
                if let Some(n) = std::fs::read_to_string(path)
                    .ok()
                    .and_then(|t| t.trim().parse::<u64>().ok())
                {
                    in_kernel.push((
                        vec![("port", port.clone()), ("direction", direction.to_string())],
                        n as f64,
                    ));
                }
            }
            for (direction, n) in [
                ("to_kernel", c.sum(i, |x| &x.to_kernel)),
                ("from_kernel", c.sum(i, |x| &x.from_kernel)),
            ] {
                packets.push((
                    vec![("port", port.clone()), ("direction", direction.to_string())],
                    n as f64,
                ));
            }
            for (direction, n) in [
                ("to_kernel", c.sum(i, |x| &x.coalesced)),
                ("from_kernel", c.sum(i, |x| &x.segmented)),
            ] {
                offloaded.push((
                    vec![("port", port.clone()), ("direction", direction.to_string())],
                    n as f64,
                ));
            }
            for (reason, n) in [
                ("interface_full", c.sum(i, |x| &x.interface_full)),
                ("port_full", c.sum(i, |x| &x.port_full)),
                ("invalid", c.sum(i, |x| &x.invalid)),
            ] {
                dropped.push((vec![("port", port.clone()), ("reason", reason.to_string())], n as f64));
            }
        }
    }
    vec![
        (KERNEL_PACKETS_TOTAL, packets),
        (KERNEL_DROPPED_TOTAL, dropped),
        (KERNEL_OFFLOADED_TOTAL, offloaded),
        (KERNEL_INTERFACE_DROPPED_TOTAL, in_kernel),
    ]
}
