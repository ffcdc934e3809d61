# SPDX-License-Identifier: Apache-2.0
"""Chooses the GPU tiles of dcp's Triton attention kernels by timing them on this GPU.

For one head-dim class (d = 64 or 128, 16-bit storage) it times each kernel (forward, dq, dk/dv)
at every candidate tile (BLOCK_M q rows, BLOCK_N keys, warps, pipeline stages) on the tiles of
bench/gpu_attention.py (one q tile against one kv tile, masks full, causal and lambda, several
lengths), the other two kernels at their current tiles. A candidate must first give results
within the benchmark's tolerance of the fp32 reference on every tile; it is then scored by the
sum of its median times over all tiles. A candidate that does not compile (too much shared
memory) is reported and skipped.

It prints a table per kernel and writes the winners as a tile table that
`DCP_TRITON_TILES=FILE` (or dcp.torch.kernels.triton_kernels.set_tiles) applies:

    python3 bench/gpu_tile_sweep.py [--head-dim 128] [--out tiles.json]

Without a GPU (smoke test of the script only: under Triton's interpreter the kernels ignore the
tile table):

    TRITON_INTERPRET=1 python3 bench/gpu_tile_sweep.py --device cpu --cases 32:causal,48:full \
        --head-dim 64 --heads 2 --kv-heads 1 --repeats 1
"""
from __future__ import annotations

import argparse
import json
import os
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import gpu_attention as ga  # noqa: E402  (the tiles, the reference check and the timing)

CANDIDATES = {  # (BLOCK_M, BLOCK_N, warps, stages)
    "forward": [(64, 64, 4, 2), (64, 64, 8, 2), (64, 64, 4, 3), (128, 64, 4, 3), (128, 64, 8, 2),
                (128, 64, 8, 3), (128, 64, 8, 4), (128, 128, 8, 2), (128, 32, 4, 3),
                (64, 128, 8, 2), (64, 32, 4, 3)],
    "dq": [(64, 64, 4, 2), (64, 64, 8, 2), (64, 64, 4, 3), (128, 64, 8, 2), (128, 64, 8, 3),
           (128, 32, 8, 2), (128, 32, 4, 3), (64, 32, 4, 3), (32, 64, 4, 2)],
    "dkv": [(64, 64, 4, 2), (64, 64, 8, 2), (64, 64, 4, 3), (64, 128, 8, 2), (64, 128, 8, 3),
            (32, 128, 8, 2), (32, 128, 4, 3), (32, 64, 4, 3), (64, 32, 4, 2)],
}
CASES = [(2048, "causal"), (4096, "full"), (4096, "causal"), (4096, "lambda"), (8192, "causal")]


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--head-dim", type=int, default=128, choices=(64, 128))
    parser.add_argument("--heads", type=int, default=8)
    parser.add_argument("--kv-heads", type=int, default=2)
    parser.add_argument("--dtype", default="bf16", choices=("bf16", "fp16"))
    parser.add_argument("--kernels", default="forward,dq,dkv")
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument("--cases", default=",".join(f"{t}:{m}" for t, m in CASES),
                        help="tiles timed, TOKENS:MASK (mask full, causal or lambda)")
    parser.add_argument("--device", default="cuda", choices=("cuda", "cpu"))
    parser.add_argument("--out", default=None, help="write the winning tiles here (JSON)")
    args = parser.parse_args(argv)
    try:
        args.cases = [(int(t), m) for t, m in (c.split(":") for c in args.cases.split(",") if c)]
    except ValueError:
        parser.error(f"--cases {args.cases!r} is not a list of TOKENS:MASK")
    for tokens, mask in args.cases:
        if tokens < 1 or mask not in ga.MASKS:
            parser.error(f"case {tokens}:{mask} needs positive tokens and a mask of "
                         f"{', '.join(ga.MASKS)}")
    args.kernels = [k for k in args.kernels.split(",") if k]
    for kernel in args.kernels:
        if kernel not in CANDIDATES:
            parser.error(f"kernel {kernel!r} is not one of {', '.join(CANDIDATES)}")
    # the benchmark's own settings, which its helpers read
    args.sink, args.window, args.seed, args.warmup, args.inner = 64, 1024, 0, 2, 5
    return args


def clear_outputs(tile) -> None:
    """Fills the kOut, kDQ and kDKV slots with 0xFF (NaN), so that a candidate that leaves part of
    an output unwritten fails the check instead of passing on its predecessor's values."""
    off, end = tile.off, tile.arena.numel()
    for first, last in ((off["out"], off["qgrad"]), (off["dq"], off["dkv"]), (off["dkv"], end)):
        tile.arena[first:last].fill_(0xFF)


