#!/usr/bin/python3
"""Generates configs/captures/bench_tcp6.pcap: bench_tcp's SYN flood over IPv6.

Run from anywhere: /usr/bin/python3 configs/captures/gen_bench_tcp6.py  (needs Debian's python3-scapy).
Deterministic (fixed timestamps, fixed flow list), so regenerating it changes nothing.

1024 TCP/IPv6 SYNs of 74 bytes (14 Ethernet + 40 IPv6 + 20 TCP), 78 on the wire with the FCS,
to 02:00:00:00:00:01 / 2001:db8::1 port 9, from 1024 flows: 256 source hosts in 2001:db8:1::/64
(documentation prefix, as bench_udp6) times 4 source ports, interleaved as in bench_udp.
"""
import logging

logging.getLogger("scapy.runtime").setLevel(logging.ERROR)
from scapy.all import TCP, Ether, IPv6  # noqa: E402

from gen_bench_udp import DPORT, ME_MAC, flows, write  # noqa: E402  (this script's directory)

ME_IP = "2001:db8::1"


def packets():
    return [
        Ether(dst=ME_MAC, src=mac)
        / IPv6(src=f"2001:db8:1::{host + 1:x}", dst=ME_IP, hlim=64)
        / TCP(sport=sport, dport=DPORT, flags="S", seq=1_000_000 + i, window=64240)
        for i, mac, host, sport in flows()
    ]


if __name__ == "__main__":
    write("bench_tcp6.pcap", packets(), 74)  # 78 on the wire with the FCS
