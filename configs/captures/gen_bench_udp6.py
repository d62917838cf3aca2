#!/usr/bin/python3
"""Generates configs/captures/bench_udp6.pcap: bench_udp's flood over IPv6.

Run from anywhere: /usr/bin/python3 configs/captures/gen_bench_udp6.py  (needs Debian's python3-scapy).
Deterministic (fixed timestamps, fixed flow list), so regenerating it changes nothing.

1024 UDP/IPv6 frames of 66 bytes (14 Ethernet + 40 IPv6 + 8 UDP + 4), 70 on the wire with the
FCS, to 02:00:00:00:00:01 / 2001:db8::1 port 9, from 1024 flows: 256 source hosts in
2001:db8:1::/64 (documentation prefix) times 4 source ports, interleaved as in bench_udp.
"""
import logging

logging.getLogger("scapy.runtime").setLevel(logging.ERROR)
from scapy.all import UDP, Ether, IPv6, Raw  # noqa: E402

from gen_bench_udp import DPORT, ME_MAC, flows, write  # noqa: E402  (this script's directory)

ME_IP = "2001:db8::1"
PAYLOAD = 4


def packets():
    return [
        Ether(dst=ME_MAC, src=mac)
        / IPv6(src=f"2001:db8:1::{host + 1:x}", dst=ME_IP, hlim=64)
        / UDP(sport=sport, dport=DPORT)
        / Raw(bytes([i & 0xFF]) * PAYLOAD)
        for i, mac, host, sport in flows()
    ]


if __name__ == "__main__":
    write("bench_udp6.pcap", packets(), 66)  # 70 on the wire with the FCS
