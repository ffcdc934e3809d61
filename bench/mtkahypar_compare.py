#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""Compare dcp's partitioner with Mt-KaHyPar on the same hypergraphs.

Reads what `dcp_hmetis_export --out DIR` wrote (hMETIS files, two weights per vertex, and dcp's
own result per hypergraph), partitions each hypergraph with Mt-KaHyPar into the same number of
parts, checks the result against the same two caps (compute and memory), and prints a Markdown
table of medians per (dataset, mask).

Mt-KaHyPar balances one vertex weight, so it is run two ways:
- folded, as the DCP reference system does (dcp/graph_partition/graph.py in its repository): both
  weights folded into one where memory dominates, each part's target weight its share of a
  largest-first packing of the memory weights plus the compute tolerance. Memory comes out
  balanced; compute does not (a part short of its memory share takes that much more compute).
- two-phase, so that both caps hold: the token blocks stay where the folded run put them (fixed
  vertices) and the work units are partitioned again with compute weights alone and the compute
  epsilon. This is the result compared with dcp's.
km1 is recomputed here from the exported net weights (bytes); times are wall clock of the
partition calls (both runs for two-phase).

    pip install mtkahypar
    build/release/bench/dcp_hmetis_export --out /tmp/hg --batches 10
    python3 bench/mtkahypar_compare.py /tmp/hg [--preset quality] [--threads 1]

Needs only the standard library and the mtkahypar package; nothing in the build or the tests
depends on it.
"""

import argparse
import heapq
import json
import os
import statistics
import sys
import time

# Folded weights stay far below 2^31 (Mt-KaHyPar's weights are 32-bit).
COMPUTE_TOTAL = 1_000_000
MEMORY_TOTAL = 1 << 28


def read_hmetis(path):
    """Returns (net weights, nets as 0-based pin lists, vertex count) of an hMETIS file (fmt 1)."""
    with open(path, encoding="ascii") as f:
        header = f.readline().split()
        if len(header) != 3 or header[2] != "1":
            raise ValueError(f"{path}: expected header '<nets> <vertices> 1', got {header}")
        net_count, vertex_count = int(header[0]), int(header[1])
        weights, nets = [], []
        for _ in range(net_count):
            fields = [int(x) for x in f.readline().split()]
            weights.append(fields[0])
            nets.append([p - 1 for p in fields[1:]])
    return weights, nets, vertex_count


def read_weights(path):
    compute, memory = [], []
    with open(path, encoding="ascii") as f:
        for line in f:
            c, m = line.split()
            compute.append(int(c))
            memory.append(int(m))
    return compute, memory


def largest_first(weights, parts):
    """Per-part load of a largest-first packing (each item to the least loaded part)."""
    heap = [(0, p) for p in range(parts)]
    loads = [0] * parts
    for w in sorted((w for w in weights if w > 0), reverse=True):
        load, p = heapq.heappop(heap)
        loads[p] = load + w
        heapq.heappush(heap, (loads[p], p))
    return sorted(loads, reverse=True)


def fold(compute, memory, parts, eps_compute):
    """The reference's one-weight stand-in for two constraints: (vertex weights, part targets)."""
    total_c = max(1, sum(compute))
    total_m = max(1, sum(memory))
    weights = []
    for c, m in zip(compute, memory):
        w = 0
        if c > 0:
            w += max(1, round(c * COMPUTE_TOTAL / total_c))
        if m > 0:
            w += max(1, round(m * MEMORY_TOTAL / total_m))
        weights.append(w)
    folded_memory = [w if m > 0 else 0 for w, m in zip(weights, memory)]
    folded_compute = sum(w for w, m in zip(weights, memory) if m == 0)
    tolerance = int(folded_compute / parts * (1 + eps_compute)) + 1
    targets = [load + tolerance for load in largest_first(folded_memory, parts)]
    return weights, targets


def km1(nets, net_weights, part_of):
    return sum(w * (len({part_of[v] for v in pins}) - 1) for w, pins in zip(net_weights, nets))


