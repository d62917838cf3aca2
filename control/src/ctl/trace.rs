//! `trace` over the control socket: arms a [`TraceSession`] on the chosen RX lcores, streams
//! their records to the client as they come, and disarms when the count is reached, the client
//! goes away, a write stalls, or the daemon stops.
//!
//! The stream, one JSON object a line:
//! - first `{"ok": true, "result": {"lcores": [..], "count": N, "follow": B, "filter": ".."}}`
//!   once every chosen lcore is armed (or `{"ok": false, "error": ".."}`, and the close);
//! - `{"record": {..}}` per packet ([`crate::trace::to_json`]);
//! - `{"lost": N}` whenever the records the lcores' rings refused (the reader fell behind) grow:
//!   the total so far;
//! - last `{"done": {"records": N, "lost": L}}`, and the close.
//!
//! One trace at a time (an lcore holds one session). Each lcore gets a session of its own (its
//! ring has one producer): an RX lcore's asked for the whole count, a worker's for no count of
//! its own (its records follow the packets the RX lcores delivered). The count is of RX
//! records; once it is reached the stream takes what the workers recorded for another
//! [`WORKER_GRACE`], so a packet's worker record follows it; a few RX records past the count
//! are discarded. A session is dropped here, never on an lcore: after the
//! disarm the control side keeps its reference until no lcore holds one.

use fastpath::stats::LcoreStats;
use fastpath::trace::{Filter, Record, TraceSession, RING_RECORDS};
use std::sync::atomic::Ordering::Relaxed;
use std::sync::Arc;

/// How long a trace that reached its count waits for the workers' records of its packets.
pub const WORKER_GRACE: std::time::Duration = std::time::Duration::from_millis(50);

/// A trace armed on some lcores.
pub struct Armed {
    sessions: Vec<(Arc<LcoreStats>, Arc<TraceSession>)>,
}

impl Armed {
    /// Arms a session for `count` records of `filter` on every RX lcore (ids in `rx`) and, with
    /// no record limit of their own, every worker (ids in `workers`) of `lcores`; or only on
    /// `only`.
    pub fn arm(
        lcores: &[Arc<LcoreStats>],
        rx: &[u32],
        workers: &[u32],
        only: Option<u32>,
        filter: Filter,
        count: u64,
    ) -> Result<Armed, String> {
        if let Some(l) = only {
            if !rx.contains(&l) && !workers.contains(&l) {
                let list = |v: &[u32]| v.iter().map(|x| x.to_string()).collect::<Vec<_>>().join(", ");
                return Err(format!(
                    "lcore {l} is neither an RX lcore ({}) nor a worker ({})",
                    list(rx),
                    list(workers)
                ));
            }
        }
        let chosen: Vec<&Arc<LcoreStats>> = lcores
            .iter()
            .filter(|l| (rx.contains(&l.lcore) || workers.contains(&l.lcore)) && only.is_none_or(|o| o == l.lcore))
            .collect();
        if chosen.is_empty() {
            return Err("no lcore to trace".into());
        }
        if chosen.iter().any(|l| l.trace.is_armed()) {
            return Err("a trace is already armed; try again when it ends".into());
        }
        let sessions = chosen
            .into_iter()
            .map(|l| {
                let n = if rx.contains(&l.lcore) { count } else { u64::MAX };
                let s = Arc::new(TraceSession::new(filter, n, RING_RECORDS));
                l.trace.arm(s.clone());
                (l.clone(), s)
            })
            .collect();
        Ok(Armed { sessions })
    }

    /// The armed lcores' ids.
    pub fn lcores(&self) -> Vec<u32> {
        self.sessions.iter().map(|(l, _)| l.lcore).collect()
    }

    /// Takes what the rings hold, up to `max`, in time order.
    pub fn take(&self, max: usize) -> Vec<Record> {
        let mut out = Vec::new();
        for (_, s) in &self.sessions {
            while out.len() < max {
                match s.ring.pop() {
                    Some(r) => out.push(r),
                    None => break,
                }
            }
        }
        out.sort_by_key(|r| (r.time_ns, r.lcore));
        out
    }

    /// Records the rings refused so far.
    pub fn lost(&self) -> u64 {
        self.sessions.iter().map(|(_, s)| s.lost.load(Relaxed)).sum()
    }

    /// Disarms every lcore; the sessions to keep until no lcore holds them.
    pub fn disarm(mut self) -> Disarmed {
        let sessions = std::mem::take(&mut self.sessions);
        for (l, _) in &sessions {
            l.trace.disarm();
        }
        Disarmed {
            sessions: sessions.into_iter().map(|(_, s)| s).collect(),
        }
    }
}

