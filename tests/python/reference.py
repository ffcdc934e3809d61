# SPDX-License-Identifier: Apache-2.0
"""The oracle: dense attention over a packed batch computed by PyTorch itself in float64
(scaled_dot_product_attention with an explicit boolean mask, autograd for the gradients), and the
inputs every test shares."""
from __future__ import annotations

import math

import numpy as np
import torch
import torch.nn.functional as F

import dcp

TOLERANCE = {"fp32": 1e-4, "bf16": 3e-2, "fp16": 5e-3}  # of max |reference| (dcp run's bounds)
TORCH_DTYPE = {"fp32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16}


def random_interval_mask(length: int, seed: int, k: int = 3) -> np.ndarray:
    """int32 (length, k, 2): up to k random key intervals per row, some rows attending nothing."""
    rng = np.random.default_rng(seed)
    mask = np.zeros((length, k, 2), dtype=np.int32)
    for row in range(length):
        if rng.random() < 0.15:
            continue  # fully masked row
        for j in range(rng.integers(1, k + 1)):
            a, b = sorted(rng.integers(0, length + 1, size=2))
            mask[row, j] = (a, b)
    return mask


def dense_mask(seqlens, masks) -> torch.Tensor:
    """Boolean (T, T): block-diagonal over sequences, each block from its mask (a spec string or
    an int32 interval array)."""
    total = sum(seqlens)
    allowed = torch.zeros(total, total, dtype=torch.bool)
    offset = 0
    for length, mask in zip(seqlens, masks):
        intervals = dcp.mask_intervals(mask, length) if isinstance(mask, str) else mask
        for row in range(length):
            for begin, end in intervals[row]:
                if end > begin:
                    allowed[offset + row, offset + begin:offset + end] = True
        offset += length
    return allowed


def inputs(total: int, heads: int, kv_heads: int, head_dim: int, dtype: str, seed: int):
    """q, k, v, do for the whole batch, rounded to the storage dtype, as float64."""
    g = torch.Generator().manual_seed(seed)
    shapes = [(total, heads, head_dim), (total, kv_heads, head_dim), (total, kv_heads, head_dim),
              (total, heads, head_dim)]
    return [torch.randn(s, generator=g, dtype=torch.float64).to(TORCH_DTYPE[dtype]).double()
            for s in shapes]


def dense_attention(q, k, v, do, allowed, scale=None):
    """o, lse (heads, T), dq, dk, dv in float64. Rows attending nothing: o = 0, lse = -inf, no
    gradient (SDPA gives NaN there, so they are given a dummy key and their do is zeroed)."""
    heads, kv_heads, d = q.shape[1], k.shape[1], q.shape[2]
    scale = scale if scale is not None else 1.0 / math.sqrt(d)
    empty = ~allowed.any(dim=1)
    safe = allowed.clone()
    safe[empty, 0] = True
    q, k, v = (x.detach().clone().requires_grad_() for x in (q, k, v))
    group = heads // kv_heads
    kk, vv = k.repeat_interleave(group, dim=1), v.repeat_interleave(group, dim=1)
    o = F.scaled_dot_product_attention(q.transpose(0, 1), kk.transpose(0, 1), vv.transpose(0, 1),
                                       attn_mask=safe, scale=scale).transpose(0, 1)
    o = torch.where(empty[:, None, None], torch.zeros_like(o), o)
    o.backward(torch.where(empty[:, None, None], torch.zeros_like(do), do))
    scores = torch.einsum("qhd,khd->hqk", q.detach(), kk.detach()) * scale
    lse = torch.logsumexp(scores.masked_fill(~allowed, float("-inf")), dim=-1)
    return o.detach(), lse, q.grad, k.grad, v.grad


def worst_relative(got: torch.Tensor, want: torch.Tensor) -> float:
    """max |got - want| / max |want| (finite entries; -inf must match exactly)."""
    got, want = got.double(), want.double()
    infinite = torch.isinf(want)
    if not torch.equal(torch.isinf(got), infinite) or torch.isnan(got).any():
        return float("inf")
    got, want = got[~infinite], want[~infinite]
    scale = want.abs().max().item() if want.numel() else 0.0
    if want.numel() == 0:
        return 0.0
    return (got - want).abs().max().item() / max(scale, 1e-30)


def expect_dense_attention(seqlens, dtype: str, ranks: list[dict], dense) -> None:
    """Asserts that the ranks' local o, lse, dq, dk, dv (each rank's dict, with the batch
    positions of its tokens) put together are every token once and match `dense`
    (dense_attention's), within TOLERANCE[dtype] of max |reference|."""
    o_ref, lse_ref, dq_ref, dk_ref, dv_ref = dense
    total = sum(seqlens)
    got = {name: torch.full_like(ref, float("nan")) for name, ref in
           (("o", o_ref), ("dq", dq_ref), ("dk", dk_ref), ("dv", dv_ref))}
    lse = torch.full_like(lse_ref, float("nan"))
    seen = torch.zeros(total, dtype=torch.int64)
    for r in ranks:
        pos = r["positions"]
        seen[pos] += 1
        for name in got:
            got[name][pos] = r[name].double()
        lse[:, pos] = r["lse"].double()
    assert torch.equal(seen, torch.ones(total, dtype=torch.int64)), "every token on one rank"
    bound = TOLERANCE[dtype]
    for name, ref in (("o", o_ref), ("dq", dq_ref), ("dk", dk_ref), ("dv", dv_ref)):
        err = worst_relative(got[name], ref)
        assert err <= bound, f"{name}: {err:.3g} of max |reference| > {bound}"
    assert worst_relative(lse, lse_ref) <= bound, "lse"
