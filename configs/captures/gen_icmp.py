#!/usr/bin/python3
"""Generates configs/captures/icmp.pcap: seed 000's situation for control/tests/icmp.rs.
A closed-port UDP flood of 2000 datagrams from one source (203.0.113.66) with single datagrams
to the same closed port from 100 other IPv4 and 100 other IPv6 sources spread through it, plus
packets that must never be answered with an error (unspecified, multicast and loopback sources,
an ICMP error itself) and one IPv4 packet of a protocol the box does not deliver. Deterministic.
"""
import logging
import os
import sys

logging.getLogger("scapy.runtime").setLevel(logging.ERROR)
from scapy.all import ICMP, IP, UDP, Ether, IPv6, Raw, wrpcap  # noqa: E402

ME_MAC = "02:00:00:00:00:01"
PEER_MAC = "02:00:00:00:01:07"


def eth(p):
    return Ether(dst=ME_MAC, src=PEER_MAC) / p


def packets():
    out = []
    others = [IP(src=f"198.51.100.{n}", dst="192.0.2.1") for n in range(1, 101)]
    others += [IPv6(src=f"2001:db8:1::{n:x}", dst="2001:db8::1") for n in range(1, 101)]
    k = 0
    for i in range(2000):
        out.append(eth(IP(src="203.0.113.66", dst="192.0.2.1") / UDP(sport=5555, dport=9) / Raw(b"flood")))
        if i % 10 == 3 and k < len(others):
            out.append(eth(others[k] / UDP(sport=6000 + k, dport=9) / Raw(b"hello")))
            k += 1
    # Never answered with an error (RFC 1122 3.2.2, RFC 4443 2.4(e)).
    out.append(eth(IP(src="0.0.0.0", dst="192.0.2.1") / UDP(sport=1, dport=9)))
    out.append(eth(IP(src="224.0.0.5", dst="192.0.2.1") / UDP(sport=1, dport=9)))
    out.append(eth(IP(src="127.0.0.1", dst="192.0.2.1") / UDP(sport=1, dport=9)))
    out.append(eth(IP(src="198.51.100.200", dst="192.0.2.1") / ICMP(type=3, code=3) / IP(src="192.0.2.1", dst="198.51.100.200") / UDP(sport=9, dport=1)))
    # Protocol Unreachable: IPv4 protocol 253 (experimentation) to us.
    out.append(eth(IP(src="198.51.100.201", dst="192.0.2.1", proto=253) / Raw(b"experimental")))
    for i, p in enumerate(out):
        p.time = 1_700_000_000 + i / 100_000
    return out


if __name__ == "__main__":
    here = os.path.dirname(os.path.abspath(__file__))
    path = sys.argv[1] if len(sys.argv) > 1 else os.path.join(here, "icmp.pcap")
    wrpcap(path, packets(), linktype=1)
    print(f"wrote {path}")
