#!/usr/bin/python3
"""Generates configs/captures/gre_flags.pcap: GRE with every combination of the checksum (C),
key (K) and sequence (S) flags, and nested GRE through two different tunnels, for the capture
corpus (entry "gre-flags" in configs/captures/corpus.toml has the config: the box is
02:00:00:00:00:01 with 192.0.2.1 and, inside tunnels, 10.9.0.1; tunnel "c<C>k<K>s<S>" comes from
198.51.100.(10 + 4C + 2K + S) with key 7 when K is set). Deterministic. Each case's comment is
the outcome fastpathd counts for it.
"""
import logging
import os
import sys

logging.getLogger("scapy.runtime").setLevel(logging.ERROR)
from scapy.all import GRE, ICMP, IP, Ether, Raw, wrpcap  # noqa: E402

ME_MAC = "02:00:00:00:00:01"
PEER_MAC = "02:00:00:00:00:fe"


def ping(seq):
    return IP(src="10.9.0.2", dst="10.9.0.1") / ICMP(id=0x4343, seq=seq) / Raw(b"flags")


def remote(c, k, s):
    return f"198.51.100.{10 + 4 * c + 2 * k + s}"


def gre(inner, src, c, k, s, seq=1):
    kw = {}
    if c:
        kw["chksum_present"] = 1
    if k:
        kw.update(key_present=1, key=7)
    if s:
        kw.update(seqnum_present=1, seqence_number=seq)
    return IP(src=src, dst="192.0.2.1") / GRE(**kw) / inner


def packets():
    out = []
    eth = Ether(dst=ME_MAC, src=PEER_MAC)
    combos = [(c, k, s) for c in (0, 1) for k in (0, 1) for s in (0, 1)]
    # echo_reply x8: each tunnel with exactly its flags.
    for n, (c, k, s) in enumerate(combos):
        out.append(eth / gre(ping(n), remote(c, k, s), c, k, s))
    # gre_unknown_tunnel x4: a keyed tunnel's packet without its key, a plain tunnel's with one.
    out.append(eth / gre(ping(20), remote(0, 1, 0), 0, 0, 0))
    out.append(eth / gre(ping(21), remote(1, 1, 1), 1, 0, 1))
    out.append(eth / gre(ping(22), remote(0, 0, 0), 0, 1, 0))
    out.append(eth / gre(ping(23), remote(1, 0, 0), 1, 1, 0))
    # Flags the tunnel does not use: a checksum to a tunnel without (echo_reply), none to one
    # with (gre_bad_checksum: a `checksum = true` tunnel takes only checksummed packets, as
    # Linux's does), a sequence number to a tunnel without (echo_reply), none to one with
    # (gre_seq_dropped).
    out.append(eth / gre(ping(30), remote(0, 0, 0), 1, 0, 0))
    out.append(eth / gre(ping(31), remote(1, 0, 0), 0, 0, 0))
    out.append(eth / gre(ping(32), remote(0, 0, 0), 0, 0, 1, seq=5))
    out.append(eth / gre(ping(33), remote(0, 0, 1), 0, 0, 0))
    # echo_reply x2, nested: through c1k1s0 around c0k1s0, and c0k0s0 around c1k0s1 (its
    # sequence number 2, after the 1 above). Answers go back through the innermost tunnel, a
    # sequence tunnel's through its owning worker (its numbers belong to it).
    out.append(eth / gre(gre(ping(40), remote(0, 1, 0), 0, 1, 0), remote(1, 1, 0), 1, 1, 0))
    out.append(eth / gre(gre(ping(41), remote(1, 0, 1), 1, 0, 1, seq=2), remote(0, 0, 0), 0, 0, 0))
    for i, p in enumerate(out):
        p.time = 1_700_000_000 + i / 1000
    return out


if __name__ == "__main__":
    here = os.path.dirname(os.path.abspath(__file__))
    path = sys.argv[1] if len(sys.argv) > 1 else os.path.join(here, "gre_flags.pcap")
    wrpcap(path, packets(), linktype=1)
    print(f"wrote {path}")
