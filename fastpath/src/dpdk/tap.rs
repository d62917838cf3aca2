//! The kernel interface's own backend (`[kernel] offloads`): a multi-queue TAP device opened
//! with virtio-net headers, one queue file per worker, and the offloads those headers carry
//! ([`crate::vnet`]): what a worker writes into the kernel in one burst is coalesced into
//! 64 KB TCP frames (GRO, one `writev` of the mbufs' own bytes per frame), and what the kernel
//! writes may be 64 KB TCP frames (TSO, `TUNSETOFFLOAD`) that the worker cuts into segments.
//! `net_tap` does neither: a system call per packet each way, and the kernel's per-packet cost
//! for every segment of a transfer.
//!
//! The device is not a DPDK port: the tables know it by an id past every DPDK port's
//! ([`TAP_ID_BASE`]); its queues are the same [`WorkerTx`] / [`KernelRx`] handles a worker
//! holds for DPDK queues. No `unsafe` here: the ioctls are `dpdk_sys::tun`'s safe wrappers, the
//! reads and writes plain `std`.

use super::{Mbuf, Mempool, RxQueue, TxQueue};
use crate::pipeline::kernel::{KernelCounters, KernelPortCounters};
use crate::tx::{Transmit, BURST};
use crate::vnet::{self, HDR_LEN, HEAD_MAX, MAX_SEGMENTS};
use dpdk_sys::tun;
use std::fs::File;
use std::io::{self, IoSlice, Read, Write};
use std::os::unix::fs::OpenOptionsExt;
use std::sync::Arc;

/// The first id of a TAP kernel interface: past every DPDK port id (`RTE_MAX_ETHPORTS`), so
/// the tables indexed by port id never mix the two.
pub const TAP_ID_BASE: u16 = dpdk_sys::RTE_MAX_ETHPORTS as u16;

/// A multi-queue TAP device with virtio-net headers; it disappears when its last queue file
/// closes (the device and every worker's handle).
#[derive(Debug)]
pub struct TapDevice {
    name: String,
    id: u16,
    queues: Vec<File>,
}

impl TapDevice {
    /// Creates interface `name` with `queues` queues, known to the tables as `id`.
    pub fn open(name: &str, id: u16, queues: usize) -> io::Result<TapDevice> {
        let mut files = Vec::new();
        for _ in 0..queues.max(1) {
            let f = std::fs::OpenOptions::new()
                .read(true)
                .write(true)
                .custom_flags(libc::O_NONBLOCK)
                .open("/dev/net/tun")?;
            let flags = tun::IFF_TAP | tun::IFF_NO_PI | tun::IFF_MULTI_QUEUE | tun::IFF_VNET_HDR;
            tun::attach(&f, name, flags)?;
            tun::set_vnet_hdr_size(&f, HDR_LEN as i32)?;
            tun::set_offload(
                &f,
                tun::TUN_F_CSUM | tun::TUN_F_TSO4 | tun::TUN_F_TSO6 | tun::TUN_F_TSO_ECN,
            )?;
            files.push(f);
        }
        Ok(TapDevice {
            name: name.to_string(),
            id,
            queues: files,
        })
    }

    /// The id the tables know it by.
    pub fn id(&self) -> u16 {
        self.id
    }

    /// The interface's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Queue `q`'s handles for the worker that owns it: writing (into the kernel) and reading
    /// (what the kernel wrote, in buffers from `pool`).
    pub fn queue(&self, q: u16, pool: Arc<Mempool>) -> io::Result<(TapTx, TapRx)> {
        let f = self
            .queues
            .get(q as usize)
            .ok_or_else(|| io::Error::new(io::ErrorKind::NotFound, format!("no queue {q}")))?;
        let tx = TapTx {
            file: f.try_clone()?,
            port: self.id,
            queue: q,
            head: [0; HEAD_MAX],
            done: Vec::with_capacity(BURST),
            counters: None,
        };
        let rx = TapRx {
            file: f.try_clone()?,
            port: self.id,
            queue: q,
            pool,
            buf: vec![0u8; HDR_LEN + vnet::FRAME_MAX].into_boxed_slice(),
            pending: Vec::with_capacity(BURST + 2 * MAX_SEGMENTS),
            counters: None,
        };
        Ok((tx, rx))
    }
}

