//! The packet buffer abstraction the pipeline runs over.
//!
//! The pipeline never sees an mbuf: it sees a [`PacketBuf`], implemented by the DPDK mbuf wrapper
//! (`dpdk::Mbuf`) and by [`HeapBuf`], so every stage is unit-tested without DPDK. The data is one
//! contiguous slice (ports are configured without scatter, so received frames are one segment).

/// What the NIC found when it checked one of a received packet's checksums (RX offload): the
/// outermost IPv4 header's ([`PacketBuf::ip_checksum`]) or its UDP or TCP checksum
/// ([`PacketBuf::l4_checksum`]).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum NicChecksum {
    /// Not checked (no offload, not that protocol, or a buffer we built): check it in software.
    #[default]
    Unknown,
    /// The checksum was verified.
    Good,
    /// The checksum is wrong.
    Bad,
}

impl NicChecksum {
    /// Whether the checksum is right: `Good` and `Bad` say so, `Unknown` asks `verify()`.
    #[inline(always)]
    pub fn ok_or(self, verify: impl FnOnce() -> bool) -> bool {
        match self {
            NicChecksum::Good => true,
            NicChecksum::Bad => false,
            NicChecksum::Unknown => verify(),
        }
    }
}

/// The tunnel a packet came through: set on a packet the pipeline decapsulated and handed on
/// (to a socket, or to the reassembler), so that whatever answers it later (a worker's echo, the
/// answer to the reassembled datagram, a Time Exceeded) sends the answer back through the same
/// tunnel and counts the nesting from where it stopped.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Tunnelled {
    /// Index of the innermost tunnel in the tables of `generation`.
    pub tunnel: u16,
    /// GRE headers stripped so far (counts against the nesting limit).
    pub depth: u8,
    /// The low byte of the tables' generation the index belongs to: an index read under another
    /// generation is not trusted.
    pub generation: u8,
}

impl Tunnelled {
    /// As one word (for buffers that keep it in a 32-bit field); never 0.
    #[inline]
    pub fn to_word(self) -> u32 {
        (self.tunnel as u32) | (self.depth as u32) << 16 | (self.generation as u32) << 24 | 1 << 23
    }
    /// From [`Tunnelled::to_word`]; `None` for 0.
    #[inline]
    pub fn from_word(w: u32) -> Option<Self> {
        (w & 1 << 23 != 0).then_some(Tunnelled {
            tunnel: w as u16,
            depth: (w >> 16) as u8 & 0x7f,
            generation: (w >> 24) as u8,
        })
    }
}

/// A packet: one contiguous run of bytes with room to grow at both ends.
pub trait PacketBuf {
    /// The packet bytes.
    fn data(&self) -> &[u8];
    /// The packet bytes, writable.
    fn data_mut(&mut self) -> &mut [u8];
    /// Grows the packet by `n` bytes at the front (for a new outer header). `None` when the
    /// headroom is too small; the packet is then unchanged.
    fn prepend(&mut self, n: usize) -> Option<&mut [u8]>;
    /// Removes `n` bytes from the front. `false` (and no change) when the packet is shorter.
    fn adj(&mut self, n: usize) -> bool;
    /// Grows the packet by `n` bytes at the end. `None` when the tailroom is too small.
    fn append(&mut self, n: usize) -> Option<&mut [u8]>;
    /// Removes `n` bytes from the end. `false` (and no change) when the packet is shorter.
    fn trim(&mut self, n: usize) -> bool;
    /// The hash the NIC computed (RSS), if it supplied one.
    fn rss_hash(&self) -> Option<u32>;
    /// Forgets the NIC's hash: it described headers the packet no longer has (decapsulation).
    fn clear_rss_hash(&mut self);
    /// What the NIC found checking the outermost IPv4 header's checksum (RX offload); only
    /// meaningful for the packet as received.
    fn ip_checksum(&self) -> NicChecksum {
        NicChecksum::Unknown
    }
    /// Whether the outermost IPv4 header's checksum is right: the NIC's verdict
    /// ([`PacketBuf::ip_checksum`]) where it has one, else `verify()`'s. A buffer may decide
    /// from its flags directly, without building the verdict first.
    #[inline(always)]
    fn ip_checksum_ok(&self, verify: impl FnOnce() -> bool) -> bool
    where
        Self: Sized,
    {
        self.ip_checksum().ok_or(verify)
    }
    /// What the NIC found checking the UDP or TCP checksum of the packet as received (RX
    /// offload). Only [`NicChecksum::Good`] may stand in for a software check, and only while
    /// the packet is the one received: a decapsulation clears it
    /// ([`PacketBuf::clear_rx_offload_flags`]).
    fn l4_checksum(&self) -> NicChecksum {
        NicChecksum::Unknown
    }
    /// Forgets what the NIC found about the packet (its hash and checksum verdicts): they
    /// described headers the packet no longer has (decapsulation).
    fn clear_rx_offload_flags(&mut self) {
        self.clear_rss_hash();
    }

