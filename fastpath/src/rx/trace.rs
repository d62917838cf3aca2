//! The RX engine's traced variant of a burst ([`crate::trace`]): used only while a trace is
//! armed, so the untraced burst keeps its code and its cost.

use super::*;
use crate::pipeline::explain::{socket_pick, SocketPick};
use crate::pipeline::service::Action;
use crate::trace::{Note, Record, Summary, TraceSession};

/// Sockets whose rollover counters a probe reads (a service's group beyond is not described).
const SOCKETS: usize = 64;
/// Tunnels whose counters a probe reads.
const TUNNELS: usize = 32;
/// Fragments held for a record each, whose fate the trace waits for.
const PENDING: usize = 256;
/// Records finished outside a traced burst (a held fragment's fate), waiting to be emitted.
const READY: usize = 32;
/// Fragments released while one packet is handled that the trace keeps apart.
const RELEASED: usize = 64;

/// The trace's per-engine state, made with the engine (nothing allocated while armed).
pub(super) struct TraceScratch {
    /// The identity ([`frag_id`]) of the fragment the traced packet last put into the
    /// reassembler (0: none), which a held fragment's record waits for.
    cur: u64,
    /// Fragments the reassembler released while the packet was handled: identity, outcome.
    released: [(u64, Option<Outcome>); RELEASED],
    n_released: usize,
    /// Held fragments' records: identity, record.
    pending: Box<[Option<(u64, Record)>]>,
    n_pending: usize,
    /// Records a held fragment's fate finished.
    ready: [Option<Record>; READY],
    /// Records that found no room in `pending` or `ready` (reported as lost).
    dropped: u64,
}

impl TraceScratch {
    pub(super) fn new() -> Box<Self> {
        Box::new(TraceScratch {
            cur: 0,
            released: [(0, None); RELEASED],
            n_released: 0,
            pending: vec![None; PENDING].into_boxed_slice(),
            n_pending: 0,
            ready: [None; READY],
            dropped: 0,
        })
    }

    /// The traced packet put the fragment of identity `id` into the reassembler.
    pub(super) fn set_current(&mut self, id: u64) {
        self.cur = id;
    }

    /// Whether held fragments' records wait for their fate.
    #[inline(always)]
    pub(super) fn waiting(&self) -> bool {
        self.n_pending > 0
    }
}

/// A fragment's identity for the trace: its datagram (through its tunnel, as the reassembler
/// keys it) and offset, which stay the same from its insertion to its release whatever buffer
/// holds it.
pub(super) fn frag_id(meta: &FragMeta) -> u64 {
    use std::hash::{Hash, Hasher};
    let mut h = std::hash::DefaultHasher::new();
    meta.key.hash(&mut h);
    meta.offset.hash(&mut h);
    meta.more.hash(&mut h);
    h.finish() | 1
}

/// [`frag_id`] of a fragment the reassembler hands back.
pub(super) fn released_id<B: LcoreBuf>(buf: &B) -> u64 {
    match FragMeta::from_ethernet(buf.data()) {
        Some(mut meta) => {
            if let Some(t) = buf.tunnelled() {
                meta.key = meta.key.through(t.to_word());
            }
            frag_id(&meta)
        }
        None => 0,
    }
}

/// The counters a traced packet can move, read before and after it.
struct Probe {
    outcomes: [u64; Outcome::COUNT],
    icmp_sent: [[u64; crate::pipeline::icmp_error::ErrorType::COUNT]; 2],
    icmp_limited: [[u64; 2]; 2],
    reset_sent: [u64; 2],
    reset_limited: [[u64; 2]; 2],
    tcp_state: [u64; crate::pipeline::tcp_state::Reason::COUNT],
    decap: [u64; TUNNELS],
    seq_dropped: [u64; TUNNELS],
    completed: [u64; 2],
    refused: [[u64; crate::stats::REASM_REFUSAL_REASONS]; 2],
    /// Per socket: rollover, rollover_huge, rollover_failed.
    roll: [[u64; 3]; SOCKETS],
}

