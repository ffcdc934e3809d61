# SPDX-License-Identifier: Apache-2.0
"""The calibration's device calls (dcp._core.device_calls) on the Triton kernels, laid out as the
executor lays out a pass (one uint8 arena of slots, the lowering's attention tables), and their
timing with CUDA events; dcp.calibrate fits the timings with the same C++ solver as the cpu
kernels' (dcp/runtime/calibration.h: fit_device)."""
from __future__ import annotations

import torch

from dcp.torch.kernels import triton_kernels as tk

_DTYPES = {"bf16": torch.bfloat16, "fp32": torch.float32}


class _Arena:
    """Slots allocated one after another, each at a multiple of the slot alignment."""

    def __init__(self):
        self.size = 0

    def slot(self, nbytes: int) -> int:
        offset = self.size
        self.size += -(-nbytes // tk.SLOT_ALIGNMENT) * tk.SLOT_ALIGNMENT
        return offset


def _causal(tokens: int) -> tuple[torch.Tensor, torch.Tensor]:
    """mask_rows and mask_intervals of a causal tile: row r attends keys [0, r + 1)."""
    rows = torch.arange(tokens + 1, dtype=torch.int32)
    intervals = torch.stack((torch.zeros(tokens, dtype=torch.int32),
                             torch.arange(1, tokens + 1, dtype=torch.int32)), 1).flatten()
    return rows, intervals.contiguous()


class TritonCall:
    """One device call (a dict of dcp._core.device_calls) on `device`: random inputs in [-1, 1],
    `heads` q heads, each with its own kv head; calling it launches the kernels once. `arena`, `out`
    (forward: each row's kOut slot offset; backward: the kDQ and kDKV offsets) let a test read the
    results."""

    def __init__(self, call: dict, device: torch.device, seed: int = 0):
        self.kind = call["kind"]
        generator = torch.Generator().manual_seed(seed)
        if self.kind == "copy":
            self.src = torch.randint(0, 255, (call["copy_bytes"],), dtype=torch.uint8,
                                     generator=generator).to(device)
            self.dst = torch.empty_like(self.src)
            return
        dtype = _DTYPES[call["dtype"]]
        d, tq, tkv = call["head_dim"], call["q_tokens"], call["kv_tokens"]
        rows, tiles, h = call["rows"], call["tiles"], call["heads"]
        width = dtype.itemsize
        arena = _Arena()
        backward = self.kind == "backward"
        # Inputs: q (forward) or q, do, lse, delta (backward) per row; k then v per tile.
        q_bytes = tq * h * d * width + (tq * h * d * width + 8 * tq * h if backward else 0)
        q_off = [arena.slot(q_bytes) for _ in range(rows)]
        kv_off = [arena.slot(2 * tkv * h * d * width) for _ in range(tiles)]
        if backward:
            self.out = (arena.slot(tq * h * d * 4), arena.slot(2 * tkv * h * d * 4))  # dq; dk, dv
        else:
            self.out = [arena.slot(tq * h * d * 4 + tq * h * 4) for _ in range(rows)]  # o, lse
        values = torch.zeros(arena.size, dtype=torch.uint8)

        def fill(offset: int, count: int, kind=dtype, low=-1.0, high=1.0):
            x = torch.rand(count, generator=generator, dtype=torch.float64) * (high - low) + low
            values[offset:offset + count * kind.itemsize] = x.to(kind).view(torch.uint8)

        for offset in q_off:
            fill(offset, tq * h * d)
            if backward:
                fill(offset + tq * h * d * width, tq * h * d)  # do
                # lse of rows whose scores are in [-d/sqrt(d), d/sqrt(d)]: positive, moderate;
                # delta near 0. Timing does not depend on the values beyond their being finite.
                fill(offset + 2 * tq * h * d * width, tq * h, torch.float32, 2.0, 4.0)
                fill(offset + 2 * tq * h * d * width + 4 * tq * h, tq * h, torch.float32, -0.1,
                     0.1)
        for offset in kv_off:
            fill(offset, 2 * tkv * h * d)
        mask = -1
        mask_rows = torch.zeros(1, dtype=torch.int32)
        mask_intervals = torch.zeros(2, dtype=torch.int32)
        if call["causal"]:
            mask = 0
            mask_rows, mask_intervals = _causal(tq)
        entries = [dict(q_off=q_off[r], kv_off=kv_off[t], q_tokens=tq, kv_tokens=tkv, mask=mask,
                        q_group=r, kv_group=0 if backward else -1,
                        kv_buffer=tk.BUFFERS["arena"])
                   for r in range(rows) for t in range(tiles)]

        def group(out: int, tokens: int, begin: int, end: int, value: int) -> dict:
            return dict(out_off=out, tokens=tokens, accumulate=0, member_begin=begin,
                        member_end=end, input_off=value)

        if backward:
            q_groups = [group(self.out[0], tq, 0, 1, q_off[0])]
            kv_groups = [group(self.out[1], tkv, 0, 1, kv_off[0])]
        else:
            q_groups = [group(self.out[r], tq, r * tiles, (r + 1) * tiles, q_off[r])
                        for r in range(rows)]
            kv_groups = []

        self.arena = values.to(device)
        self.entries = tk.table("entries", entries, device)
        self.q_groups = tk.table("q_groups", q_groups, device)
        self.kv_groups = tk.table("kv_groups", kv_groups, device)
        self.members = torch.arange(len(entries), dtype=torch.int64, device=device)
        self.mask_rows = mask_rows.to(device)
        self.mask_intervals = mask_intervals.to(device)
        self.shape = dict(heads=h, kv_heads=h, head_dim=d, dtype=dtype, scale=d ** -0.5)
        self.q_tokens, self.kv_tokens = tq, tkv

    def __call__(self) -> None:
        if self.kind == "copy":
            self.dst.copy_(self.src)
        elif self.kind == "forward":
            tk.attention_forward(self.arena, self.entries, self.q_groups, self.members,
                                 self.mask_rows, self.mask_intervals, max_tokens=self.q_tokens,
                                 **self.shape)
        else:
            tk.attention_backward(self.arena, self.entries, self.q_groups, self.kv_groups,
                                  self.members, self.mask_rows, self.mask_intervals,
                                  max_q_tokens=self.q_tokens, max_kv_tokens=self.kv_tokens,
                                  **self.shape)


def subtiles() -> tuple[int, int, int, int, bool]:
    """The Triton kernels' sub-tiles at head dim 128 in bf16: forward q x kv, then backward q
    (the dq kernel's rows) x kv (the dk/dv kernel's keys), and True: a program computes its
    blocks whole, masking what lies past a tile's end. The two backward kernels may tile
    differently (_GPU_TILES); one (q, kv) pair is what the cost model takes."""
    forward, _ = tk._attention_launch("forward", 128, torch.bfloat16, False)
    dq, _ = tk._attention_launch("dq", 128, torch.bfloat16, False)
    dkv, _ = tk._attention_launch("dkv", 128, torch.bfloat16, False)
    return forward["BLOCK_M"], forward["BLOCK_N"], dq["BLOCK_M"], dkv["BLOCK_N"], True


def time_calls(calls: list[dict], device: torch.device, repeats: int,
               min_seconds: float) -> list[list[float]]:
    """Seconds per call of each call ([call][repeat]) on a CUDA device, from CUDA events around
    loops of launches: one warm-up call (compilation), loops of 1, 2, 4, ... calls until one lasts
    an eighth of min_seconds, then `repeats` loops sized to last min_seconds."""
    def loop(launch, count: int) -> float:
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        for _ in range(count):
            launch()
        end.record()
        end.synchronize()
        return start.elapsed_time(end) * 1e-3

    seconds = []
    with torch.cuda.device(device):
        for i, call in enumerate(calls):
            launch = TritonCall(call, device, seed=i)
            launch()
            count, elapsed = 1, loop(launch, 1)
            while elapsed < min_seconds / 8 and count < 10000:
                count *= 2
                elapsed = loop(launch, count)
            count = max(1, min(10000, round(count * min_seconds / max(elapsed, 1e-9))))
            seconds.append([loop(launch, count) / count for _ in range(repeats)])
    return seconds