    /// The tunnel the packet came through, if the pipeline recorded one (see [`Tunnelled`]).
    fn tunnelled(&self) -> Option<Tunnelled> {
        None
    }
    /// Records the tunnel the packet came through (`None` forgets it).
    fn set_tunnelled(&mut self, t: Option<Tunnelled>) {
        let _ = t;
    }

    /// Whether the reassembler made this datagram from fragments (set on the buffer it builds,
    /// never on a received frame): its sender sent pieces that fit its path.
    fn reassembled(&self) -> bool {
        false
    }
    /// Marks a datagram the reassembler built.
    fn set_reassembled(&mut self) {}

    /// Length of the packet in bytes.
    fn len(&self) -> usize {
        self.data().len()
    }
    /// Whether the packet holds no byte.
    fn is_empty(&self) -> bool {
        self.len() == 0
    }
    /// Drops what follows the first `len` bytes (link-layer padding after a datagram); a
    /// packet no longer than `len` is left as it is.
    #[inline(always)]
    fn trim_to(&mut self, len: usize) {
        let cur = self.len();
        if cur > len {
            let _trimmed = self.trim(cur - len);
        }
    }
    /// Sets the length to `len`, growing or shrinking at the end.
    fn set_len(&mut self, len: usize) -> bool {
        let cur = self.len();
        if len >= cur {
            self.append(len - cur).is_some()
        } else {
            self.trim(cur - len)
        }
    }
}

/// What the lcore loops need of a buffer besides its bytes: the port it arrived on, whether it is
/// one segment, and how to give a batch of them back. The stages never need it.
pub trait LcoreBuf: PacketBuf + Sized {
    /// The port the packet arrived on (or is to leave from).
    fn port(&self) -> u16;
    /// Sets the port (a reassembled datagram takes its fragments' port).
    fn set_port(&mut self, port: u16);
    /// Segments the packet is made of (more than one: too big for the pipeline, `oversize`).
    fn segments(&self) -> u16;
    /// Length on the wire, all segments included.
    fn pkt_len(&self) -> u32;
    /// Frees every buffer of `batch` (a bulk free where the buffer has one).
    fn free_bulk(batch: &mut Vec<Self>);
}

/// Headroom a [`HeapBuf`] keeps by default, the same as DPDK's `RTE_PKTMBUF_HEADROOM`.
pub const DEFAULT_HEADROOM: usize = 128;

/// A heap-backed [`PacketBuf`] with head- and tailroom, for tests and tools.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct HeapBuf {
    storage: Vec<u8>,
    start: usize,
    end: usize,
    rss: Option<u32>,
    ip_checksum: NicChecksum,
    l4_checksum: NicChecksum,
    port: u16,
    segments: u16,
    tunnelled: Option<Tunnelled>,
    reassembled: bool,
}

impl HeapBuf {
    /// A buffer holding `bytes`, with [`DEFAULT_HEADROOM`] in front and `tailroom` behind.
    pub fn with_room(bytes: &[u8], headroom: usize, tailroom: usize) -> Self {
        let mut storage = vec![0u8; headroom + bytes.len() + tailroom];
        storage[headroom..headroom + bytes.len()].copy_from_slice(bytes);
        HeapBuf {
            storage,
            start: headroom,
            end: headroom + bytes.len(),
            rss: None,
            ip_checksum: NicChecksum::Unknown,
            l4_checksum: NicChecksum::Unknown,
            port: 0,
            segments: 1,
            tunnelled: None,
            reassembled: false,
        }
    }

    /// A buffer holding `bytes`, with room like a 2 KiB mbuf.
    pub fn new(bytes: &[u8]) -> Self {
        Self::with_room(bytes, DEFAULT_HEADROOM, 2048usize.saturating_sub(bytes.len()))
    }

    /// Sets the hash a NIC would have supplied.
    pub fn set_rss_hash(&mut self, hash: Option<u32>) {
        self.rss = hash;
    }

