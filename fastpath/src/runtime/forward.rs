//! The plain forward mode (`[lcores] mode = "forward"`): each burst received on a port leaves
//! unchanged on the RX lcore's TX queue of the port it forwards to, with no stage run. It is
//! what `ci/bench` compares with `dpdk-testpmd --forward-mode=io`, so its loop does per packet
//! what testpmd's io mode does and no more: the queues' bytes are not counted (the daemon gives
//! them packet-only counters; the ports' own counters have the bytes).

use super::{Polls, RunControl, RxLcore};
use crate::dpdk::{Mbuf, TxQueue};
use crate::outcome::Outcome;
use crate::stats::LcoreStats;
use crate::tx::{TxBatch, BURST};

impl RxLcore {
    /// The forward mode's loop: nothing per poll but the accounting every loop does and the
    /// generation check (a reload must see every lcore reach it).
    pub(super) fn run_forward(mut self, to: &[u16], control: &RunControl) {
        let mut idler = self.idler(control);
        let mut burst: Vec<Mbuf> = Vec::with_capacity(BURST);
        let mut polls = Polls::default();
        let stats = self.engine.stats().clone();
        let _running = super::quiesce::Running::new(&stats);
        while !control.stop_requested() {
            let t0 = polls.start(&stats);
            let got = self.poll_queues(&mut burst, |e, _, port, b| {
                let dst = to.get(port as usize).copied().unwrap_or(port);
                let (tx, stats) = e.tx_and_stats();
                forward(tx.get_mut(dst as usize).and_then(Option::as_mut), b, stats);
            });
            if got > 0 {
                // Every packet forwarded or refused, and counted.
                stats.close();
            }
            if let Some(t) = self.published.newer_than(self.engine.pipeline().generation()) {
                self.engine.adopt_tables_only(t);
            }
            polls.end(t0, got, &stats, &mut idler, || true);
        }
        polls.finish(&stats);
        control.rx_exited();
    }
}

/// Sends a whole received burst on `tx` at once; counts it `forwarded`, and what the queue
/// refuses (or all of it, without a queue) `tx_full`, then frees the refused.
#[inline]
fn forward(tx: Option<&mut TxBatch<TxQueue, Mbuf, Option<Outcome>>>, burst: &mut Vec<Mbuf>, stats: &LcoreStats) {
    if let Some(b) = tx {
        let sent = b.send_now(burst, stats);
        stats.outcomes_add(Outcome::Forwarded, sent as u64);
    }
    if !burst.is_empty() {
        stats.outcomes_add(Outcome::TxFull, burst.len() as u64);
        Mbuf::free_bulk(burst);
    }
}