impl<B: LcoreBuf, Io: RxIo<B>> RxEngine<B, Io> {
    fn probe(&self) -> Probe {
        let t = self.pipeline.tables();
        let slot = self.pipeline.slot();
        let (icmp, reset) = (self.pipeline.icmp_counters(), self.pipeline.reset_counters());
        let st = &self.stats;
        let mut p = Probe {
            outcomes: std::array::from_fn(|i| st.outcomes[i].get()),
            icmp_sent: std::array::from_fn(|f| std::array::from_fn(|k| icmp.sent[f][k].get())),
            icmp_limited: std::array::from_fn(|f| std::array::from_fn(|l| icmp.limited[f][l].get())),
            reset_sent: std::array::from_fn(|f| reset.sent[f].get()),
            reset_limited: std::array::from_fn(|f| std::array::from_fn(|l| reset.limited[f][l].get())),
            tcp_state: [0; crate::pipeline::tcp_state::Reason::COUNT],
            decap: [0; TUNNELS],
            seq_dropped: [0; TUNNELS],
            completed: std::array::from_fn(|f| st.reasm.completed[f].get()),
            refused: std::array::from_fn(|f| std::array::from_fn(|r| st.reasm.refused[f][r].get())),
            roll: [[0; 3]; SOCKETS],
        };
        if let Some(c) = t.tcp_state_counters.rx.get(slot) {
            p.tcp_state = std::array::from_fn(|r| c.reasons[r].get());
        }
        for (i, tu) in t.tunnels.iter().take(TUNNELS).enumerate() {
            if let Some(c) = tu.counters.rx.get(slot) {
                p.decap[i] = c.decap.get();
                p.seq_dropped[i] = c.seq_dropped.get();
            }
        }
        for (i, s) in t.sockets.iter().take(SOCKETS).enumerate() {
            if let Some(c) = s.counters.rx.get(slot) {
                p.roll[i] = [c.rollover.get(), c.rollover_huge.get(), c.rollover_failed.get()];
            }
        }
        p
    }

    /// [`RxEngine::burst`] while a trace is armed: every packet handled and settled on its own
    /// (staged packets enqueued, answers sent), so that the counters that moved are its own;
    /// those that pass the filter get a record.
    #[cold]
    #[inline(never)]
    pub(super) fn burst_traced(&mut self, qi: usize, port: u16, now: Instant, burst: &mut Vec<B>) {
        let stats = Arc::clone(&self.stats);
        let guard = stats.trace.session();
        let Some(session) = guard.as_deref() else {
            return self.burst_untraced(qi, port, now, burst);
        };
        let queue = stats.rx.get(qi).map_or(0, |q| q.queue);
        let mut bytes = 0u64;
        self.trace_on = true;
        for m in burst.drain(..) {
            bytes += m.pkt_len() as u64;
            let summary = Summary::of(m.data(), m.pkt_len(), &self.pipeline.tables().hasher, m.rss_hash());
            if session.exhausted() || !session.filter.matches_packet(&summary, port, queue) {
                self.receive(port, m, now);
                continue;
            }
            // What came before is settled first: its outcomes are not this packet's.
            self.end_burst();
            self.flush_tx();
            let rec = Record::new(stats.lcore, port, queue, now.0, self.pipeline.generation(), summary);
            let before = self.probe();
            self.trace.cur = 0;
            self.trace.n_released = 0;
            self.receive(port, m, now);
            self.end_burst();
            self.flush_tx();
            let after = self.probe();
            self.finish(rec, &before, &after, session);
            self.trace.cur = 0;
        }
        self.end_burst();
        if let Some(q) = self.stats.rx.get(qi) {
            q.bytes.add(bytes);
        }
        self.emit_ready(session);
        self.trace_on = false;
    }

