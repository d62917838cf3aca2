#!/usr/bin/python3
"""Generates configs/captures/bench_tcp.pcap: a SYN flood to a port with no service.

Run from anywhere: /usr/bin/python3 configs/captures/gen_bench_tcp.py  (needs Debian's python3-scapy).
Deterministic (fixed timestamps, fixed flow list), so regenerating it changes nothing.

1024 TCP/IPv4 SYNs of 60 bytes (14 Ethernet + 20 IPv4 + 20 TCP + 6 of Ethernet padding), 64 on
the wire with the FCS, to 02:00:00:00:00:01 / 192.0.2.1 port 9, from 1024 flows: 256 source
hosts in 198.51.100.0/24 (TEST-NET-2) times 4 source ports, interleaved as in bench_udp.
"""
import logging

logging.getLogger("scapy.runtime").setLevel(logging.ERROR)
from scapy.all import IP, TCP, Ether, Padding  # noqa: E402

from gen_bench_udp import DPORT, ME_IP, ME_MAC, flows, write  # noqa: E402  (this script's directory)


def packets():
    return [
        Ether(dst=ME_MAC, src=mac)
        / IP(src=f"198.51.100.{host}", dst=ME_IP, id=i, ttl=64)
        / TCP(sport=sport, dport=DPORT, flags="S", seq=1_000_000 + i, window=64240)
        / Padding(load=b"\x00" * 6)
        for i, mac, host, sport in flows()
    ]


if __name__ == "__main__":
    write("bench_tcp.pcap", packets(), 60)  # 64 on the wire with the FCS
