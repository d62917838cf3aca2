#!/usr/bin/python3
"""Generates configs/captures/frags.pcap: fragmented datagrams to the box (02:00:00:00:00:01,
192.0.2.1, 2001:db8::1) for the reassembly test (control/tests/reassembly.rs). Deterministic.

- a 3000-byte UDP datagram to port 7, 3 fragments in order       -> reassembled x2, delivered
- a 3000-byte UDP datagram over IPv6, 3 fragments in reverse      -> reassembled x2, delivered
- a 4000-byte ping, 3 fragments shuffled                          -> reassembled x2, echo_reply
- two overlapping fragments                                       -> reassembly_refused x2
- a non-last fragment whose payload is not a multiple of 8        -> reassembly_refused
- a first fragment whose datagram never completes                 -> reassembly_timeout
"""
import logging
import os
import sys

logging.getLogger("scapy.runtime").setLevel(logging.ERROR)
from scapy.all import (  # noqa: E402
    ICMP, IP, UDP, Ether, IPv6, IPv6ExtHdrFragment, Raw, fragment, fragment6, wrpcap)

ME_MAC = "02:00:00:00:00:01"
PEER_MAC = "02:00:00:00:01:07"


def eth(p):
    return Ether(dst=ME_MAC, src=PEER_MAC) / p


def payload(n, seed):
    return bytes((i * 7 + seed) & 0xff for i in range(n))


def packets():
    out = []
    v4 = IP(src="192.0.2.17", dst="192.0.2.1", id=0x1111) / UDP(sport=40001, dport=7) / Raw(payload(3000, 1))
    out += [eth(f) for f in fragment(v4, fragsize=1480)]
    v6 = (IPv6(src="2001:db8::17", dst="2001:db8::1") / IPv6ExtHdrFragment(id=0x2222)
          / UDP(sport=40002, dport=7) / Raw(payload(3000, 2)))
    out += [eth(f) for f in reversed(fragment6(v6, 1500))]
    ping = IP(src="192.0.2.17", dst="192.0.2.1", id=0x3333) / ICMP(id=0x77, seq=1) / Raw(payload(4000, 3))
    f = fragment(ping, fragsize=1480)
    out += [eth(x) for x in (f[1], f[2], f[0])]
    # Overlap: bytes 0..1480 then 1000..2480 of one datagram.
    base = IP(src="192.0.2.18", dst="192.0.2.1", id=0x4444, proto=17)
    data = bytes(UDP(sport=40003, dport=7) / Raw(payload(3000, 4)))
    out.append(eth(base.copy() / Raw(data[:1480])))
    out[-1][IP].flags = "MF"
    o = base.copy() / Raw(data[1000:2480])
    o.flags = "MF"
    o.frag = 1000 // 8
    out.append(eth(o))
    # Tiny: 100 bytes with MF set (not a multiple of 8).
    t = IP(src="192.0.2.19", dst="192.0.2.1", id=0x5555, proto=17, flags="MF") / Raw(data[:100])
    out.append(eth(t))
    # Never completes: a first fragment alone.
    lone = IP(src="192.0.2.20", dst="192.0.2.1", id=0x6666, proto=17, flags="MF") / Raw(data[:1480])
    out.append(eth(lone))
    for i, p in enumerate(out):
        p.time = 1_700_000_000 + i / 1000
    return out


if __name__ == "__main__":
    here = os.path.dirname(os.path.abspath(__file__))
    path = sys.argv[1] if len(sys.argv) > 1 else os.path.join(here, "frags.pcap")
    wrpcap(path, packets(), linktype=1)
    print(f"wrote {path}")
