#!/usr/bin/env python3
"""Capacity model of the self-organizing tree (docs/benchmarks.md, "Discovery").

Extrapolates fan-out, depth, propagation delay and gossip traffic from the
figures measured by TestDiscoveryScaleBenchmark, and prints the model next
to the measured runs so the two can be compared.

    python3 docs/discovery_capacity.py
"""
import math

# Measured (tests/discovery_bench_test.go on the shared 2-core machine):
# nodes -> (max_children, deepest tier, per-replica p50 delay ms,
#           visible-on-all p99 ms, gossip bytes/s per node in+out)
MEASURED = {
    20: (4, 2, 23.0, 225.6, 5134),
    200: None,  # filled in from the run below
}

# memberlist (LAN preset): a probe per second (ping + ack with a Vivaldi
# coordinate, both ways), gossip to 3 members every 200 ms carrying queued
# broadcasts, a full push/pull with one member every 30 s. A member's
# advertisement (~150 bytes framed) changes when its children or depth
# change, and its applied index at most every 10 s.
PROBE_BYTES = 2 * 2 * 180          # ping + ack, sent and received
META_BYTES = 150                   # one member's framed advertisement
UPDATE_EVERY = 10.0                # s between a member's advertisements
RETRANSMIT = 4                     # memberlist RetransmitMult
PUSHPULL_EVERY = 30.0              # s


def depth(n, fanout):
    """Tiers below the root needed for n replicas with this fan-out."""
    d, cap = 0, 0
    while cap < n:
        d += 1
        cap += fanout ** d
    return d


def gossip_bytes_per_node(n):
    """Bytes/s in+out per member: probes, broadcast retransmissions, push/pull."""
    broadcast = (n / UPDATE_EVERY) * RETRANSMIT * math.log10(n + 1) * META_BYTES * 2 / 3
    pushpull = 2 * 2 * n * META_BYTES / PUSHPULL_EVERY
    return PROBE_BYTES + broadcast + pushpull


def propagation_ms(tiers, per_hop_ms):
    """Ack to visible on every node: one hop per tier."""
    return tiers * per_hop_ms


def main():
    per_hop = 8.0  # ms per tier at p50 on an idle network (see benchmarks.md)
    print(f"{'nodes':>7} {'fan-out':>7} {'tiers':>5} {'p50 all (ms)':>12} {'gossip B/s/node':>15}  measured")
    rows = [(20, 4), (50, 8), (100, 8), (200, 8), (330 * 10, 16), (330 * 10 * 10, 16)]
    for n, f in rows:
        t = depth(n, f)
        m = MEASURED.get(n)
        meas = ""
        if m:
            meas = f"tiers {m[1]}, per-replica p50 {m[2]} ms, all p99 {m[3]} ms, gossip {m[4]} B/s"
        print(f"{n:>7} {f:>7} {t:>5} {propagation_ms(t, per_hop):>12.0f} {gossip_bytes_per_node(n):>15.0f}  {meas}")


if __name__ == "__main__":
    main()
