# SPDX-License-Identifier: Apache-2.0
"""Attention through dcp as autograd functions: DCPAttn (the DCP paper's form, packed kv) and
attention() (separate k and v). What backward needs (q, k, v, o, lse, and the kv values received
in the forward pass that the plan keeps) is saved by autograd, so layers may run forward and
backward in any order, activation checkpointing included (a checkpointed layer keeps them only
from its recomputed forward to its backward)."""
from __future__ import annotations

import torch

from dcp.torch.executor import DCPExecutor


def _expect_same_plan(executor: DCPExecutor, generation: int) -> None:
    if executor.generation != generation:
        raise RuntimeError("DCPAttn backward: the executor was prepared with another plan since "
                           "this forward ran; finish backward before prepare(next plan)")


class _AttentionQKV(torch.autograd.Function):
    @staticmethod
    def forward(ctx, executor: DCPExecutor, q, k, v, softmax_scale):
        o, lse, kept = executor.forward(q, k, v, softmax_scale)
        ctx.save_for_backward(q, k, v, o, lse, kept)
        ctx.executor, ctx.generation, ctx.softmax_scale = executor, executor.generation, softmax_scale
        ctx.mark_non_differentiable(lse)
        return o, lse

    @staticmethod
    def backward(ctx, do, _dlse):
        _expect_same_plan(ctx.executor, ctx.generation)
        q, k, v, o, lse, kept = ctx.saved_tensors
        dq, dk, dv = ctx.executor.backward(q, k, v, o, lse, do, kept, ctx.softmax_scale)
        return None, dq, dk, dv, None


class DCPAttn(torch.autograd.Function):
    """o = DCPAttn.apply(executor, q, kv[, softmax_scale]): q (local tokens, q heads, head dim),
    kv (2, local tokens, kv heads, head dim) holding k and v. Gradients flow to q and kv."""

    @staticmethod
    def forward(ctx, executor: DCPExecutor, q, kv, softmax_scale=None):
        if not isinstance(kv, torch.Tensor) or kv.dim() != 4 or kv.shape[0] != 2:
            raise ValueError(f"kv has shape {tuple(getattr(kv, 'shape', ()))}; DCPAttn needs "
                             "(2, local tokens, kv heads, head dim)")
        kv = kv.contiguous()
        o, lse, kept = executor.forward(q, kv[0], kv[1], softmax_scale)
        ctx.save_for_backward(q, kv, o, lse, kept)
        ctx.executor, ctx.generation, ctx.softmax_scale = executor, executor.generation, softmax_scale
        return o

    @staticmethod
    def backward(ctx, do):
        _expect_same_plan(ctx.executor, ctx.generation)
        q, kv, o, lse, kept = ctx.saved_tensors
        dq, dk, dv = ctx.executor.backward(q, kv[0], kv[1], o, lse, do, kept, ctx.softmax_scale)
        return None, dq, torch.stack((dk, dv)), None


def attention(executor: DCPExecutor, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
              softmax_scale: float | None = None, return_lse: bool = False):
    """Attention of this rank's local q against the whole batch's keys as the plan masks them.
    q (local tokens, q heads, d), k and v (local tokens, kv heads, d) in the plan's dtype;
    softmax_scale None means the plan's (1/sqrt(d) unless planned otherwise). Returns o, and
    with return_lse also lse (float32, (q heads, local tokens), natural log)."""
    o, lse = _AttentionQKV.apply(executor, q, k, v, softmax_scale)
    return (o, lse) if return_lse else o
