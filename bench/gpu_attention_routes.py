# SPDX-License-Identifier: Apache-2.0
"""Each attention instruction shape on dcp's Triton kernels and on the flash route, next to
SDPA-flash; writes the timing table DCPExecutor(attention_kernels="auto") chooses from.

What it measures: one instruction of one tile (one q block against one kv block of the same t
tokens, 1024..8192), masks causal, full, sliding window and lambda (sink + window), laid out as
the executor lays them out (bench/gpu_attention.py's Tile: one arena of slots, one entry and one
group per table). Per tile and pass (forward, backward):
  * triton: triton_kernels.attention_forward / attention_backward on the arena;
  * flash: dcp.torch.kernels.varlen_route on the same arena and tables: the gathers,
    FlashAttention's varlen kernels through torch (aten._flash_attention_forward / _backward) and
    the scatters back into the slots;
  * sdpa_flash: SDPA restricted to its flash backend on the same q, k, v ([1, heads, t, d]
    layout), for causal and full only (its backward: its forward+backward minus its forward);
    a reference, never chosen.
Each is timed with CUDA events: --warmup calls, then the median of --repeats timings of --inner
back-to-back calls.

Before any timing, dcp's results on both kernels are checked against an fp32 torch reference
(max |error| / max |reference|); a shape above the tolerance is not timed and the run exits 1.

Records carry the tile's shape class as the route computes it from the mask (full, causal,
window, split: dcp.torch.kernels.varlen_windows.shape_of); a (mask, tile) whose class another
mask of the same tile already gave (a sliding window at least as long as the tile is causal) is
measured once. --json writes {"config", "records"}: records of pass, shape, tokens, kernel,
seconds (plus mask and TFLOP/s), the table dcp.torch.kernels.kernel_selection reads
(DCP_ATTENTION_TIMINGS=FILE).

On a GPU node (about a minute on an H200 at the defaults):

    python3 bench/gpu_attention_routes.py [--sizes 1024,2048,4096,8192] [--json timings.json]

Without a GPU (smoke test: Triton's interpreter, the route on the fp64 emulation of the
kernels, perf_counter timing, no SDPA):

    TRITON_INTERPRET=1 python3 bench/gpu_attention_routes.py --device cpu --sizes 32 \\
        --head-dim 16 --window 12 --sink 4 --repeats 1
"""
from __future__ import annotations

import argparse
import json
import os
import sys

import torch

import gpu_attention as ga

MASKS = ("causal", "full", "sliding_window", "lambda")
PASSES = ("forward", "backward")
FLOPS = {"forward": 1.0, "backward": 2.5}  # x forward FLOPs (gpu_attention.py's convention)


def mask_spec(mask: str, args) -> str | None:
    return {"causal": "causal", "full": None,
            "sliding_window": f"sliding_window:window={args.window}",
            "lambda": f"lambda:sink={args.sink},window={args.window}"}[mask]


def shape_class(tile, rows) -> str:
    from dcp.torch.kernels import varlen_route
    from dcp.torch.kernels import varlen_windows as vw
    if rows is None:
        return vw.FULL
    host = tile.mask_rows.cpu().numpy(), tile.mask_intervals.cpu().numpy()
    return vw.shape_of(vw.find_segments(*vw.tile_intervals(*host, 0, tile.t, tile.t),
                                        varlen_route.MAX_SEGMENTS))