def is_device_fault(error: Exception) -> bool:
    """A CUDA error that leaves the context unusable (every later launch would fail too)."""
    return isinstance(error, RuntimeError) and ("CUDA error" in str(error)
                                                or "illegal" in str(error).lower())


def main(argv=None) -> int:
    args = parse_args(argv)
    interpret = os.environ.get("TRITON_INTERPRET") == "1"
    if args.device == "cpu" and not interpret:
        print("error: on the CPU the kernels run only under Triton's interpreter: set "
              "TRITON_INTERPRET=1", file=sys.stderr)
        return 2
    if args.device == "cuda" and (interpret or not torch.cuda.is_available()):
        print("error: the sweep needs a GPU (CUDA) and TRITON_INTERPRET unset", file=sys.stderr)
        return 2
    device = (torch.device("cuda", torch.cuda.current_device()) if args.device == "cuda"
              else torch.device("cpu"))
    from dcp.torch.kernels import triton_kernels as tk
    size = "d64" if args.head_dim <= 64 else "d128"
    dtype = ga.STORAGE[args.dtype]
    tiles = []
    for tokens, mask in args.cases:
        rows = ga.row_intervals(ga.mask_spec(mask, args), tokens)
        tile = ga.Tile(tk, tokens, args.heads, args.kv_heads, args.head_dim, dtype, rows, device,
                       torch.Generator().manual_seed(tokens))
        tiles.append((f"{tokens} {mask}", tile, ga.dense_allowed(rows, tokens, device)))
    name = torch.cuda.get_device_name(device) if device.type == "cuda" else "CPU (interpreter)"
    print(f"device: {name}; heads {args.heads}/{args.kv_heads}, "
          f"d = {args.head_dim}, {args.dtype}; ms per call, median of {args.repeats} x "
          f"{args.inner}", flush=True)
    chosen = {}
    for kernel in args.kernels:
        current = tk._GPU_TILES[kernel][size]
        rows = []
        for candidate in CANDIDATES[kernel]:
            tk.set_tiles({kernel: {size: list(candidate)}})
            try:
                errors = []
                for _, tile, allowed in tiles:
                    clear_outputs(tile)
                    errors.append(max(ga.check(tile, allowed).values()))
            except Exception as error:  # a tile that does not compile (shared memory) or launch
                if is_device_fault(error):
                    raise
                rows.append((candidate, None, f"{type(error).__name__}: {str(error)[:80]}"))
                continue
            if max(errors) > ga.TOLERANCE[args.dtype]:
                rows.append((candidate, None, f"wrong: error {max(errors):.2e}"))
                continue
            run = "forward" if kernel == "forward" else "backward"
            times = [ga.median_seconds(getattr(tile, run), device, args.warmup, args.repeats,
                                       args.inner) * 1e3 for _, tile, _ in tiles]
            rows.append((candidate, times, ""))
        tk.set_tiles({kernel: {size: list(current)}})
        valid = [r for r in rows if r[1] is not None]
        if not valid:
            print(f"error: no {kernel} candidate compiled and gave right results", file=sys.stderr)
            return 1
        base = next((sum(r[1]) for r in valid if r[0] == tuple(current)), None)
        best = min(valid, key=lambda r: sum(r[1]))
        print(f"\n{kernel} (current {list(current)}; "
              f"{'forward' if kernel == 'forward' else 'backward, both kernels'} timed)")
        print("| BLOCK_M | BLOCK_N | warps | stages | " + " | ".join(n for n, _, _ in tiles)
              + " | sum ms | vs current |")
        print("|---" * (6 + len(tiles)) + "|")
        for candidate, times, note in rows:
            cells = [str(x) for x in candidate]
            if times is None:
                print("| " + " | ".join(cells) + f" | {note} |")
                continue
            ratio = f"{base / sum(times):.2f}x" if base else "-"
            mark = " (best)" if candidate == best[0] else ""
            print("| " + " | ".join(cells + [f"{t:.3f}" for t in times])
                  + f" | {sum(times):.3f}{mark} | {ratio} |", flush=True)
        chosen[kernel] = {size: list(best[0])}
        tk.set_tiles({kernel: chosen[kernel]})  # later kernels are timed beside the winners
    print("\nchosen:", json.dumps(chosen))
    if args.out:
        with open(args.out, "w") as f:
            json.dump(chosen, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
