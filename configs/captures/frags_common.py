"""What the fragment captures' generators share (gen_bench_frags*.py): the Ethernet header and
the legitimate datagrams, 1000 bytes of UDP payload to 192.0.2.1:7 from 198.51.100.1-16, in 3
fragments of 400 + 400 + 208 bytes of data."""
from scapy.all import IP, UDP, Ether, Raw, fragment

ME_MAC = "02:00:00:00:00:01"
PEER_MAC = "02:00:00:00:01:01"


def eth(p):
    return Ether(dst=ME_MAC, src=PEER_MAC) / p


def legit(n):
    """Legitimate datagram n's three fragments, in order."""
    dg = (IP(src=f"198.51.100.{1 + n % 16}", dst="192.0.2.1", id=0x1000 + n)
          / UDP(sport=40000 + n, dport=7) / Raw(bytes([n & 0xFF]) * 1000))
    frags = fragment(dg, fragsize=400)
    assert len(frags) == 3
    return [eth(f) for f in frags]