class FlashRoute:
    """The flash route over a Tile's arena and tables."""

    def __init__(self, tile, kernel):
        from dcp.torch.kernels.varlen_route import VarlenRoute

        def host(t):
            return t.cpu().numpy()
        masks = {"mask_rows": host(tile.mask_rows), "mask_intervals": host(tile.mask_intervals),
                 "members": host(tile.members)}
        forward = dict(masks, entries=host(tile.forward_entries), q_groups=host(tile.out_groups),
                       kv_groups=tile.tk.table("kv_groups", []).numpy())
        backward = dict(masks, entries=host(tile.backward_entries), q_groups=host(tile.dq_groups),
                        kv_groups=host(tile.dkv_groups))
        self.tile, self.route = tile, VarlenRoute(kernel)
        self.route.prepare(forward, backward, heads=tile.h, kv_heads=tile.hk, head_dim=tile.d,
                           dtype=tile.dtype, device=tile.arena.device)
        self.launches = [self.route.launch(0, 0, 1, 0, 0), self.route.launch(1, 0, 1, 0, 1)]
        if None in self.launches:
            raise RuntimeError("the route did not take the tile")

    def forward(self) -> None:
        self.route.run(self.launches[0], self.tile.arena, None, self.tile.scale)

    def backward(self) -> None:
        self.route.run(self.launches[1], self.tile.arena, None, self.tile.scale)


def check(runner, tile, allowed) -> dict:
    """Max |error| / max |fp32 reference| of o, lse, dq, dk, dv when `runner` runs the tile."""
    previous = (torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32)
    torch.backends.cuda.matmul.allow_tf32 = torch.backends.cudnn.allow_tf32 = False
    try:
        o_ref, lse_ref, dq_ref, dk_ref, dv_ref = ga.reference(tile, allowed)
    finally:
        torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32 = previous
    runner.forward()
    o, lse = tile.outputs()
    tile.set_statistics(o, lse)
    runner.backward()
    dq, dk, dv = tile.gradients()
    return {name: ga.relative_error(got, want) for name, got, want in
            (("o", o, o_ref), ("lse", lse, lse_ref), ("dq", dq, dq_ref), ("dk", dk, dk_ref),
             ("dv", dv, dv_ref))}


def measure(tk, kernel, tokens: int, mask: str, seen: set, device, args) -> tuple[list, bool]:
    dtype = ga.STORAGE[args.dtype]
    rows = ga.row_intervals(mask_spec(mask, args), tokens)
    generator = torch.Generator().manual_seed(args.seed + tokens)
    tile = ga.Tile(tk, tokens, args.heads, args.kv_heads, args.head_dim, dtype, rows, device,
                   generator)
    shape = shape_class(tile, rows)
    if (shape, tokens) in seen:
        print(f"tile {tokens} {mask}: shape class {shape}, measured already", flush=True)
        return [], True
    seen.add((shape, tokens))
    allowed = ga.dense_allowed(rows, tokens, device)
    flash = FlashRoute(tile, kernel)
    runners = {"triton": tile, "flash": flash}
    ok = True
    for name, runner in runners.items():
        errors = check(runner, tile, allowed)
        good = all(e <= ga.TOLERANCE[args.dtype] for e in errors.values())
        ok &= good
        print(f"tile {tokens} {mask} ({shape}) on {name}: max error / max |fp32 reference|: "
              + ", ".join(f"{k} {e:.2e}" for k, e in errors.items())
              + ("" if good else "  WRONG: not timed"), flush=True)
    if not ok:
        return [], False
    seconds = {}
    for name, runner in runners.items():
        for pass_ in PASSES:
            seconds[name, pass_] = ga.median_seconds(getattr(runner, pass_), device, args.warmup,
                                                     args.repeats, args.inner)
    if device.type == "cuda" and mask in ("causal", "full"):
        result = ga.sdpa_flash(tile, mask, device, args)
        if isinstance(result, dict):
            for pass_ in PASSES:
                seconds["sdpa_flash", pass_] = result[pass_]
    forward_flops = 4.0 * args.head_dim * args.heads * tile.pairs
    records = []
    for (name, pass_), value in seconds.items():
        if value > 0:
            records.append({"pass": pass_, "shape": shape, "tokens": tokens, "kernel": name,
                            "seconds": value, "mask": mask,
                            "tflops": FLOPS[pass_] * forward_flops / value / 1e12})
    return records, True


