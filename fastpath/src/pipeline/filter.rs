//! Prefix filters: deny and allow lists of source prefixes, for every port (`[filter]`), per
//! port (`[[port]] deny`, `allow`, ...) and per service (`[[service]] deny`, ...). A packet from a source in a deny list, or not in
//! a non-empty allow list, ends `filtered`. The port-wide filter is asked right after the
//! source-validation rule (`source.rs`), before any stage acts on the packet (reassembly, GRE,
//! echo, services, ICMP errors and resets); ARP and Neighbor Discovery are not filtered (the
//! link must keep working). A service's filter is asked once its service is known, before the
//! fanout. Lookups are [`PrefixSet`]'s: a bounded number of loads whatever the list's size.

use super::prefix::PrefixSet;
use crate::stats::Counter;
use std::net::{Ipv4Addr, Ipv6Addr};
use std::sync::Arc;

crate::label_set! {
    /// Which list refused a packet: the `list` label.
    pub enum List {
        /// In the deny list.
        Deny => "deny",
        /// Not in the allow list.
        Allow => "allow",
    }
}

/// Refusals per list, per RX lcore (each lcore writes its own slot).
#[derive(Debug, Default)]
pub struct FilterCounters {
    /// By RX lcore slot: refused by the deny list, by the allow list.
    pub rx: Box<[[Counter; 2]]>,
}

impl FilterCounters {
    /// Zeroed counters for `rx` RX lcores.
    pub fn new(rx: usize) -> Self {
        FilterCounters {
            rx: (0..rx).map(|_| [Counter::default(), Counter::default()]).collect(),
        }
    }

    /// The total refused by `list`, every lcore.
    pub fn total(&self, list: List) -> u64 {
        self.rx.iter().map(|c| c[list as usize].get()).sum()
    }
}

/// One filter: a deny list, an allow list, or both.
#[derive(Debug, Default)]
pub struct Filter {
    /// Its name in metrics (`filter`, or `service:NAME`).
    pub name: String,
    /// Sources refused.
    pub deny: Option<PrefixSet>,
    /// If present, the only sources admitted.
    pub allow: Option<PrefixSet>,
    /// What it refused (kept across reloads by the control side, by name).
    pub counters: Arc<FilterCounters>,
}

impl Filter {
    /// Whether it refuses an IPv4 source, and by which list.
    #[inline]
    pub fn refuses_v4(&self, src: Ipv4Addr) -> Option<List> {
        if self.deny.as_ref().is_some_and(|d| d.contains_v4(src)) {
            return Some(List::Deny);
        }
        match &self.allow {
            Some(a) if !a.contains_v4(src) => Some(List::Allow),
            _ => None,
        }
    }

    /// Whether it refuses an IPv6 source, and by which list.
    #[inline]
    pub fn refuses_v6(&self, src: &Ipv6Addr) -> Option<List> {
        if self.deny.as_ref().is_some_and(|d| d.contains_v6(src)) {
            return Some(List::Deny);
        }
        match &self.allow {
            Some(a) if !a.contains_v6(src) => Some(List::Allow),
            _ => None,
        }
    }

    /// [`Filter::refuses_v4`] / [`Filter::refuses_v6`] for any address.
    pub fn refuses(&self, src: std::net::IpAddr) -> Option<List> {
        match src {
            std::net::IpAddr::V4(a) => self.refuses_v4(a),
            std::net::IpAddr::V6(a) => self.refuses_v6(&a),
        }
    }

    /// Counts a refusal on RX lcore `slot`.
    #[inline]
    pub fn count(&self, slot: usize, list: List) {
        if let Some(c) = self.counters.rx.get(slot) {
            c[list as usize].inc();
        }
    }
}

/// Every filter of one generation.
#[derive(Clone, Debug, Default)]
pub struct Filters {
    /// `[filter]`: every port's traffic.
    pub global: Option<Arc<Filter>>,
    /// By DPDK port id: the port's own (`[[port]] deny`, ...), asked after `global`.
    pub ports: Vec<Option<Arc<Filter>>>,
    /// By service index: the service's own.
    pub services: Vec<Option<Arc<Filter>>>,
    /// Some service has one (the fast paths ask nothing otherwise).
    pub any_service: bool,
}

impl Filters {
    /// Whether packets arriving on `port` are filtered port-wide.
    #[inline]
    pub fn port_filtered(&self, port: u16) -> bool {
        self.global.is_some() || self.ports.get(port as usize).is_some_and(Option::is_some)
    }

    /// The port-wide filters of `port`: `[filter]`, then the port's own.
    #[inline]
    pub fn of_port(&self, port: u16) -> impl Iterator<Item = &Filter> {
        self.global
            .as_deref()
            .into_iter()
            .chain(self.ports.get(port as usize).and_then(|f| f.as_deref()))
    }

    /// Service `svc`'s filter.
    #[inline]
    pub fn service(&self, svc: usize) -> Option<&Filter> {
        self.services.get(svc).and_then(|f| f.as_deref())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::pipeline::prefix::Prefix;

    fn set(list: &[&str]) -> Option<PrefixSet> {
        Some(PrefixSet::new(
            &list.iter().map(|p| Prefix::parse(p).unwrap()).collect::<Vec<_>>(),
        ))
    }

    #[test]
    fn deny_first_then_allow_and_counts_per_lcore() {
        let f = Filter {
            name: "filter".into(),
            deny: set(&["198.51.100.0/24", "2001:db8:bad::/48"]),
            allow: set(&["198.51.0.0/16", "2001:db8::/32"]),
            counters: Arc::new(FilterCounters::new(2)),
        };
        let v4 = |s: &str| s.parse::<Ipv4Addr>().unwrap();
        let v6 = |s: &str| s.parse::<Ipv6Addr>().unwrap();
        assert_eq!(
            f.refuses_v4(v4("198.51.100.7")),
            Some(List::Deny),
            "denied though allowed"
        );
        assert_eq!(f.refuses_v4(v4("198.51.7.1")), None);
        assert_eq!(f.refuses_v4(v4("203.0.113.1")), Some(List::Allow));
        assert_eq!(f.refuses_v6(&v6("2001:db8:bad::1")), Some(List::Deny));
        assert_eq!(f.refuses_v6(&v6("2001:db8:1::1")), None);
        assert_eq!(f.refuses_v6(&v6("2001:db9::1")), Some(List::Allow));
        let deny_only = Filter {
            deny: set(&["198.51.100.0/24"]),
            ..Default::default()
        };
        assert_eq!(
            deny_only.refuses_v4(v4("203.0.113.1")),
            None,
            "no allow list: all but the denied"
        );
        f.count(1, List::Deny);
        f.count(1, List::Allow);
        f.count(0, List::Allow);
        f.count(9, List::Allow); // no such slot: not counted, no panic
        assert_eq!((f.counters.total(List::Deny), f.counters.total(List::Allow)), (1, 2));
    }
}
