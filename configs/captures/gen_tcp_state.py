#!/usr/bin/python3
"""Generates configs/captures/tcp_state.pcap: TCP to a service with `tcp_state = true` (see
docs/operating.md, "TCP flood defence"), every reason of the TCP state table once or more.

- 198.51.100.10:40000: SYN, the handshake's ACK (ISN + 1), 10 bytes of data, FIN: delivered;
- 198.51.100.11:40001: SYN, an ACK with another sequence number (bad_handshake), the right ACK;
- 198.51.100.12: 8 SYNs from 8 ports at once, 3 within its SYN budget (syn_burst = 3), 5 over;
- 20 spoofed ACKs, 5 RSTs and 3 SYN+ACKs from 203.0.113.0/24 of no flow (no_flow, rst_no_flow).
Deterministic output (fixed timestamps).
"""
import os
import sys

from scapy.all import IP, TCP, Ether, Raw, wrpcap

ME_MAC = "02:00:00:00:00:01"
PEER_MAC = "02:00:00:00:01:01"


def seg(src, sport, flags, seq, ack=0, data=b""):
    p = Ether(dst=ME_MAC, src=PEER_MAC) / IP(src=src, dst="192.0.2.1") / TCP(
        sport=sport, dport=80, flags=flags, seq=seq, ack=ack, window=64240)
    return p / Raw(data) if data else p


def packets():
    a, b, c = "198.51.100.10", "198.51.100.11", "198.51.100.12"
    out = [
        seg(a, 40000, "S", 1000),
        seg(a, 40000, "A", 1001, 1),
        seg(a, 40000, "PA", 1001, 1, b"0123456789"),
        seg(a, 40000, "FA", 1011, 1),
        seg(b, 40001, "S", 5000),
        seg(b, 40001, "A", 7000, 1),
        seg(b, 40001, "A", 5001, 1),
    ]
    out += [seg(c, 41000 + i, "S", 9000 + i) for i in range(8)]
    out += [seg(f"203.0.113.{1 + i}", 50000 + i, "A", 77 * i, 99) for i in range(20)]
    out += [seg(f"203.0.113.{100 + i}", 51000 + i, "R", 11 * i) for i in range(5)]
    out += [seg(f"203.0.113.{200 + i}", 52000 + i, "SA", 13 * i, 1) for i in range(3)]
    for i, p in enumerate(out):
        p.time = 1_700_000_000 + i / 100000
    return out


if __name__ == "__main__":
    here = os.path.dirname(os.path.abspath(__file__))
    path = sys.argv[1] if len(sys.argv) > 1 else os.path.join(here, "tcp_state.pcap")
    wrpcap(path, packets(), linktype=1)
    print(f"wrote {path}")
