#!/usr/bin/env python3
"""Capacity model of the self-organizing tree (docs/benchmarks.md, "Discovery").

Gossip traffic, fan-out, depth and propagation delay as functions of the
fleet's size, from memberlist's mechanics and qs's advertisement policy,
next to what TestDiscoveryScaleBenchmark measured, then extrapolated to
330 data centres x 10 instances.

    python3 docs/discovery_capacity.py
"""
import math

# memberlist, LAN preset (qs uses it off loopback):
PROBE_INTERVAL = 1.0       # s: each member probes one other
PING_BYTES = 60            # a ping, framed (+29 with the cluster key)
ACK_BYTES = 60 + 89        # an ack with a Vivaldi coordinate
GOSSIP_NODES, GOSSIP_INTERVAL, PACKET = 3, 0.2, 1400
RETRANSMIT_MULT = 4        # a broadcast is re-sent 4 * ceil(log10(n+1)) times per member
PUSHPULL_INTERVAL = 30.0   # s, scaled up past 32 members (pushPullScale)
# qs: one advertisement per member for each refresh of its applied index
# (every 10 s up to 50 members, then at most 5 a second in the whole
# overlay, up to once a minute), more when its children or depth change;
# ~170 bytes framed with its name.
META_BYTES = 170


def advertise_every(n):
    return min(60.0, max(10.0, n / 5))
STATE_BYTES = 190          # one member in a push/pull exchange


def pushpull_interval(n):
    if n <= 32:
        return PUSHPULL_INTERVAL
    return PUSHPULL_INTERVAL * (math.ceil(math.log2(n) - math.log2(32)) + 1)


def gossip_bytes(n):
    """In+out bytes/s of one member, and whether broadcasts fit the budget."""
    probes = 2 * (PING_BYTES + ACK_BYTES) / PROBE_INTERVAL
    sends = (n / advertise_every(n)) * RETRANSMIT_MULT * math.ceil(math.log10(n + 1))
    broadcast_out = sends * META_BYTES                      # spread over all members
    budget = GOSSIP_NODES / GOSSIP_INTERVAL * PACKET        # what gossip can carry out
    out = min(broadcast_out, budget)
    pushpull = 2 * 2 * n * STATE_BYTES / pushpull_interval(n)
    return probes + 2 * out + pushpull, broadcast_out <= budget


def tiers(n, fanout):
    d, cap = 0, 0
    while cap < n:
        d += 1
        cap += fanout ** d
    return d


# Measured by TestDiscoveryScaleBenchmark on the 2-core machine (load
# average 30-300, the 200-replica run's from its own processes):
# replicas -> (max_children, deepest tier, per-replica p50 ms,
# visible-on-all p99 ms, gossip B/s per node in+out). The 20-, 100- and
# 200-replica runs used the benchmark's small footprint (gossip every
# 300 ms, a probe every 2 s), so their gossip is below what the model
# computes for the LAN preset; the 20- and 100-replica runs refreshed the
# applied index every 10 s (benchmarks.md).
MEASURED = {
    20: (4, 2, 41.0, 497.9, 4114),
    30: (3, 3, 79.5, 1547.9, 5513),
    100: (8, 3, 267.4, 3301.4, 17148),
    200: (8, 3, 408.4, 6972.8, 11069),
}


def main():
    per_tier_ms = 8.0   # p50 per hop on an idle machine; see benchmarks.md
    print(f"{'members':>8} {'fan-out':>7} {'tiers':>5} {'p50 to all':>10} {'gossip B/s':>10} {'fits':>5}  measured")
    for n, f in [(10, 3), (20, 4), (30, 3), (50, 8), (100, 8), (200, 8), (3_300, 16), (33_000, 16)]:
        g, fits = gossip_bytes(n)
        t = tiers(n, f)
        m = MEASURED.get(n)
        meas = f"{m[1]} tiers, p50 {m[2]} ms, p99 all {m[3]} ms, {m[4]} B/s" if m else ""
        print(f"{n:>8} {f:>7} {t:>5} {t * per_tier_ms:>8.0f}ms {g:>10.0f} {'yes' if fits else 'NO':>5}  {meas}")


if __name__ == "__main__":
    main()