def loads(part_of, values, parts):
    out = [0] * parts
    for p, v in zip(part_of, values):
        out[p] += v
    return out


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("dir", help="the --out directory of dcp_hmetis_export")
    parser.add_argument("--preset", default="quality",
                        choices=["default", "quality", "highest_quality", "deterministic"])
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    try:
        import mtkahypar
    except ImportError:
        print("mtkahypar is not installed (pip install mtkahypar); nothing to compare",
              file=sys.stderr)
        return 2

    summary = os.path.join(args.dir, "dcp.jsonl")
    with open(summary, encoding="utf-8") as f:
        entries = [json.loads(line) for line in f if line.strip()]
    mtkahypar.set_seed(args.seed)
    init = mtkahypar.initialize(args.threads, False)
    preset = getattr(mtkahypar.PresetType, args.preset.upper())
    rows = {}
    for e in entries:
        base = os.path.join(args.dir, e["name"])
        net_weights, nets, n = read_hmetis(base + ".hgr")
        compute, memory = read_weights(base + ".weights")
        if len(compute) != n:
            raise ValueError(f"{base}.weights has {len(compute)} vertices, the .hgr {n}")
        k = e["parts"]
        weights, targets = fold(compute, memory, k, e["eps_compute"])
        context = init.context_from_preset(preset)
        context.logging = False
        average = sum(weights) / k
        context.set_partitioning_parameters(k, max(targets) / average - 1, mtkahypar.Objective.KM1)
        context.set_individual_target_block_weights(targets)
        graph = init.create_hypergraph(context, n, len(nets), nets, weights, net_weights)
        start = time.perf_counter()
        folded = graph.partition(context).get_partition()
        folded_ms = (time.perf_counter() - start) * 1e3
        folded_compute = max(loads(folded, compute, k)) / (sum(compute) / k)

        # Phase two: token blocks fixed where the folded run put them (weight 1: Mt-KaHyPar
        # mishandles fixed vertices of weight 0), work units by compute alone.
        total_c = max(1, sum(compute))
        compute_only = [max(1, round(c * COMPUTE_TOTAL / total_c)) if c > 0 else 1
                        for c in compute]
        context = init.context_from_preset(preset)
        context.logging = False
        context.set_partitioning_parameters(k, e["eps_compute"], mtkahypar.Objective.KM1)
        graph = init.create_hypergraph(context, n, len(nets), nets, compute_only, net_weights)
        graph.add_fixed_vertices([folded[v] if memory[v] > 0 else -1 for v in range(n)], k)
        start = time.perf_counter()
        part_of = graph.partition(context).get_partition()
        ms = folded_ms + (time.perf_counter() - start) * 1e3
        theirs = km1(nets, net_weights, part_of)
        within = (max(loads(part_of, compute, k)) <= e["compute_cap"]
                  and max(loads(part_of, memory, k)) <= e["memory_cap"])
        row = rows.setdefault((e["dataset"], e["mask"]), [])
        row.append((e["dcp_km1"], e["dcp_ms"], e["dcp_within_caps"], theirs, ms, within,
                    km1(nets, net_weights, folded), folded_compute))
        print(f"{e['name']}: dcp km1 {e['dcp_km1'] / 1e6:.1f} MB in {e['dcp_ms']:.0f} ms; "
              f"mtkahypar two-phase {theirs / 1e6:.1f} MB in {ms:.0f} ms, folded "
              f"{row[-1][6] / 1e6:.1f} MB with compute {folded_compute:.2f} x mean; within caps: "
              f"dcp {e['dcp_within_caps']}, mtkahypar two-phase {within}", file=sys.stderr)

    print(f"Mt-KaHyPar {args.preset} preset, {args.threads} thread(s), {entries[0]['parts']} "
          "parts; medians (max) over batches\n")
    print("| dataset | mask | km1 MB dcp | km1 MB mtkahypar | dcp / mtkahypar km1 | ms dcp "
          "| ms mtkahypar | within caps dcp | within caps mtkahypar | folded km1 MB "
          "| folded compute imb |")
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    for (dataset, mask), r in rows.items():
        ratio = [a[0] / a[3] if a[3] else 1.0 for a in r]
        print(f"| {dataset} | {mask} "
              f"| {statistics.median(a[0] for a in r) / 1e6:.1f} "
              f"| {statistics.median(a[3] for a in r) / 1e6:.1f} "
              f"| {statistics.median(ratio):.3f} ({max(ratio):.3f}) "
              f"| {statistics.median(a[1] for a in r):.0f} "
              f"| {statistics.median(a[4] for a in r):.0f} "
              f"| {sum(a[2] for a in r)}/{len(r)} | {sum(a[5] for a in r)}/{len(r)} "
              f"| {statistics.median(a[6] for a in r) / 1e6:.1f} "
              f"| {statistics.median(a[7] for a in r):.2f} ({max(a[7] for a in r):.2f}) |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
