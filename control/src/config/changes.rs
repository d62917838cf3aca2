//! What a reload changes: the settings only a restart can apply, and the log line of an applied
//! reload.

use super::Config;

impl Config {
    /// The settings that a reload cannot change (they size or start DPDK resources), named by
    /// key, where `new` differs from `self`.
    pub fn restart_only_changes(&self, new: &Config) -> Vec<String> {
        let mut out = Vec::new();
        let d = (&self.dpdk, &new.dpdk);
        if d.0.eal_args != d.1.eal_args {
            out.push("dpdk.eal_args".to_string());
        }
        if d.0.mempool_ops != d.1.mempool_ops {
            out.push("dpdk.mempool_ops".to_string());
        }
        for (k, a, b) in [
            ("dpdk.mbufs", d.0.mbufs as u64, d.1.mbufs as u64),
            ("dpdk.mbuf_cache", d.0.mbuf_cache as u64, d.1.mbuf_cache as u64),
            ("dpdk.rx_desc", d.0.rx_desc as u64, d.1.rx_desc as u64),
            ("dpdk.tx_desc", d.0.tx_desc as u64, d.1.tx_desc as u64),
        ] {
            if a != b {
                out.push(k.to_string());
            }
        }
        if self.ports.len() != new.ports.len() {
            out.push("port (number of [[port]] sections)".to_string());
        }
        for (i, (a, b)) in self.ports.iter().zip(&new.ports).enumerate() {
            if a.device != b.device {
                out.push(format!("port[{i}].device"));
            }
            if a.rx_queues != b.rx_queues {
                out.push(format!("port[{i}].rx_queues"));
            }
            if a.tx_queues != b.tx_queues {
                out.push(format!("port[{i}].tx_queues"));
            }
            if a.mtu != b.mtu {
                out.push(format!("port[{i}].mtu"));
            }
        }
        if self.lcores.rx != new.lcores.rx {
            out.push("lcores.rx".to_string());
        }
        if self.lcores.workers != new.lcores.workers {
            out.push("lcores.workers".to_string());
        }
        if self.lcores.idle_sleep_us != new.lcores.idle_sleep_us {
            out.push("lcores.idle_sleep_us".to_string());
        }
        if self.metrics != new.metrics {
            out.push("metrics.listen".to_string());
        }
        if self.rss.key != new.rss.key {
            out.push("rss.key (programmed into the NICs at start)".to_string());
        }
        if self.rss.symmetric != new.rss.symmetric {
            out.push("rss.symmetric".to_string());
        }
        if self.reassembly_buffers != new.reassembly_buffers {
            out.push("reassembly.buffers".to_string());
        }
        out
    }

    /// What a reload from `self` to `new` changes, one line per change, for the log.
    pub fn describe_changes(&self, new: &Config) -> Vec<String> {
        let mut out = Vec::new();
        if self.icmp != new.icmp {
            out.push("icmp limits changed".to_string());
        }
        if self.reassembly != new.reassembly {
            let (a, b) = (&self.reassembly, &new.reassembly);
            let mut what = Vec::new();
            for (k, x, y) in [
                (
                    "high_thresh_bytes",
                    a.high_thresh_bytes as u64,
                    b.high_thresh_bytes as u64,
                ),
                ("timeout_ms", a.timeout_ns / 1_000_000, b.timeout_ns / 1_000_000),
                ("max_fragments", a.max_fragments as u64, b.max_fragments as u64),
                ("max_per_source", a.max_per_source as u64, b.max_per_source as u64),
                ("max_datagrams", a.max_datagrams as u64, b.max_datagrams as u64),
            ] {
                if x != y {
                    what.push(format!("{k} {x} -> {y}"));
                }
            }
            out.push(format!("reassembly limits {}", what.join(", ")));
        }
        if self.flow_limit != new.flow_limit {
            out.push(format!(
                "flow_limit {} table_len {} -> {} table_len {}",
                if self.flow_limit.enabled { "on" } else { "off" },
                self.flow_limit.table_len,
                if new.flow_limit.enabled { "on" } else { "off" },
                new.flow_limit.table_len
            ));
        }
        for s in &new.services {
            match self.services.iter().find(|o| o.name == s.name) {
                None => out.push(format!("service {:?} added", s.name)),
                Some(o) if o != s => {
                    let mut what = Vec::new();
                    if o.action != s.action {
                        what.push(format!("action {:?} -> {:?}", o.action, s.action));
                    }
                    if o.ports != s.ports || o.protocol != s.protocol || o.addresses != s.addresses {
                        what.push("listen ports/addresses".to_string());
                    }
                    if o.sockets != s.sockets || o.socket_capacity != s.socket_capacity {
                        what.push(format!(
                            "sockets {}x{} -> {}x{}",
                            o.sockets, o.socket_capacity, s.sockets, s.socket_capacity
                        ));
                    }
                    if o.fanout != s.fanout || o.rollover != s.rollover {
                        what.push(format!(
                            "fanout {:?}/rollover {} -> {:?}/{}",
                            o.fanout, o.rollover, s.fanout, s.rollover
                        ));
                    }
                    out.push(format!("service {:?} changed: {}", s.name, what.join(", ")));
                }
                Some(_) => {}
            }
        }
        for o in &self.services {
            if !new.services.iter().any(|s| s.name == o.name) {
                out.push(format!("service {:?} removed", o.name));
            }
        }
        for (i, (a, b)) in self.ports.iter().zip(&new.ports).enumerate() {
            if a.ipv4 != b.ipv4 {
                out.push(format!("port[{i}].ipv4 {:?} -> {:?}", a.ipv4, b.ipv4));
            }
            if a.ipv6 != b.ipv6 {
                out.push(format!("port[{i}].ipv6 {:?} -> {:?}", a.ipv6, b.ipv6));
            }
            if a.mac != b.mac {
                out.push(format!("port[{i}].mac {:?} -> {:?}", a.mac, b.mac));
            }
        }
        out
    }
}