impl Drop for Armed {
    /// The stream ended without [`Armed::disarm`] (the daemon stopping, the task cancelled):
    /// the lcores are disarmed all the same.
    fn drop(&mut self) {
        for (l, _) in &self.sessions {
            l.trace.disarm();
        }
    }
}

/// Sessions disarmed, waiting for the lcores to let go.
pub struct Disarmed {
    sessions: Vec<Arc<TraceSession>>,
}

impl Disarmed {
    /// Whether no lcore holds a session any more (each is ours alone).
    pub fn released(&self) -> bool {
        self.sessions.iter().all(|s| Arc::strong_count(s) == 1)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use fastpath::outcome::Outcome;
    use fastpath::trace::Summary;

    fn lcore(id: u32) -> Arc<LcoreStats> {
        Arc::new(LcoreStats::new(id, vec![], vec![]))
    }

    fn record(lcore: u32, t: u64) -> Record {
        let mut r = Record::new(lcore, 0, 0, t, 1, Summary::default());
        r.outcome = Outcome::Delivered;
        r
    }

    #[test]
    fn arms_the_rx_lcores_or_one_of_them_and_refuses_others_and_a_second_trace() {
        let ls = vec![lcore(0), lcore(1), lcore(2), lcore(3)];
        let (rx, workers) = ([0, 2], [3]);
        let e = Armed::arm(&ls, &rx, &workers, Some(1), Filter::default(), 5)
            .err()
            .unwrap();
        assert!(
            e.contains("lcore 1 is neither an RX lcore (0, 2) nor a worker (3)"),
            "{e}"
        );
        let a = Armed::arm(&ls, &rx, &workers, None, Filter::default(), 5).unwrap();
        assert_eq!(a.lcores(), vec![0, 2, 3]);
        assert!(ls[0].trace.is_armed() && !ls[1].trace.is_armed() && ls[2].trace.is_armed());
        // The worker's session has no count of its own: its records follow the RX lcores'.
        assert_eq!(
            ls[3].trace.session().as_ref().unwrap().remaining.load(Relaxed),
            u64::MAX
        );
        assert_eq!(ls[0].trace.session().as_ref().unwrap().remaining.load(Relaxed), 5);
        let e = Armed::arm(&ls, &rx, &workers, Some(2), Filter::default(), 5)
            .err()
            .unwrap();
        assert!(e.contains("already armed"), "{e}");
        let d = a.disarm();
        assert!(!ls[0].trace.is_armed() && !ls[2].trace.is_armed() && !ls[3].trace.is_armed());
        assert!(d.released());
        let one = Armed::arm(&ls, &rx, &workers, Some(2), Filter::default(), 5).unwrap();
        assert_eq!(one.lcores(), vec![2]);
        drop(one);
        assert!(!ls[2].trace.is_armed(), "dropped: disarmed");
        assert!(Armed::arm(&ls, &[], &[], None, Filter::default(), 5).is_err());
    }

    #[test]
    fn records_come_in_time_order_across_lcores_and_losses_add_up() {
        let ls = vec![lcore(0), lcore(1)];
        let a = Armed::arm(&ls, &[0, 1], &[], None, Filter::default(), u64::MAX).unwrap();
        let s0 = ls[0].trace.session().as_ref().unwrap().clone();
        let s1 = ls[1].trace.session().as_ref().unwrap().clone();
        s0.emit(&record(0, 30));
        s0.emit(&record(0, 10));
        s1.emit(&record(1, 20));
        for i in 0..RING_RECORDS as u64 + 3 {
            s1.emit(&record(1, 100 + i));
        }
        let first = a.take(3);
        // Popped: 30 and 10 from lcore 0, 20 from lcore 1; handed over by time.
        assert_eq!(
            first.iter().map(|r| (r.lcore, r.time_ns)).collect::<Vec<_>>(),
            vec![(0, 10), (1, 20), (0, 30)]
        );
        // lcore 1's ring held RING_RECORDS: 20 and the first RING_RECORDS - 1 of the rest; 4 lost.
        assert_eq!(a.lost(), 4);
        let rest = a.take(usize::MAX);
        assert_eq!(rest.len(), RING_RECORDS - 1);
        // A session an lcore still holds (here: our clones) is not released.
        let d = a.disarm();
        assert!(!d.released());
        drop((s0, s1));
        assert!(d.released());
    }
}
