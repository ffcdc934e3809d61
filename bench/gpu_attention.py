# SPDX-License-Identifier: Apache-2.0
"""Throughput of dcp's Triton attention kernels on one tile, next to SDPA-flash and FlexAttention.

What it measures: one q tile against one kv tile of the same length t (1024, 2048, 4096 tokens),
masks causal, full and lambda (sink 64 + sliding window 1024), d = 128, 8 q heads over 2 kv heads
(one head block holding all heads), bf16. dcp's kernels run on one arena holding the slots the
executor would hand them (kQ, kQGrad, kKV, kOut, kDQ, kDKV), one entry and one group per table:
`tk.attention_forward` and `tk.attention_backward` (its two launches, dq and dk/dv) are timed
with CUDA events, `--warmup` calls first, then the median of `--repeats` timings of `--inner`
back-to-back calls each. TFLOP/s = FLOPs / time with forward FLOPs = 4 * d * heads * (unmasked
(q, k) pairs), backward = 2.5 x forward, forward+backward = 3.5 x forward, for every column alike
(the baselines get the same useful-work count, whatever they compute on masked blocks).

Side by side, on the same shapes and inputs ([1, heads, t, d] layout):
  * SDPA restricted to the flash backend (causal and full only; GQA natively with enable_gqa,
    else with kv repeated outside the timed region);
  * FlexAttention compiled with torch.compile, with a BlockMask from create_block_mask and a
    mask_mod reproducing the intervals (checked against them with create_mask), all three masks.
Rows per (tile, mask): forward, forward+backward (both timed directly) and backward (dcp timed
directly; the baselines' backward is their forward+backward minus their forward median).

Every run first checks dcp's forward o and lse and backward dq, dk, dv on the tile against an
fp32 torch reference (max |error| / max |reference|, printed); a shape above the tolerance
(bf16 3e-2, fp16 5e-3, fp32 1e-4) is not timed, and the run exits 1: a benchmark never reports
the speed of wrong results.

On a GPU node:

    python3 bench/gpu_attention.py [--sizes 1024,2048,4096] [--masks causal,full,lambda]
                                   [--repeats 20] [--json gpu_attention.json]

Without a GPU (smoke test; kernels under Triton's interpreter, perf_counter timing, no
baselines):

    TRITON_INTERPRET=1 python3 bench/gpu_attention.py --device cpu --sizes 32 --head-dim 16 \\
        --repeats 1
"""
from __future__ import annotations

import argparse
import json
import math
import os
import platform
import statistics
import sys
import time

import numpy as np
import torch

import dcp

STORAGE = {"bf16": torch.bfloat16, "fp16": torch.float16, "fp32": torch.float32}
TOLERANCE = {"bf16": 3e-2, "fp16": 5e-3, "fp32": 1e-4}  # of max |reference|
MASKS = ("causal", "full", "lambda")
NEEDS_CUDA = "n/a (needs CUDA)"


# --- the tile's mask ----------------------------------------------------------------------------

def mask_spec(mask: str, args) -> str | None:
    """dcp's spec string of a mask, None for the full tile."""
    if mask == "full":
        return None
    if mask == "causal":
        return "causal"
    return f"lambda:sink={args.sink},window={args.window}"


def row_intervals(spec: str | None, tokens: int) -> list[list[tuple[int, int]]] | None:
    """Each row's key intervals (None: the full tile). dcp.mask_intervals gives them sorted,
    disjoint and merged, padded with unused [0, 0) slots."""
    if spec is None:
        return None
    return [[(b, e) for b, e in row if e > b]
            for row in dcp.mask_intervals(spec, tokens).tolist()]