def print_table(records: list[dict]) -> None:
    print("| tile | mask | shape | pass | triton ms | flash ms | sdpa_flash ms | chosen |")
    print("|---|---|---|---|---|---|---|---|")
    from dcp.torch.kernels import kernel_selection as ks
    choices = ks.choose_kernels(records)
    cells: dict = {}
    for r in records:
        cells.setdefault((r["tokens"], r["mask"], r["shape"], r["pass"]), {})[r["kernel"]] = \
            r["seconds"]
    for (tokens, mask, shape, pass_), times in cells.items():
        shown = [f"{times[k] * 1e3:.3f}" if k in times else "-"
                 for k in ("triton", "flash", "sdpa_flash")]
        chosen = ks.kernel_for(choices, pass_, shape, tokens, tokens)
        print(f"| {tokens} | {mask} | {shape} | {pass_} | {' | '.join(shown)} | {chosen} |")


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="1024,2048,4096,8192", help="tile tokens (q = kv)")
    parser.add_argument("--masks", default=",".join(MASKS), help=f"of {', '.join(MASKS)}")
    parser.add_argument("--sink", type=int, default=64, help="the lambda mask's sink tokens")
    parser.add_argument("--window", type=int, default=512,
                        help="the sliding window's and lambda mask's window")
    ga.add_shape_and_timing_arguments(parser, repeats=5, warmup=2, inner=5,
                                      dtypes=("bf16", "fp16"),
                                      json_help="write the timing table to this file")
    return ga.parse_checked(parser, argv, MASKS)

def main(argv=None) -> int:
    args = parse_args(argv)
    device = torch.device(args.device)
    interpret = os.environ.get("TRITON_INTERPRET") == "1"
    if device.type == "cpu" and not interpret:
        print("error: dcp's Triton kernels need a GPU (CUDA); on the CPU they run only under "
              "Triton's interpreter: set TRITON_INTERPRET=1", file=sys.stderr)
        return 2
    if device.type == "cuda":
        if not torch.cuda.is_available() or interpret:
            print("error: a CUDA run needs a GPU and TRITON_INTERPRET unset", file=sys.stderr)
            return 2
        if device.index is None:
            device = torch.device("cuda", torch.cuda.current_device())
        torch.cuda.set_device(device)
    elif device.type != "cpu":
        print(f"error: device {device} is neither cuda nor cpu", file=sys.stderr)
        return 2
    args.warmup = args.warmup if args.warmup is not None else (2 if device.type == "cuda" else 0)
    args.inner = args.inner if args.inner is not None else (5 if device.type == "cuda" else 1)

    from dcp.torch.kernels import triton_kernels as tk
    from dcp.torch.kernels import varlen_kernels as vk
    if device.type == "cuda":
        kernel = vk.AtenFlashKernel(device)  # ValueError naming the device if it has none
        name = torch.cuda.get_device_name(device)
    else:
        kernel, name = vk.EmulatedVarlenKernel(), "CPU, Triton interpreter, emulated flash"
    print(f"device: {name}; heads {args.heads}/{args.kv_heads}, d = {args.head_dim}, "
          f"{args.dtype}; median of {args.repeats} x {args.inner} calls after {args.warmup} "
          "warm-up", flush=True)
    records, all_ok, seen = [], True, set()
    for tokens in args.sizes:
        for mask in args.masks:
            found, ok = measure(tk, kernel, tokens, mask, seen, device, args)
            records += found
            all_ok &= ok
    print()
    print_table(records)
    if args.json:
        config = {k: v for k, v in vars(args).items() if k != "json"}
        config.update(device_name=name, torch=torch.__version__, kernel=kernel.name)
        with open(args.json, "w") as f:
            json.dump({"config": config, "records": records}, f, indent=1)
    if not all_ok:
        print("error: results differ from the fp32 reference beyond the tolerance; those shapes "
              "were not timed", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
