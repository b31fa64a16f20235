#!/usr/bin/env python3
"""Expected L1 hit rate of a proxy on the regional workload
(docs/benchmarks.md, "Cache tiers of a data centre").

The regional workload of `qs bench tiers`: 99% of reads Zipf (s = 1.1)
over a region of 1/20 of the keys, 1% uniform over the keys outside it.
A proxy always holds its own shard (1/8 of the keys with 8 proxies); a
key of another shard is in its L1 once the proxy has read it:

- "1 read": every value fetched stays (an upper bound: the transient tier
  holds a value read once for a while, and the budget holds the region);
- "2 reads": a value stays only once read twice (a lower bound: a value
  read once leaves the transient tier before its next read, and is then
  stored on that read).

Reads of a key are Poisson with the key's share of the reads. What is
left to miss after W reads per proxy is the share of reads that go to
keys read fewer times than that, outside the proxy's own shard. Once the
region is learned, L1 is 99% + 1% x 1/8 ("ceiling" below) plus what the
proxy has learned of the outside keys, each of which it reads once in
(keys - region) / 1% reads: 95 million at 1,000,000 keys.

    python3 docs/tiers_l1_model.py [keys] [reads per proxy ...]
"""
import math
import sys

ZIPF_S = 1.1
REGION_FRACTION = 20
OUTSIDE = 0.01
SHARDS = 8


def l1(keys, reads, need):
    """Expected L1 hit rate after `reads` reads of one proxy."""
    region = max(1, keys // REGION_FRACTION)
    weights = [k ** -ZIPF_S for k in range(1, region + 1)]
    total = sum(weights)
    inside = 1 - OUTSIDE if keys > region else 1.0

    def unlearned(lam):
        # P(fewer than `need` reads) for a Poisson count of mean lam.
        return sum(math.exp(-lam) * lam ** i / math.factorial(i) for i in range(need))

    miss = 0.0
    for w in weights:
        p = inside * w / total
        miss += p * unlearned(p * reads)
    if keys > region:
        p = OUTSIDE / (keys - region)  # one outside key's share
        miss += OUTSIDE * unlearned(p * reads)
    return 1 - miss * (SHARDS - 1) / SHARDS


def main():
    keys = int(sys.argv[1]) if len(sys.argv) > 1 else 1_000_000
    reads = [int(r) for r in sys.argv[2:]] or [100_000, 300_000, 1_000_000, 3_000_000, 10_000_000]
    ceiling = 1 - OUTSIDE * (SHARDS - 1) / SHARDS
    print(f"{keys:,} keys, region {max(1, keys // REGION_FRACTION):,}; ceiling with no outside key learned {100 * ceiling:.3f}%")
    print("| reads per proxy | L1, learned on 1 read | L1, learned on 2 reads |")
    print("|--:|--:|--:|")
    for r in reads:
        print(f"| {r:,} | {100 * l1(keys, r, 1):.2f}% | {100 * l1(keys, r, 2):.2f}% |")


if __name__ == "__main__":
    main()