def mask_tables(rows, tokens: int, device) -> tuple[torch.Tensor, torch.Tensor, int]:
    """mask_rows (int32, tokens + 1 CSR offsets), mask_intervals (int32 pairs) and the number of
    unmasked (q, k) pairs. A full tile has no mask (its entry's mask is -1): empty tables, as the
    lowering gives a pass whose tiles are all full."""
    if rows is None:
        empty = torch.zeros(0, dtype=torch.int32, device=device)
        return empty, empty.clone(), tokens * tokens
    offsets = np.zeros(tokens + 1, dtype=np.int32)
    offsets[1:] = np.cumsum([len(r) for r in rows])
    pairs = np.array([x for r in rows for interval in r for x in interval] or [0, 0],
                     dtype=np.int32)
    unmasked = sum(e - b for r in rows for b, e in r)
    return (torch.from_numpy(offsets).to(device), torch.from_numpy(pairs).to(device), unmasked)


def dense_allowed(rows, tokens: int, device) -> torch.Tensor:
    """Boolean [tokens, tokens]: row r attends to key c."""
    if rows is None:
        return torch.ones(tokens, tokens, dtype=torch.bool, device=device)
    allowed = torch.zeros(tokens, tokens, dtype=torch.bool)
    for r, intervals in enumerate(rows):
        for b, e in intervals:
            allowed[r, b:e] = True
    return allowed.to(device)


# --- one tile in an arena -----------------------------------------------------------------------