    /// Sets what a NIC would have found checking the IPv4 header checksum.
    pub fn set_ip_checksum(&mut self, c: NicChecksum) {
        self.ip_checksum = c;
    }

    /// Sets what a NIC would have found checking the UDP or TCP checksum.
    pub fn set_l4_checksum(&mut self, c: NicChecksum) {
        self.l4_checksum = c;
    }

    /// Marks the buffer as made of `n` segments, as a NIC receiving a frame larger than one
    /// buffer's data room would (the RX engine counts such a packet `oversize`).
    pub fn set_segments(&mut self, n: u16) {
        self.segments = n;
    }
}

impl LcoreBuf for HeapBuf {
    fn port(&self) -> u16 {
        self.port
    }
    fn set_port(&mut self, port: u16) {
        self.port = port;
    }
    fn segments(&self) -> u16 {
        self.segments
    }
    fn pkt_len(&self) -> u32 {
        self.len() as u32
    }
    fn free_bulk(batch: &mut Vec<Self>) {
        batch.clear();
    }
}

impl PacketBuf for HeapBuf {
    fn data(&self) -> &[u8] {
        &self.storage[self.start..self.end]
    }
    fn data_mut(&mut self) -> &mut [u8] {
        &mut self.storage[self.start..self.end]
    }
    fn prepend(&mut self, n: usize) -> Option<&mut [u8]> {
        if n > self.start {
            return None;
        }
        self.start -= n;
        Some(&mut self.storage[self.start..self.end])
    }
    fn adj(&mut self, n: usize) -> bool {
        if n > self.end - self.start {
            return false;
        }
        self.start += n;
        true
    }
    fn append(&mut self, n: usize) -> Option<&mut [u8]> {
        if n > self.storage.len() - self.end {
            return None;
        }
        let old = self.end;
        self.end += n;
        Some(&mut self.storage[old..self.end])
    }
    fn trim(&mut self, n: usize) -> bool {
        if n > self.end - self.start {
            return false;
        }
        self.end -= n;
        true
    }
    fn rss_hash(&self) -> Option<u32> {
        self.rss
    }
    fn clear_rss_hash(&mut self) {
        self.rss = None;
    }
    fn ip_checksum(&self) -> NicChecksum {
        self.ip_checksum
    }
    fn l4_checksum(&self) -> NicChecksum {
        self.l4_checksum
    }
    fn clear_rx_offload_flags(&mut self) {
        self.rss = None;
        self.ip_checksum = NicChecksum::Unknown;
        self.l4_checksum = NicChecksum::Unknown;
    }
    fn tunnelled(&self) -> Option<Tunnelled> {
        self.tunnelled
    }
    fn set_tunnelled(&mut self, t: Option<Tunnelled>) {
        self.tunnelled = t;
    }
    fn reassembled(&self) -> bool {
        self.reassembled
    }
    fn set_reassembled(&mut self) {
        self.reassembled = true;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn grow_and_shrink_at_both_ends() {
        let mut b = HeapBuf::with_room(&[1, 2, 3], 2, 1);
        assert!(b.prepend(3).is_none());
        assert_eq!(b.data(), &[1, 2, 3]);
        b.prepend(2).unwrap().copy_from_slice(&[9, 8, 1, 2, 3]);
        assert_eq!(b.data(), &[9, 8, 1, 2, 3]);
        assert!(b.append(2).is_none());
        b.append(1).unwrap()[0] = 7;
        assert_eq!(b.data(), &[9, 8, 1, 2, 3, 7]);
        assert!(b.adj(2));
        assert!(b.trim(1));
        assert_eq!(b.data(), &[1, 2, 3]);
        assert!(!b.adj(4));
        assert!(!b.trim(4));
        assert!(b.set_len(1));
        assert_eq!(b.data(), &[1]);
        assert!(b.set_len(3));
        assert_eq!(b.len(), 3);
    }

    #[test]
    fn tunnelled_round_trips_through_a_word() {
        for t in [
            Tunnelled {
                tunnel: 0,
                depth: 1,
                generation: 0,
            },
            Tunnelled {
                tunnel: 65535,
                depth: 3,
                generation: 255,
            },
        ] {
            assert_ne!(t.to_word(), 0);
            assert_eq!(Tunnelled::from_word(t.to_word()), Some(t));
        }
        assert_eq!(Tunnelled::from_word(0), None);
    }
}