    /// A traced packet is settled: its outcome and the stages' notes from what moved, emitted
    /// (or held until its fragment's fate).
    fn finish(&mut self, mut rec: Record, b: &Probe, a: &Probe, session: &TraceSession) {
        let mut delta: [u64; Outcome::COUNT] = std::array::from_fn(|i| a.outcomes[i] - b.outcomes[i]);
        // Other fragments whose datagram this packet completed or ended count their own.
        for &(id, o) in &self.trace.released[..self.trace.n_released] {
            if let (true, Some(o)) = (id != self.trace.cur, o) {
                delta[o.index()] = delta[o.index()].saturating_sub(1);
            }
        }
        let own = Outcome::ALL.iter().copied().find(|o| delta[o.index()] > 0);
        let t = Arc::clone(self.pipeline.tables());
        let mut depth = 0;
        for i in 0..t.tunnels.len().min(TUNNELS) {
            for _ in 0..a.decap[i] - b.decap[i] {
                depth += 1;
                rec.push(Note::GreDecap {
                    tunnel: i as u32,
                    depth,
                });
            }
            if a.seq_dropped[i] > b.seq_dropped[i] {
                rec.push(Note::GreSeqDropped { tunnel: i as u32 });
            }
        }
        if a.completed.iter().sum::<u64>() > b.completed.iter().sum::<u64>() {
            rec.push(Note::ReasmCompleted);
        }
        let Some(o) = own else {
            // Held by the reassembler: the record waits for the fragment's fate.
            rec.push(Note::ReasmHeld {
                held: self.reasm.held_fragments() as u32,
                datagrams: self.reasm.datagrams() as u32,
            });
            let id = self.trace.cur;
            match self.trace.pending.iter_mut().find(|p| p.is_none()) {
                Some(slot) if id != 0 => {
                    *slot = Some((id, rec));
                    self.trace.n_pending += 1;
                }
                _ => self.trace.dropped += 1,
            }
            return;
        };
        rec.outcome = o;
        if o == Outcome::ReassemblyRefused {
            for f in 0..2 {
                for r in 0..crate::stats::REASM_REFUSAL_REASONS {
                    if a.refused[f][r] > b.refused[f][r] {
                        rec.push(Note::ReasmRefused { reason: r as u32 });
                    }
                }
            }
        }
        for f in 0..2 {
            for k in 0..5 {
                if a.icmp_sent[f][k] > b.icmp_sent[f][k] {
                    rec.push(Note::IcmpSent { kind: k as u32 });
                }
            }
            for l in 0..2 {
                if a.icmp_limited[f][l] > b.icmp_limited[f][l] {
                    rec.push(Note::IcmpSuppressed { limit: l as u32 });
                }
                if a.reset_limited[f][l] > b.reset_limited[f][l] {
                    rec.push(Note::ResetSuppressed { limit: l as u32 });
                }
            }
            if a.reset_sent[f] > b.reset_sent[f] {
                rec.push(Note::ResetSent);
            }
        }
        for r in 0..crate::pipeline::tcp_state::Reason::COUNT {
            if a.tcp_state[r] > b.tcp_state[r] {
                rec.push(Note::TcpState { reason: r as u32 });
            }
        }
        self.service_notes(&t, &mut rec, a, b, depth);
        if !rec.has_stage(crate::trace::outcome_stage(o)) {
            rec.push(Note::Final(o));
        }
        session.emit(&rec);
    }