class Tile:
    """One arena holding a tile's kQ, kQGrad, kKV, kOut, kDQ and kDKV slots, the attention tables
    of one entry and one group per pass, and launchers for dcp's two attention calls."""

    def __init__(self, tk, tokens: int, heads: int, kv_heads: int, head_dim: int,
                 dtype: torch.dtype, rows, device, generator: torch.Generator):
        self.tk, self.t, self.h, self.hk, self.d, self.dtype = (tk, tokens, heads, kv_heads,
                                                                head_dim, dtype)
        self.scale = 1.0 / math.sqrt(head_dim)
        element = torch.finfo(dtype).bits // 8
        q_bytes, kv_bytes = tokens * heads * head_dim, tokens * kv_heads * head_dim
        sizes = {"q": q_bytes * element,
                 "kv": 2 * kv_bytes * element,
                 "out": q_bytes * 4 + heads * tokens * 4,
                 "qgrad": 2 * q_bytes * element + 2 * heads * tokens * 4,
                 "dq": q_bytes * 4,
                 "dkv": 2 * kv_bytes * 4}
        self.off, total = {}, 0
        for name, size in sizes.items():
            self.off[name] = total
            align = tk.SLOT_ALIGNMENT
            total += -(-size // align) * align
        self.arena = torch.zeros(total, dtype=torch.uint8, device=device)

        def randn(*shape):
            return torch.randn(*shape, generator=generator, dtype=torch.float32).to(dtype).to(
                device)

        self.q, self.do = randn(tokens, heads, head_dim), randn(tokens, heads, head_dim)
        self.k, self.v = randn(tokens, kv_heads, head_dim), randn(tokens, kv_heads, head_dim)
        self._put("q", 0, self.q)
        self._put("kv", 0, self.k)
        self._put("kv", kv_bytes * element, self.v)
        self._put("qgrad", 0, self.q)
        self._put("qgrad", q_bytes * element, self.do)

        self.mask_rows, self.mask_intervals, self.pairs = mask_tables(rows, tokens, device)
        mask = -1 if rows is None else 0

        o = self.off
        arena_buffer = tk.BUFFERS["arena"]

        def entries(q: str):
            return tk.table("entries", [dict(q_off=o[q], kv_off=o["kv"], q_tokens=tokens,
                                             kv_tokens=tokens, mask=mask, q_group=0, kv_group=0,
                                             kv_buffer=arena_buffer)], device)

        def group(name: str, out: str, value: str):
            return tk.table(name, [dict(out_off=o[out], tokens=tokens, accumulate=0,
                                        member_begin=0, member_end=1, input_off=o[value])], device)

        self.forward_entries = entries("q")
        self.backward_entries = entries("qgrad")
        self.out_groups = group("q_groups", "out", "q")
        self.dq_groups = group("q_groups", "dq", "qgrad")
        self.dkv_groups = group("kv_groups", "dkv", "kv")
        self.members = torch.tensor([0], dtype=torch.int64, device=device)

    def _view(self, slot: str, byte: int, count: int, dtype: torch.dtype) -> torch.Tensor:
        start = self.off[slot] + byte
        return self.arena[start:start + count * (torch.finfo(dtype).bits // 8)].view(dtype)

    def _put(self, slot: str, byte: int, value: torch.Tensor) -> None:
        self._view(slot, byte, value.numel(), value.dtype).copy_(value.reshape(-1))

    def forward(self) -> None:
        self.tk.attention_forward(
            self.arena, self.forward_entries, self.out_groups, self.members, self.mask_rows,
            self.mask_intervals, heads=self.h, kv_heads=self.hk, head_dim=self.d, dtype=self.dtype,
            scale=self.scale, max_tokens=self.t)

    def backward(self) -> None:
        self.tk.attention_backward(
            self.arena, self.backward_entries, self.dq_groups, self.dkv_groups, self.members,
            self.mask_rows, self.mask_intervals, heads=self.h, kv_heads=self.hk, head_dim=self.d,
            dtype=self.dtype, scale=self.scale, max_q_tokens=self.t, max_kv_tokens=self.t)

    def outputs(self) -> tuple[torch.Tensor, torch.Tensor]:
        """The kOut slot: o fp32 [t][h][d] and lse fp32 [h][t]."""
        n = self.t * self.h * self.d
        return (self._view("out", 0, n, torch.float32).view(self.t, self.h, self.d).clone(),
                self._view("out", n * 4, self.h * self.t, torch.float32).view(self.h, self.t)
                .clone())

    def set_statistics(self, o: torch.Tensor, lse: torch.Tensor) -> None:
        """kQGrad's lse and delta = sum over d of o * do, o in the storage dtype (as the executor
        loads them from the forward's outputs)."""
        element = torch.finfo(self.dtype).bits // 8
        stats = 2 * self.t * self.h * self.d * element
        delta = (o.to(self.dtype).float() * self.do.float()).sum(-1).transpose(0, 1)
        self._put("qgrad", stats, lse.contiguous())
        self._put("qgrad", stats + self.h * self.t * 4, delta.contiguous())

    def gradients(self) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """kDQ's dq and kDKV's dk, dv (fp32)."""
        nq, nkv = self.t * self.h * self.d, self.t * self.hk * self.d
        dq = self._view("dq", 0, nq, torch.float32).view(self.t, self.h, self.d)
        dk = self._view("dkv", 0, nkv, torch.float32).view(self.t, self.hk, self.d)
        dv = self._view("dkv", nkv * 4, nkv, torch.float32).view(self.t, self.hk, self.d)
        return dq.clone(), dk.clone(), dv.clone()


# --- correctness --------------------------------------------------------------------------------

def reference(tile: Tile, allowed: torch.Tensor):
    """o [t][h][d], lse [h][t], dq, dk, dv in fp32 (IEEE) from the tile's inputs."""
    group = tile.h // tile.hk
    q, k, v = (x.float().detach().requires_grad_() for x in (tile.q, tile.k, tile.v))
    kk, vv = k.repeat_interleave(group, dim=1), v.repeat_interleave(group, dim=1)
    scores = torch.einsum("qhd,khd->hqk", q, kk) * tile.scale
    scores = scores.masked_fill(~allowed, float("-inf"))
    lse = torch.logsumexp(scores, dim=-1)
    p = torch.exp(scores - lse[..., None])
    o = torch.einsum("hqk,khd->qhd", p, vv)
    dq, dk, dv = torch.autograd.grad(o, (q, k, v), tile.do.float())
    return o.detach(), lse.detach(), dq, dk, dv


def relative_error(got: torch.Tensor, want: torch.Tensor) -> float:
    scale = max(want.abs().max().item(), 1e-30)
    return (got.double() - want.double()).abs().max().item() / scale


def check(tile: Tile, allowed: torch.Tensor) -> dict:
    """Runs dcp's forward and backward once and compares them with the reference."""
    previous = (torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32)
    torch.backends.cuda.matmul.allow_tf32 = torch.backends.cudnn.allow_tf32 = False
    try:
        o_ref, lse_ref, dq_ref, dk_ref, dv_ref = reference(tile, allowed)
    finally:
        torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32 = previous
    tile.forward()
    o, lse = tile.outputs()
    tile.set_statistics(o, lse)
    tile.backward()
    dq, dk, dv = tile.gradients()
    return {"o": relative_error(o, o_ref), "lse": relative_error(lse, lse_ref),
            "dq": relative_error(dq, dq_ref), "dk": relative_error(dk, dk_ref),
            "dv": relative_error(dv, dv_ref)}


# --- timing -------------------------------------------------------------------------------------

def median_seconds(fn, device: torch.device, warmup: int, repeats: int, inner: int) -> float:
    """Median over `repeats` of the time of `inner` back-to-back calls of fn, per call: CUDA
    events on a GPU, perf_counter on the CPU."""
    for _ in range(warmup):
        fn()
    times = []
    if device.type == "cuda":
        torch.cuda.synchronize(device)
        for _ in range(repeats):
            start = torch.cuda.Event(enable_timing=True)
            end = torch.cuda.Event(enable_timing=True)
            start.record()
            for _ in range(inner):
                fn()
            end.record()
            end.synchronize()
            times.append(start.elapsed_time(end) / 1e3 / inner)
    else:
        for _ in range(repeats):
            start = time.perf_counter()
            for _ in range(inner):
                fn()
            times.append((time.perf_counter() - start) / inner)
    return statistics.median(times)


# --- the baselines ------------------------------------------------------------------------------

def torch_layout(tile: Tile):
    """q, k, v, do as [1, heads, t, d] leaves needing gradients (do without)."""
    def bhtd(x, grad=True):
        return x.permute(1, 0, 2).unsqueeze(0).contiguous().requires_grad_(grad)
    return bhtd(tile.q), bhtd(tile.k), bhtd(tile.v), bhtd(tile.do, grad=False)


def time_baseline(attend, q, k, v, do, device, args) -> dict:
    """Seconds of attend's forward (no autograd), forward+backward and their difference."""
    def forward():
        with torch.no_grad():
            attend(q, k, v)

    def forward_backward():
        torch.autograd.grad(attend(q, k, v), (q, k, v), do)

    fwd = median_seconds(forward, device, args.warmup, args.repeats, args.inner)
    both = median_seconds(forward_backward, device, args.warmup, args.repeats, args.inner)
    return {"forward": fwd, "forward+backward": both, "backward": max(both - fwd, 0.0)}


def sdpa_flash(tile: Tile, mask: str, device, args) -> dict | str:
    """SDPA restricted to the flash backend; a string says why there is no figure."""
    if mask not in ("causal", "full"):
        return "n/a (mask)"
    import torch.nn.functional as F
    from torch.nn.attention import SDPBackend, sdpa_kernel

    q, k, v, do = torch_layout(tile)
    causal = mask == "causal"
    try:
        with sdpa_kernel(SDPBackend.FLASH_ATTENTION):
            F.scaled_dot_product_attention(q, k, v, is_causal=causal, scale=tile.scale,
                                           enable_gqa=True)
        gqa = {"enable_gqa": True}
    except RuntimeError:  # no flash kernel with native GQA: repeat kv outside the timed region
        group = tile.h // tile.hk
        k, v = (x.detach().repeat_interleave(group, dim=1).requires_grad_() for x in (k, v))
        gqa = {}

    def attend(q, k, v):
        with sdpa_kernel(SDPBackend.FLASH_ATTENTION):
            return F.scaled_dot_product_attention(q, k, v, is_causal=causal, scale=tile.scale,
                                                  **gqa)
    try:
        result = time_baseline(attend, q, k, v, do, device, args)
    except RuntimeError as error:
        print(f"warning: SDPA-flash failed on tile {tile.t} {mask}: {error}", file=sys.stderr)
        return "error"
    result["gqa"] = "native" if gqa else "repeated kv"
    return result


def flex_mask_mod(mask: str, args):
    """FlexAttention's mask_mod of a mask (None: no mask)."""
    if mask == "full":
        return None
    if mask == "causal":
        return lambda b, h, q_idx, kv_idx: kv_idx <= q_idx
    sink, window = args.sink, args.window
    return lambda b, h, q_idx, kv_idx: (kv_idx <= q_idx) & ((kv_idx < sink)
                                                            | (q_idx - kv_idx < window))


_COMPILED_FLEX = []


def flex(tile: Tile, mask: str, allowed: torch.Tensor, device, args) -> dict | str:
    """FlexAttention compiled with torch.compile; a string says why there is no figure."""
    import torch._dynamo
    from torch.nn.attention.flex_attention import create_block_mask, create_mask, flex_attention
    if not _COMPILED_FLEX:
        # Every (tile, mask, with or without autograd) is its own graph: more than dynamo's
        # default of 8 recompilations, after which it would fall back to eager (dense) flex.
        torch._dynamo.config.recompile_limit = max(torch._dynamo.config.recompile_limit, 256)
        _COMPILED_FLEX.append(torch.compile(flex_attention, dynamic=False))
    compiled = _COMPILED_FLEX[0]
    mask_mod = flex_mask_mod(mask, args)
    block_mask = None
    if mask_mod is not None:
        dense = create_mask(mask_mod, 1, 1, tile.t, tile.t, device=device)[0, 0]
        if not torch.equal(dense, allowed):
            raise AssertionError(f"the {mask} mask_mod differs from dcp's intervals")
        block_mask = create_block_mask(mask_mod, None, None, tile.t, tile.t, device=device)
    q, k, v, do = torch_layout(tile)

    def attend(q, k, v):
        return compiled(q, k, v, block_mask=block_mask, scale=tile.scale, enable_gqa=True)
    try:
        return time_baseline(attend, q, k, v, do, device, args)
    except Exception as error:  # a compile failure must not lose the other columns
        print(f"warning: FlexAttention failed on tile {tile.t} {mask}: {error}", file=sys.stderr)
        return "error"


# --- the run ------------------------------------------------------------------------------------

PASSES = (("forward", 1.0), ("backward", 2.5), ("forward+backward", 3.5))


def tflops(flops: float, seconds: float | None) -> float | None:
    return flops / seconds / 1e12 if seconds else None


def measure(tk, tokens: int, mask: str, device, args) -> tuple[list[dict], bool]:
    """Records of one (tile, mask), and whether dcp's results were right."""
    dtype = STORAGE[args.dtype]
    rows = row_intervals(mask_spec(mask, args), tokens)
    generator = torch.Generator().manual_seed(args.seed + tokens)
    tile = Tile(tk, tokens, args.heads, args.kv_heads, args.head_dim, dtype, rows, device,
                generator)
    allowed = dense_allowed(rows, tokens, device)
    errors = check(tile, allowed)
    tolerance = TOLERANCE[args.dtype]
    ok = all(e <= tolerance for e in errors.values())
    print(f"tile {tokens} {mask}: max error / max |fp32 reference|: "
          + ", ".join(f"{name} {e:.2e}" for name, e in errors.items())
          + f" (tolerance {tolerance:g})" + ("" if ok else "  WRONG: not timed"), flush=True)
    base = {"tile": tokens, "mask": mask, "pairs": tile.pairs, "errors": errors, "ok": ok}
    if not ok:
        return [dict(base, **{"pass": name}) for name, _ in PASSES], False

    def both():
        tile.forward()
        tile.backward()

    dcp_seconds = {
        "forward": median_seconds(tile.forward, device, args.warmup, args.repeats, args.inner),
        "backward": median_seconds(tile.backward, device, args.warmup, args.repeats, args.inner),
        "forward+backward": median_seconds(both, device, args.warmup, args.repeats, args.inner)}
    if device.type == "cuda":
        baselines = {"sdpa_flash": sdpa_flash(tile, mask, device, args),
                     "flex": flex(tile, mask, allowed, device, args)}
    else:
        baselines = {"sdpa_flash": NEEDS_CUDA, "flex": NEEDS_CUDA}
    forward_flops = 4.0 * args.head_dim * args.heads * tile.pairs
    records = []
    for name, factor in PASSES:
        flops = factor * forward_flops
        record = dict(base, **{"pass": name, "flops": flops, "dcp_seconds": dcp_seconds[name],
                               "dcp_tflops": tflops(flops, dcp_seconds[name])})
        best = None
        for column, result in baselines.items():
            if isinstance(result, dict):
                record[f"{column}_seconds"] = result[name]
                record[f"{column}_tflops"] = tflops(flops, result[name])
                if "gqa" in result:
                    record[f"{column}_gqa"] = result["gqa"]
                if record[f"{column}_tflops"] is not None:
                    best = max(best or 0.0, record[f"{column}_tflops"])
            else:
                record[f"{column}_tflops"] = None
                record[f"{column}_note"] = result
        record["derived_baseline_backward"] = name == "backward"
        record["dcp_over_best"] = (record["dcp_tflops"] / best
                                   if best and record["dcp_tflops"] is not None else None)
        records.append(record)
    return records, True


def cell(record: dict, column: str) -> str:
    value = record.get(f"{column}_tflops")
    if value is not None:
        return f"{value:.4g}" if value < 1 else f"{value:.1f}"
    return record.get(f"{column}_note", "-")


def print_table(records: list[dict]) -> None:
    print("| tile | mask | pass | dcp ms | dcp TFLOP/s | SDPA-flash TFLOP/s | Flex TFLOP/s | "
          "dcp/best |")
    print("|---|---|---|---|---|---|---|---|")
    for r in records:
        if not r["ok"]:
            print(f"| {r['tile']} | {r['mask']} | {r['pass']} | WRONG | WRONG | - | - | - |")
            continue
        ratio = f"{r['dcp_over_best']:.2f}" if r["dcp_over_best"] is not None else "n/a"
        print(f"| {r['tile']} | {r['mask']} | {r['pass']} | {r['dcp_seconds'] * 1e3:.3f} | "
              f"{cell(r, 'dcp')} | {cell(r, 'sdpa_flash')} | {cell(r, 'flex')} | {ratio} |")
    if any(r.get("derived_baseline_backward") for r in records):
        print("\nbackward rows: dcp timed directly; SDPA-flash and Flex as their forward+backward "
              "minus their forward.")


def add_shape_and_timing_arguments(parser, *, repeats: int, warmup: int, inner: int,
                                   dtypes, json_help: str) -> None:
    """The flags both single-tile benchmarks share: the tile's shape and how it is timed."""
    parser.add_argument("--heads", type=int, default=8)
    parser.add_argument("--kv-heads", type=int, default=2)
    parser.add_argument("--head-dim", type=int, default=128)
    parser.add_argument("--dtype", default="bf16", choices=dtypes)
    parser.add_argument("--repeats", type=int, default=repeats)
    parser.add_argument("--warmup", type=int, default=None,
                        help=f"default {warmup} on CUDA, 0 on CPU")
    parser.add_argument("--inner", type=int, default=None,
                        help=f"calls per timing (default {inner} on CUDA, 1 on CPU)")
    parser.add_argument("--device", default="cuda")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--json", default=None, help=json_help)


def parse_checked(parser, argv, masks):
    """Parses argv; --sizes and --masks as lists, each mask one of `masks`, counts positive."""
    args = parser.parse_args(argv)
    args.sizes = [int(s) for s in args.sizes.split(",") if s]
    args.masks = [m for m in args.masks.split(",") if m]
    for mask in args.masks:
        if mask not in masks:
            parser.error(f"mask {mask!r} is not one of {', '.join(masks)}")
    if args.repeats < 1 or any(s < 1 for s in args.sizes):
        parser.error("--repeats and --sizes must be positive")
    return args


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="1024,2048,4096", help="tile tokens (q = kv)")
    parser.add_argument("--masks", default=",".join(MASKS), help="of causal, full, lambda")
    parser.add_argument("--sink", type=int, default=64, help="the lambda mask's sink tokens")
    parser.add_argument("--window", type=int, default=1024, help="the lambda mask's window")
    add_shape_and_timing_arguments(parser, repeats=20, warmup=3, inner=10, dtypes=sorted(STORAGE),
                                   json_help="write the records to this file")
    return parse_checked(parser, argv, MASKS)

def main(argv=None) -> int:
    args = parse_args(argv)
    device = torch.device(args.device)
    interpret = os.environ.get("TRITON_INTERPRET") == "1"
    if device.type == "cpu":
        if not interpret:
            print("error: dcp's Triton kernels need a GPU (CUDA); on the CPU they run only under "
                  "Triton's interpreter: set TRITON_INTERPRET=1 in the environment",
                  file=sys.stderr)
            return 2
    elif device.type == "cuda":
        if not torch.cuda.is_available():
            print("error: this benchmark needs a GPU (CUDA), and none is available; for a smoke "
                  "test use --device cpu with TRITON_INTERPRET=1", file=sys.stderr)
            return 2
        if interpret:
            print("error: unset TRITON_INTERPRET for a GPU run", file=sys.stderr)
            return 2
        if device.index is None:
            device = torch.device("cuda", torch.cuda.current_device())
        torch.cuda.set_device(device)
    else:
        print(f"error: device {device} is neither cuda nor cpu", file=sys.stderr)
        return 2
    args.warmup = args.warmup if args.warmup is not None else (3 if device.type == "cuda" else 0)
    args.inner = args.inner if args.inner is not None else (10 if device.type == "cuda" else 1)

    # Imports triton: after the environment check.
    from dcp.torch.kernels import triton_kernels as tk
    for name in ("attention_forward", "attention_backward", "table"):
        if not hasattr(tk, name):
            print(f"error: the installed dcp ({dcp.__file__}) has no triton_kernels.{name}; "
                  "reinstall it (pip install --no-build-isolation .)", file=sys.stderr)
            return 2

    name = torch.cuda.get_device_name(device) if device.type == "cuda" else (
        f"CPU ({platform.processor() or platform.machine()}), Triton interpreter")
    print(f"device: {name}; heads {args.heads}/{args.kv_heads}, d = {args.head_dim}, "
          f"{args.dtype}; median of {args.repeats} x {args.inner} calls after {args.warmup} "
          "warm-up", flush=True)
    records, all_ok = [], True
    for tokens in args.sizes:
        for mask in args.masks:
            found, ok = measure(tk, tokens, mask, device, args)
            records.extend(found)
            all_ok &= ok
    print()
    print_table(records)
    if args.json:
        config = {k: v for k, v in vars(args).items() if k != "json"}
        config.update(device_name=name, torch=torch.__version__,
                      triton=__import__("triton").__version__)
        with open(args.json, "w") as f:
            json.dump({"config": config, "records": records}, f, indent=1)
    if not all_ok:
        print("error: dcp's results differ from the fp32 reference beyond the tolerance; the "
              "shapes marked WRONG were not timed", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