/// Where a queue counts what its offloads did: `KernelCounters::slots[worker][port index]`.
type CounterSlot = Option<(Arc<KernelCounters>, usize, usize)>;

fn slot(c: &CounterSlot) -> Option<&KernelPortCounters> {
    c.as_ref().and_then(|(k, w, i)| k.slots.get(*w).and_then(|s| s.get(*i)))
}

/// A worker's TX queue of a TAP kernel interface: each burst written coalesced ([`vnet::coalesce`]).
pub struct TapTx {
    file: File,
    port: u16,
    queue: u16,
    /// The head of the frame being written (virtio-net header and coalesced headers).
    head: [u8; HEAD_MAX],
    /// What was written, freed once a burst.
    done: Vec<Mbuf>,
    counters: CounterSlot,
}

impl TapTx {
    /// Counts packets written inside coalesced frames in `counters.slots[worker][index].coalesced`.
    pub fn with_counters(mut self, counters: Arc<KernelCounters>, worker: usize, index: usize) -> Self {
        self.counters = Some((counters, worker, index));
        self
    }

    /// Writes `pkts[..run.count]` as one frame behind `head`.
    fn write(file: &File, head: &[u8], pkts: &[Mbuf], run: &vnet::Run) -> bool {
        use crate::buf::PacketBuf;
        let mut iov = [IoSlice::new(&[]); MAX_SEGMENTS + 1];
        iov[0] = IoSlice::new(head);
        for (k, p) in pkts[..run.count].iter().enumerate() {
            iov[k + 1] = IoSlice::new(run.part(p.data()));
        }
        loop {
            // A TAP write takes the whole frame or fails; it never blocks (O_NONBLOCK).
            match (&*file).write_vectored(&iov[..run.count + 1]) {
                Ok(_) => return true,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(_) => return false,
            }
        }
    }
}

impl Transmit<Mbuf> for TapTx {
    fn port(&self) -> u16 {
        self.port
    }

    fn send(&mut self, pkts: &mut Vec<Mbuf>) -> usize {
        let mut at = 0;
        while at < pkts.len() {
            let run = vnet::coalesce(&pkts[at..], &mut self.head);
            if Self::write(&self.file, &self.head[..run.head_len], &pkts[at..], &run) {
                if run.count > 1 {
                    if let Some(c) = slot(&self.counters) {
                        c.coalesced.add(run.count as u64);
                    }
                }
                at += run.count;
                continue;
            }
            if run.count == 1 {
                // Refused (the interface is down, or the kernel is out of memory): the rest
                // stays with the caller, which counts it `interface_full`.
                break;
            }
            // A coalesced frame refused: the packets one by one, as without offloads.
            let zero = [0u8; HDR_LEN];
            let alone = vnet::Run {
                count: 1,
                head_len: HDR_LEN,
                from: 0,
            };
            let mut written = 0;
            while written < run.count && Self::write(&self.file, &zero, &pkts[at + written..], &alone) {
                written += 1;
            }
            at += written;
            if written < run.count {
                break;
            }
        }
        self.done.extend(pkts.drain(..at));
        Mbuf::free_bulk(&mut self.done);
        at
    }
}

/// A worker's RX queue of a TAP kernel interface: what the kernel wrote, its large TCP frames
/// cut into segments ([`vnet::segment`]).
pub struct TapRx {
    file: File,
    port: u16,
    queue: u16,
    pool: Arc<Mempool>,
    /// One frame as the kernel wrote it, header first (preallocated: 64 KB).
    buf: Box<[u8]>,
    /// Segments cut and not yet handed out (a 64 KB frame is more than a burst).
    pending: Vec<Mbuf>,
    counters: CounterSlot,
}

impl TapRx {
    /// Counts segments cut from the kernel's large frames (`segmented`) and frames dropped
    /// (`invalid`: no buffer, or malformed) in `counters.slots[worker][index]`.
    pub fn with_counters(mut self, counters: Arc<KernelCounters>, worker: usize, index: usize) -> Self {
        self.counters = Some((counters, worker, index));
        self
    }

