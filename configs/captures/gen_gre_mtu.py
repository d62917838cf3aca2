#!/usr/bin/python3
"""Generates configs/captures/gre_mtu.pcap: full-size datagrams to a service that forwards them
through a GRE tunnel (28 bytes of overhead on a 1500-byte path), for control/tests/tunnels.rs:
IPv4 with DF -> ICMP Fragmentation Needed (MTU 1472); IPv4 without DF -> sent in outer
fragments; IPv6 -> ICMPv6 Packet Too Big (MTU 1472). Deterministic.
"""
import logging
import os
import sys

logging.getLogger("scapy.runtime").setLevel(logging.ERROR)
from scapy.all import IP, UDP, Ether, IPv6, Raw, wrpcap  # noqa: E402

ME_MAC = "02:00:00:00:00:01"
PEER_MAC = "02:00:00:00:00:fe"


def packets():
    out = [
        Ether(dst=ME_MAC, src=PEER_MAC) / IP(src="203.0.113.7", dst="192.0.2.1", flags="DF")
        / UDP(sport=7001, dport=9000) / Raw(bytes(1472)),
        Ether(dst=ME_MAC, src=PEER_MAC) / IP(src="203.0.113.8", dst="192.0.2.1")
        / UDP(sport=7002, dport=9000) / Raw(bytes(1472)),
        Ether(dst=ME_MAC, src=PEER_MAC) / IPv6(src="2001:db8:9::7", dst="2001:db8::1")
        / UDP(sport=7003, dport=9000) / Raw(bytes(1452)),
    ]
    for i, p in enumerate(out):
        p.time = 1_700_000_000 + i / 1000
    return out


if __name__ == "__main__":
    here = os.path.dirname(os.path.abspath(__file__))
    path = sys.argv[1] if len(sys.argv) > 1 else os.path.join(here, "gre_mtu.pcap")
    wrpcap(path, packets(), linktype=1)
    print(f"wrote {path}")
