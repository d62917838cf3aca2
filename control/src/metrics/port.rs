//! The NICs' own counters, and how each port was set up.

use super::*;

const PORT_RX_PACKETS_TOTAL: Def = Def::counter(
    "fastpath_port_rx_packets_total",
    "Packets the port received (the NIC's count, rte_eth_stats ipackets).",
);
const PORT_RX_BYTES_TOTAL: Def = Def::counter(
    "fastpath_port_rx_bytes_total",
    "Bytes the port received (rte_eth_stats ibytes).",
);
const PORT_TX_PACKETS_TOTAL: Def = Def::counter(
    "fastpath_port_tx_packets_total",
    "Packets the port sent (rte_eth_stats opackets).",
);
const PORT_TX_BYTES_TOTAL: Def = Def::counter(
    "fastpath_port_tx_bytes_total",
    "Bytes the port sent (rte_eth_stats obytes).",
);
const PORT_RX_MISSED_TOTAL: Def = Def::counter(
    "fastpath_port_rx_missed_total",
    "Packets the NIC dropped because no RX descriptor was free: the RX lcores did not keep up (rte_eth_stats imissed; for net_af_packet, the kernel's drops at its rings).",
);
const PORT_RX_ERRORS_TOTAL: Def = Def::counter(
    "fastpath_port_rx_errors_total",
    "Erroneous packets the port received (rte_eth_stats ierrors).",
);
const PORT_TX_ERRORS_TOTAL: Def = Def::counter(
    "fastpath_port_tx_errors_total",
    "Packets the port failed to send (rte_eth_stats oerrors).",
);
const PORT_RX_NOMBUF_TOTAL: Def = Def::counter(
    "fastpath_port_rx_nombuf_total",
    "RX mbuf allocation failures: the pool ran dry (rte_eth_stats rx_nombuf).",
);
const PORT_XSTATS_TOTAL: Def = Def::counter(
    "fastpath_port_xstats_total",
    "The driver's own extended statistics (rte_eth_xstats), by the driver's name for each: per-queue drops, rx_missed_errors, out_of_buffer, PHY discards, whatever the NIC counts.",
);
const PORT_INFO: Def = Def::gauge(
    "fastpath_port_info",
    "How each port was set up: driver, RSS, RX checksum offloads (ipv4, udp); the value is always 1.",
);
const PORT_LINK_UP: Def = Def::gauge(
    "fastpath_port_link_up",
    "1 while the port's link is up, 0 while down (a port over a kernel interface: that interface's carrier), read by the control thread every 50 ms.",
);

/// Every family of this area.
pub(super) const FAMILIES: &[Def] = &[
    PORT_RX_PACKETS_TOTAL,
    PORT_RX_BYTES_TOTAL,
    PORT_TX_PACKETS_TOTAL,
    PORT_TX_BYTES_TOTAL,
    PORT_RX_MISSED_TOTAL,
    PORT_RX_ERRORS_TOTAL,
    PORT_TX_ERRORS_TOTAL,
    PORT_RX_NOMBUF_TOTAL,
    PORT_XSTATS_TOTAL,
    PORT_INFO,
    PORT_LINK_UP,
];

/// This area's families and their samples.
pub(super) fn collect(x: &Scrape) -> Named {
    port_families(x.sources)
}

/// One sample per port that has counters to give: `field` of its [`PortStats`].
fn port_counter(s: &Sources, field: impl Fn(&PortStats) -> u64) -> Samples<'static> {
    (0..s.port_names.len() as u16)
        .filter(|&id| s.port_info.get(id as usize).is_some_and(Option::is_some))
        .filter_map(|id| (s.port_stats)(id).map(|p| (vec![("port", s.port(id))], field(&p) as f64)))
        .collect()
}

/// The NICs' own counters, and how each port was set up.
fn port_families(s: &Sources) -> Named {
    let info = s
        .port_info
        .iter()
        .enumerate()
        .filter_map(|(id, i)| {
            let i = i.as_ref()?;
            Some((
                vec![
                    ("port", s.port(id as u16)),
                    ("driver", i.driver.clone()),
                    ("rss", if i.rss { "on" } else { "off" }.to_string()),
                    ("rx_checksum_offload", i.rx_checksum_offload.clone()),
                ],
                1.0,
            ))
        })
        .collect();
    let link = (0..s.port_names.len() as u16)
        .filter(|&id| !s.port_names[id as usize].is_empty())
        .filter_map(|id| {
            let up = s.health.link_up(id)?;
            Some((vec![("port", s.port(id))], if up { 1.0 } else { 0.0 }))
        })
        .collect();
    let xstats = (0..s.port_names.len() as u16)
        .filter(|&id| s.port_info.get(id as usize).is_some_and(Option::is_some))
        .flat_map(|id| {
            (s.port_xstats)(id)
                .into_iter()
                .map(move |(name, v)| (vec![("port", s.port(id)), ("name", name)], v as f64))
        })
        .collect();
    vec![
        (PORT_RX_PACKETS_TOTAL, port_counter(s, |p| p.ipackets)),
        (PORT_RX_BYTES_TOTAL, port_counter(s, |p| p.ibytes)),
        (PORT_TX_PACKETS_TOTAL, port_counter(s, |p| p.opackets)),
        (PORT_TX_BYTES_TOTAL, port_counter(s, |p| p.obytes)),
        (PORT_RX_MISSED_TOTAL, port_counter(s, |p| p.imissed)),
        (PORT_RX_ERRORS_TOTAL, port_counter(s, |p| p.ierrors)),
        (PORT_TX_ERRORS_TOTAL, port_counter(s, |p| p.oerrors)),
        (PORT_RX_NOMBUF_TOTAL, port_counter(s, |p| p.rx_nombuf)),
        (PORT_XSTATS_TOTAL, xstats),
        (PORT_INFO, info),
        (PORT_LINK_UP, link),
    ]
}
