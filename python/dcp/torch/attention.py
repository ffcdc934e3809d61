# SPDX-License-Identifier: Apache-2.0
"""Attention through dcp: attention() (separate k and v) and DCPAttn.apply (the DCP paper's form,
packed kv), both on the custom operators of dcp.torch.ops, so that eager and compiled models run
the same code. What backward needs (q, k, v, o, lse, and the kv values received in the forward
pass that the plan keeps) is saved by autograd, so layers may run forward and backward in any
order, activation checkpointing included (a checkpointed layer keeps them only from its
recomputed forward to its backward)."""
from __future__ import annotations

import torch

from dcp.torch import ops
from dcp.torch.executor import DCPExecutor


def _key(executor: DCPExecutor, **tensors) -> int:
    """The executor's key for the ops. Eagerly, also refuses what the dispatcher would route
    elsewhere before the executor's own checks ran: non-tensors and tensors on other devices."""
    if not isinstance(executor, DCPExecutor):
        raise TypeError(f"executor is a {type(executor).__name__}, not a dcp.torch.DCPExecutor")
    if not torch.compiler.is_compiling():
        for name, t in tensors.items():
            if not isinstance(t, torch.Tensor):
                raise TypeError(f"{name} is a {type(t).__name__}, not a torch.Tensor")
            if t.device != executor.device:
                raise ValueError(f"{name} is on {t.device}; this executor runs on "
                                 f"{executor.device}")
    return executor.key


def attention(executor: DCPExecutor, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
              softmax_scale: float | None = None, return_lse: bool = False,
              kind: str | None = None):
    """Attention of this rank's local q against the whole batch's keys as the plan masks them.
    q (local tokens, q heads, d), k and v (local tokens, kv heads, d) in the plan's dtype;
    softmax_scale None means the plan's (1/sqrt(d) unless planned otherwise). `kind` names the
    layer's attention kind, one of executor.kinds (None: the plan's only kind; ValueError naming
    the kinds when it has several). Returns o, and with return_lse also lse (float32, (q heads,
    local tokens), natural log; no gradient flows through it)."""
    o, lse, _, _ = ops.attention_forward(q, k, v, _key(executor, q=q, k=k, v=v), softmax_scale,
                                         kind)
    return (o, lse) if return_lse else o


class DCPAttn:
    """o = DCPAttn.apply(executor, q, kv[, kind]): q (local tokens, q heads, head dim), kv (2,
    local tokens, kv heads, head dim) holding k and v; kind the layer's attention kind (None: the
    plan's only kind). After kv, a string is the kind and a number the softmax scale
    (DCPAttn.apply(executor, q, kv, softmax_scale, kind) too). Gradients flow to q and kv."""

    @staticmethod
    def apply(executor: DCPExecutor, q: torch.Tensor, kv: torch.Tensor,
              softmax_scale: float | str | None = None, kind: str | None = None
              ) -> torch.Tensor:
        if isinstance(softmax_scale, str):  # DCPAttn.apply(executor, q, kv, kind)
            if kind is not None:
                raise TypeError(f"DCPAttn.apply got two kinds: {softmax_scale!r} after kv and "
                                f"kind={kind!r}")
            softmax_scale, kind = None, softmax_scale
        if not isinstance(kv, torch.Tensor) or kv.dim() != 4 or kv.shape[0] != 2:
            raise ValueError(f"kv has shape {tuple(getattr(kv, 'shape', ()))}; DCPAttn needs "
                             "(2, local tokens, kv heads, head dim)")
        k, v = kv.unbind(0)
        return attention(executor, q, k, v, softmax_scale, kind=kind)
