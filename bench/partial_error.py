#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""Partials in fp32 or in the storage dtype: the error against dense fp64 attention and the bytes
moved, side by side on the same batches.

For every batch (sampled LDC- and LongAlign-like, each mask kind, several seeds) and storage dtype,
`dcp run` plans and executes the batch twice on local ranks, with --partial-dtype fp32 and with
--partial-dtype equal to the storage dtype, and checks both against dense fp64 attention. Prints,
per storage dtype and tensor, the relative error (max |error| / max |reference|) of both runs, the
ratio, the bound `dcp run` enforces, and the bytes each pass moved between nodes and inside them.

  python3 bench/partial_error.py --dcp build/release/apps/dcp --tokens 4096 --seeds 3
"""
from __future__ import annotations

import argparse
import statistics
import subprocess
import sys

MASKS = ["causal", "lambda:sink=64,window=512", "shared_question:question=0.2,answers=4",
         "causal_blockwise:block=256,local=2"]
TENSORS = ["o", "lse", "dq", "dk", "dv"]
BOUND = {"bf16": 3e-2, "fp16": 5e-3}


def run(dcp: str, dist: str, mask: str, seed: int, dtype: str, partial: str, args) -> dict:
    # LongAlign's lengths (8K to 64K) scaled to fit a batch of --tokens.
    scale = ["--length-scale", str(args.tokens / 65536)] if dist == "longalign" else []
    command = [dcp, "run", "--dist", dist, *scale, "--tokens", str(args.tokens), "--mask", mask,
               "--dtype", dtype, "--partial-dtype", partial, "--cluster", "cpu-local",
               "--nodes", str(args.nodes), "--devices-per-node", str(args.devices_per_node),
               "--block-size", str(args.block_size), "--heads", "4", "--kv-heads", "2",
               "--strategy", "dcp-pure", "--seed", str(seed)]
    done = subprocess.run(command, capture_output=True, text=True)
    if done.returncode not in (0, 1):
        sys.exit(f"{' '.join(command)} failed:\n{done.stderr}")
    result = {"ok": done.returncode == 0}
    for line in done.stdout.splitlines():
        fields = line.split()
        if fields and fields[0] in TENSORS and len(fields) == 4:
            result[fields[0]] = float(fields[3])
        if fields and fields[0] in ("forward", "backward") and len(fields) == 7:
            result[fields[0] + "_inter"] = float(fields[5])
            result[fields[0] + "_intra"] = float(fields[6])
    missing = [t for t in TENSORS if t not in result]
    if missing:
        sys.exit(f"{' '.join(command)}: no error for {missing} in\n{done.stdout}")
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dcp", default="build/release/apps/dcp")
    parser.add_argument("--tokens", type=int, default=4096)
    parser.add_argument("--seeds", type=int, default=3)
    parser.add_argument("--nodes", type=int, default=4)
    parser.add_argument("--devices-per-node", type=int, default=8)
    parser.add_argument("--block-size", type=int, default=128)
    parser.add_argument("--dtypes", default="bf16,fp16")
    args = parser.parse_args()
    for dtype in args.dtypes.split(","):
        rows = []
        for dist in ("ldc", "longalign"):
            for mask in MASKS:
                for seed in range(args.seeds):
                    wide = run(args.dcp, dist, mask, seed, dtype, "fp32", args)
                    narrow = run(args.dcp, dist, mask, seed, dtype, dtype, args)
                    rows.append((wide, narrow))
        print(f"\n{dtype} storage, {len(rows)} batches of {args.tokens} tokens on "
              f"{args.nodes} x {args.devices_per_node}, block {args.block_size} "
              f"(relative error: max |error| / max |reference|; bound {BOUND[dtype]})")
        print(f"{'tensor':8} {'fp32 median':>12} {'fp32 max':>10} {dtype + ' median':>12} "
              f"{dtype + ' max':>10} {'ratio median':>13} {'ratio max':>10}")
        for t in TENSORS:
            wide = [w[t] for w, _ in rows]
            narrow = [n[t] for _, n in rows]
            ratios = [n[t] / w[t] for w, n in rows if w[t] > 0]
            print(f"{t:8} {statistics.median(wide):12.3e} {max(wide):10.3e} "
                  f"{statistics.median(narrow):12.3e} {max(narrow):10.3e} "
                  f"{statistics.median(ratios) if ratios else 0:13.2f} "
                  f"{max(ratios) if ratios else 0:10.2f}")
        failed = sum(1 for _, n in rows if not n["ok"]) + sum(1 for w, _ in rows if not w["ok"])
        print(f"runs over the bound: {failed} of {2 * len(rows)}")
        for key in ("forward_inter", "forward_intra", "backward_inter", "backward_intra"):
            wide = sum(w[key] for w, _ in rows)
            narrow = sum(n[key] for _, n in rows)
            print(f"{key:15} MB summed: fp32 partials {wide:9.1f}, {dtype} partials {narrow:9.1f} "
                  f"({100 * (narrow / wide - 1):+.1f} %)")


if __name__ == "__main__":
    main()