    /// The notes of a packet for a service (or the kernel's): fanout, rollover, flow limit,
    /// the punt rule, the socket, a `tunnel` service's Maglev choice.
    fn service_notes(&self, t: &Tables, rec: &mut Record, a: &Probe, b: &Probe, depth: u32) {
        let o = rec.outcome;
        let delivered = matches!(
            o,
            Outcome::Delivered | Outcome::SocketFull | Outcome::Kernel | Outcome::KernelFull
        );
        if o == Outcome::KernelLimited {
            rec.push(Note::KernelLimited);
            return;
        }
        // Of the outer packet: an inner one's flow is not in the summary.
        let hash = rec.summary.ip.filter(|_| depth == 0).map(|ip| ip.hash);
        let to = self.pipeline.delivered_to();
        let group_of = |s: usize| t.services.services().iter().find(|v| v.group.sockets.contains(&s));
        if o == Outcome::FlowLimited {
            let svc = rec.summary.ip.and_then(|ip| {
                let p = crate::trace::flow_protocol(ip.protocol)?;
                let (_, dport) = ip.ports?;
                t.services.lookup(p, dport, &ip.dst).map(|h| h.svc())
            });
            let pick = svc
                .zip(hash)
                .map(|(s, h)| socket_pick(&t.services.services()[s].group, h));
            if let Some(SocketPick::Socket(s)) = pick {
                rec.push(Note::FlowLimited { socket: s as u32 });
            }
            return;
        }
        if !delivered {
            return;
        }
        let moved = |k: usize| (0..t.sockets.len().min(SOCKETS)).find(|&s| a.roll[s][k] > b.roll[s][k]);
        let svc = group_of(to);
        let from = match (svc, hash) {
            (Some(v), Some(h)) => match socket_pick(&v.group, h) {
                SocketPick::Socket(s) => Some(s),
                _ => None,
            },
            _ => None,
        };
        if let Some(f) = moved(1) {
            let seen = hash.map_or(0, |h| t.sockets[f].flow_seen(h) as u32);
            rec.push(Note::Fanout {
                from: f as u32,
                to: to as u32,
            });
            rec.push(Note::RolloverHuge { from: f as u32, seen });
        } else if let Some(f) = moved(0) {
            rec.push(Note::Fanout {
                from: f as u32,
                to: to as u32,
            });
            rec.push(Note::RolloverFull { from: f as u32 });
        } else if let Some(f) = moved(2) {
            rec.push(Note::RolloverFailed { from: f as u32 });
        } else if svc.is_some_and(|v| v.group.sockets.len() > 1) {
            rec.push(Note::Fanout {
                from: from.unwrap_or(to) as u32,
                to: to as u32,
            });
        }
        if t.sockets.get(to).is_some_and(|s| s.kernel) {
            let rule = rec.summary.ip.and_then(|ip| {
                let p = crate::trace::flow_protocol(ip.protocol)?;
                let (_, dport) = ip.ports?;
                let k = t.kernel.as_ref()?;
                k.rules.listed(p, dport).then_some((ip.protocol, dport))
            });
            rec.push(match rule {
                Some((p, port)) => Note::KernelRule {
                    protocol: p as u32,
                    port: port as u32,
                },
                None => Note::KernelUnhandled,
            });
            if o == Outcome::KernelFull {
                rec.push(Note::Final(o));
            }
            return;
        }
        rec.push(Note::Service { socket: to as u32 });
        if o == Outcome::SocketFull {
            rec.push(Note::Final(o));
        }
        if let (Some(v), Some(h)) = (svc, hash) {
            if let Action::Tunnel(set) = &v.action {
                rec.push(Note::Maglev {
                    tunnel: set.pick(h).map_or(u32::MAX, |i| i as u32),
                });
            }
        }
    }

    /// The reassembler released a fragment with outcome `o` (`None`: absorbed into its
    /// datagram): kept apart from the traced packet's own, and a held fragment's record is
    /// finished.
    #[cold]
    pub(super) fn trace_released(&mut self, id: u64, o: Option<Outcome>) {
        let tr = &mut *self.trace;
        if tr.n_released < RELEASED {
            tr.released[tr.n_released] = (id, o);
            tr.n_released += 1;
        }
        if id == tr.cur || tr.n_pending == 0 {
            return;
        }
        let Some(slot) = tr.pending.iter_mut().find(|p| p.is_some_and(|(q, _)| q == id)) else {
            return;
        };
        let Some((_, mut rec)) = slot.take() else {
            return;
        };
        tr.n_pending -= 1;
        let Some(o) = o else {
            return;
        };
        rec.outcome = o;
        rec.push(Note::ReasmLater(o));
        match tr.ready.iter_mut().find(|r| r.is_none()) {
            Some(r) => *r = Some(rec),
            None => tr.dropped += 1,
        }
    }

    /// Hands the finished records of held fragments to the session.
    pub(super) fn emit_ready(&mut self, session: &TraceSession) {
        for r in self.trace.ready.iter_mut() {
            if let Some(rec) = r.take() {
                session.emit(&rec);
            }
        }
        if self.trace.dropped > 0 {
            let lost = session.lost.load(std::sync::atomic::Ordering::Relaxed);
            session
                .lost
                .store(lost + self.trace.dropped, std::sync::atomic::Ordering::Relaxed);
            self.trace.dropped = 0;
        }
    }

    /// After reassembly work outside a burst (expiry, the stop): emits what it finished, or
    /// forgets the held records once the trace is disarmed.
    #[cold]
    pub(super) fn trace_settled(&mut self) {
        let stats = Arc::clone(&self.stats);
        let guard = stats.trace.session();
        match guard.as_deref() {
            Some(s) if stats.trace.is_armed() => self.emit_ready(s),
            _ => {
                self.trace.pending.fill(None);
                self.trace.n_pending = 0;
                self.trace.ready = [None; READY];
                self.trace.dropped = 0;
            }
        }
        self.trace_on = false;
    }
}
