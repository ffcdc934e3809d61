#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""What dcp-pure's Programs move next to what its placement priced, per pass, for one or more dcp
builds side by side (e.g. before and after a change), with the simulated pass times.

For every (dataset, mask) and sampled batch: `dcp partition --json` gives the priced bytes (forward,
and backward where the build prices it), `dcp plan --strategy dcp-pure` the Programs' bytes and
`dcp simulate` the simulated forward and backward times on the cluster preset. Prints one Markdown
table per mask, sums over the batches, and the step totals.

  python3 bench/traffic_compare.py --dcp before=/tmp/before/dcp --dcp after=build/release/apps/dcp \
      [--dcp "kv-sent=build/release/apps/dcp --keep-kv none"] [--batches 5] \
      [--dists ldc,longalign] [--masks causal,lambda,shared_question,causal_blockwise] \
      [--nodes 4] [--devices-per-node 8] [--block-size auto] [--cluster a100-p4de] [--json FILE]
"""
import argparse
import json
import os
import re
import subprocess
import sys
import tempfile

MB = 1e6
KINDS = ("q", "kv", "out", "qgrad", "dq", "dkv")


def run(cmd):
    result = subprocess.run(cmd, capture_output=True, text=True)
    if result.returncode != 0:
        sys.exit(f"{' '.join(cmd)} failed ({result.returncode}): {result.stderr.strip()}")
    return result.stdout


def measure(binary, flags, common, cluster, plan_path):
    placed = json.loads(run([binary, "partition", *common, *flags, "--json"]))
    run([binary, "plan", *common, *flags, "--cluster", cluster, "--strategy", "dcp-pure",
         "-o", plan_path, "--json", plan_path + ".json"])
    with open(plan_path + ".json") as f:
        plan = json.load(f)
    if plan["block_size"] != placed["block_size"]:
        sys.exit(f"{binary}: dcp plan and dcp partition chose different block sizes")
    simulated = run([binary, "simulate", plan_path, "--cluster", cluster])
    times = re.search(r"forward ([0-9.]+) ms \+ backward ([0-9.]+) ms", simulated)
    if not times:
        sys.exit(f"unexpected `dcp simulate` output:\n{simulated}")
    return {
        "priced_fwd_inter": placed["bytes_inter_node"],
        "priced_fwd_intra": placed["bytes_intra_node"],
        "priced_bwd_inter": placed.get("backward_bytes_inter_node"),
        "priced_bwd_intra": placed.get("backward_bytes_intra_node"),
        "imbalance_compute": placed["imbalance_compute"],
        "imbalance_memory": placed["imbalance_memory"],
        "fwd_inter": plan["forward"]["bytes_inter_node"],
        "fwd_intra": plan["forward"]["bytes_intra_node"],
        "bwd_inter": plan["backward"]["bytes_inter_node"],
        "bwd_intra": plan["backward"]["bytes_intra_node"],
        "fwd_inter_by_kind": plan["forward"].get("bytes_inter_node_by_kind"),
        "bwd_inter_by_kind": plan["backward"].get("bytes_inter_node_by_kind"),
        "kept_mb_max_device": plan.get("kept_kv_bytes_max_device", 0) / MB,
        "fwd_ms": float(times.group(1)),
        "bwd_ms": float(times.group(2)),
    }


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dcp", action="append", required=True,
                        metavar="LABEL=BINARY [FLAGS]",
                        help="a build, with flags for its partition and plan commands")
    parser.add_argument("--batches", type=int, default=5)
    parser.add_argument("--dists", default="ldc,longalign")
    parser.add_argument("--masks", default="causal,lambda,shared_question,causal_blockwise")
    parser.add_argument("--nodes", type=int, default=4)
    parser.add_argument("--devices-per-node", type=int, default=8)
    parser.add_argument("--block-size", default="auto")
    parser.add_argument("--cluster", default="a100-p4de")
    parser.add_argument("--json", help="write every measurement to this file")
    args = parser.parse_args()
    builds = []
    for spec in args.dcp:
        label, _, command = spec.partition("=")
        binary, *flags = command.split()
        if not binary or not os.access(binary, os.X_OK):
            sys.exit(f"--dcp {spec}: expected LABEL=BINARY [FLAGS] with an executable BINARY")
        builds.append((label, binary, flags))

    records = []
    with tempfile.TemporaryDirectory() as tmp:
        for mask in args.masks.split(","):
            for dist in args.dists.split(","):
                for seed in range(args.batches):
                    common = ["--dist", dist, "--seed", str(seed), "--mask", mask,
                              "--nodes", str(args.nodes),
                              "--devices-per-node", str(args.devices_per_node),
                              "--block-size", args.block_size]
                    for label, binary, flags in builds:
                        figures = measure(binary, flags, common, args.cluster,
                                          os.path.join(tmp, "p.plan"))
                        records.append({"build": label, "dataset": dist, "mask": mask,
                                        "seed": seed, **figures})
    if args.json:
        with open(args.json, "w") as f:
            json.dump(records, f, indent=1)

    def total(rows, key):
        values = [r[key] for r in rows]
        return None if any(v is None for v in values) else sum(values)

    def ratio(a, b):
        return "n/a" if a is None or b in (None, 0) else f"{a / b:.3f}"

    print(f"{args.batches} batches per dataset, {args.nodes} x {args.devices_per_node}, "
          f"block size {args.block_size}, cluster {args.cluster}; MB summed over the batches, "
          "ratios Program / priced of the sums (max per batch), simulated ms summed\n")
    header = ("| dataset | build | fwd inter MB Program | priced | ratio (max) "
              "| bwd inter MB Program | priced | ratio (max) | step inter MB | intra MB "
              "| max compute imb | fwd ms | bwd ms |")
    step_totals = {label: [0, 0, 0.0, 0.0] for label, _, _ in builds}
    for mask in args.masks.split(","):
        print(f"**{mask}**\n")
        print(header)
        print("|---" * (header.count("|") - 1) + "|")
        for dist in args.dists.split(","):
            for label, _, _ in builds:
                rows = [r for r in records
                        if r["build"] == label and r["dataset"] == dist and r["mask"] == mask]
                fwd, bwd = total(rows, "fwd_inter"), total(rows, "bwd_inter")
                pf, pb = total(rows, "priced_fwd_inter"), total(rows, "priced_bwd_inter")
                max_f = max((r["fwd_inter"] / r["priced_fwd_inter"] for r in rows
                             if r["priced_fwd_inter"]), default=None)
                max_b = max((r["bwd_inter"] / r["priced_bwd_inter"] for r in rows
                             if r["priced_bwd_inter"]), default=None)
                intra = total(rows, "fwd_intra") + total(rows, "bwd_intra")
                fms, bms = total(rows, "fwd_ms"), total(rows, "bwd_ms")
                step = step_totals[label]
                step[0] += fwd + bwd
                step[1] += intra
                step[2] += fms
                step[3] += bms
                print(f"| {dist} | {label} | {fwd / MB:.1f} | "
                      f"{'n/a' if pf is None else f'{pf / MB:.1f}'} | {ratio(fwd, pf)} "
                      f"({'n/a' if max_f is None else f'{max_f:.3f}'}) | {bwd / MB:.1f} | "
                      f"{'n/a' if pb is None else f'{pb / MB:.1f}'} | {ratio(bwd, pb)} "
                      f"({'n/a' if max_b is None else f'{max_b:.3f}'}) | {(fwd + bwd) / MB:.1f} | "
                      f"{intra / MB:.1f} | {max(r['imbalance_compute'] for r in rows):.3f} | "
                      f"{fms:.2f} | {bms:.2f} |")
        print()
    print("**inter-node MB by the kind of value sent, all masks and datasets** (builds that "
          "report it)\n")
    print("| build | pass | " + " | ".join(KINDS) + " |")
    print("|---|---|" + "---|" * len(KINDS))
    for label, _, _ in builds:
        rows = [r for r in records if r["build"] == label]
        for name in ("fwd", "bwd"):
            kinds = [r[f"{name}_inter_by_kind"] for r in rows]
            if any(k is None for k in kinds):
                continue
            sums = [sum(k.get(kind, 0) for k in kinds) for kind in KINDS]
            print(f"| {label} | {name} | " + " | ".join(f"{v / MB:.1f}" for v in sums) + " |")
    print()
    print("**all masks and datasets**\n")
    print("| build | step inter MB | step intra MB | fwd ms | bwd ms | step inter / first build "
          "| kept MB per device (median, max) |")
    print("|---|---|---|---|---|---|---|")
    first = step_totals[builds[0][0]][0]
    for label, _, _ in builds:
        inter, intra, fms, bms = step_totals[label]
        kept = sorted(r["kept_mb_max_device"] for r in records if r["build"] == label)
        print(f"| {label} | {inter / MB:.1f} | {intra / MB:.1f} | {fms:.2f} | {bms:.2f} | "
              f"{inter / first:.3f} | {kept[len(kept) // 2]:.1f}, {kept[-1]:.1f} |")


if __name__ == "__main__":
    main()