    /// Reads frames until the spare capacity of `out` (at most a burst) can be filled or the
    /// kernel has no more; appends that many packets to `out` (the rest of a cut frame waits
    /// for the next call), returns how many.
    pub fn recv(&mut self, out: &mut Vec<Mbuf>) -> usize {
        let want = out.capacity().saturating_sub(out.len()).min(BURST);
        while self.pending.len() < want {
            let n = match (&self.file).read(&mut self.buf) {
                Ok(n) => n,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(_) => break,
            };
            let (counters, pool) = (slot(&self.counters), &self.pool);
            // A frame longer than the buffer is reported at its full length, cut short: dropped.
            let hdr = vnet::VnetHdr::parse(&self.buf[..n.min(self.buf.len())]).filter(|_| n < self.buf.len());
            let alloc = |len: usize| pool.alloc().filter(|m| m.tailroom() >= len);
            match hdr.map(|h| (h, vnet::segment(&h, &self.buf[HDR_LEN..n], alloc, &mut self.pending))) {
                Some((h, Ok(k))) if h.gso_type != vnet::GSO_NONE => {
                    if let Some(c) = counters {
                        c.segmented.add(k as u64);
                    }
                }
                Some((_, Ok(_))) => {}
                _ => {
                    if let Some(c) = counters {
                        c.invalid.inc();
                    }
                }
            }
        }
        let k = want.min(self.pending.len());
        out.extend(self.pending.drain(..k));
        k
    }
}

/// A worker's TX queue: a DPDK port's or a TAP kernel interface's.
pub enum WorkerTx {
    /// A DPDK port's (a `net_tap` or virtio-user kernel interface's too).
    Port(TxQueue),
    /// A TAP kernel interface's.
    Tap(TapTx),
}

impl WorkerTx {
    /// The port (or kernel interface) id.
    pub fn port(&self) -> u16 {
        match self {
            WorkerTx::Port(q) => q.port(),
            WorkerTx::Tap(q) => q.port,
        }
    }
    /// The queue index.
    pub fn queue(&self) -> u16 {
        match self {
            WorkerTx::Port(q) => q.queue(),
            WorkerTx::Tap(q) => q.queue,
        }
    }
}

impl Transmit<Mbuf> for WorkerTx {
    #[inline(always)]
    fn port(&self) -> u16 {
        WorkerTx::port(self)
    }
    #[inline]
    fn send(&mut self, pkts: &mut Vec<Mbuf>) -> usize {
        match self {
            WorkerTx::Port(q) => q.send(pkts),
            WorkerTx::Tap(q) => q.send(pkts),
        }
    }
}

/// A worker's RX queue of a kernel interface: a DPDK port's or a TAP device's.
pub enum KernelRx {
    /// A `net_tap` or virtio-user port's.
    Port(RxQueue),
    /// A TAP kernel interface's.
    Tap(TapRx),
}

impl KernelRx {
    /// The interface's id.
    pub fn port(&self) -> u16 {
        match self {
            KernelRx::Port(q) => q.port(),
            KernelRx::Tap(q) => q.port,
        }
    }
    /// The queue index.
    pub fn queue(&self) -> u16 {
        match self {
            KernelRx::Port(q) => q.queue(),
            KernelRx::Tap(q) => q.queue,
        }
    }
    /// An fd that poll() reports readable while the kernel has written something (the TAP
    /// queue's own; a port's RX interrupt), for an idle worker to block on. Segments of a cut
    /// frame still pending are handed out before a poll can come back empty.
    pub fn wake_fd(&self) -> Option<std::os::fd::RawFd> {
        match self {
            KernelRx::Port(q) => q.wake_fd(),
            KernelRx::Tap(q) => Some(std::os::fd::AsRawFd::as_raw_fd(&q.file)),
        }
    }
    /// Receives a burst; how many.
    #[inline]
    pub fn recv(&mut self, out: &mut Vec<Mbuf>) -> usize {
        match self {
            KernelRx::Port(q) => q.recv(out),
            KernelRx::Tap(q) => q.recv(out),
        }
    }
}
