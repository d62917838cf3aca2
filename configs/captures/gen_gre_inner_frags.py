#!/usr/bin/python3
"""Generates configs/captures/gre_inner_frags.pcap: fragmented GRE packets from a
tunnel's remote whose inner packet is itself a first fragment that never completes, each from
its own inner source, more of them than the daemon has 64 KiB datagram buffers; then a
legitimate fragmented ping. The outer reassembly's datagram buffer must not stay held as the
inner fragment, or the ping finds no buffer. The box is 02:00:00:00:00:01 with 192.0.2.1 and,
inside the tunnel, 10.9.0.1. Deterministic output.
"""
import logging
import os
import sys

logging.getLogger("scapy.runtime").setLevel(logging.ERROR)
from scapy.all import GRE, ICMP, IP, UDP, Ether, Raw, fragment, wrpcap  # noqa: E402

ME_MAC = "02:00:00:00:00:01"
PEER_MAC = "02:00:00:00:00:fe"
ATTACKS = 24


def packets():
    out = []
    for i in range(ATTACKS):
        inner_src = f"10.9.1.{i + 2}"
        datagram = IP(src=inner_src, dst="10.9.0.1", id=0x100 + i) / UDP(sport=5000 + i, dport=7) / Raw(b"a" * 1200)
        first = fragment(datagram, fragsize=600)[0]
        outer = IP(src="198.51.100.2", dst="192.0.2.1", id=0x200 + i) / GRE() / first
        for f in fragment(outer, fragsize=320):  # reassembled (outer), then the inner one held
            out.append(Ether(dst=ME_MAC, src=PEER_MAC) / f)
    ping = IP(src="192.0.2.50", dst="192.0.2.1", id=0x300) / ICMP(id=7, seq=1) / Raw(bytes(range(256)) * 8)
    for f in fragment(ping, fragsize=1000):  # reassembled, then echo_reply
        out.append(Ether(dst=ME_MAC, src="02:00:00:00:00:32") / f)
    for i, p in enumerate(out):
        p.time = 1_700_000_000 + i / 1000
    return out


if __name__ == "__main__":
    here = os.path.dirname(os.path.abspath(__file__))
    path = sys.argv[1] if len(sys.argv) > 1 else os.path.join(here, "gre_inner_frags.pcap")
    wrpcap(path, packets(), linktype=1)
    print(f"wrote {path}")
