# SPDX-License-Identifier: Apache-2.0
"""dcp attention as PyTorch custom operators, so that torch.compile traces it without a graph
break: `dcp::attention_forward` and `dcp::attention_backward`, with fake implementations and the
backward registered as the forward's autograd formula.

A compiled graph cannot hold a DCPExecutor (an arbitrary Python object with per-batch state), so
the ops take the executor's `key`: an int fixed for the executor's life, which the graph
specialises on once. Everything that changes per batch (the plan, the buffer tables, the number
of kv bytes kept) is read at run time from the executor the key names, never at trace time: the
same compiled graph runs every batch. The attention kind (`kind`, a name of the plan's kinds or
None for its only one) is a string argument: a model's layers bake their kinds into the graph as
constants, and the backward op runs the Programs of its forward's kind.

Outputs of the forward op: o (like q), lse (float32, (q heads, local tokens)), kept (uint8: the kv
values received in forward that the plan keeps for backward; its length depends on the plan, so
the fake gives it a size only known at run time) and stamp (int64 (1,), on the CPU: the executor's
plan generation, which backward checks so that a backward after prepare(next plan) is refused)."""
from __future__ import annotations

import itertools
import threading
import weakref
from typing import Optional

import torch

_registry: "weakref.WeakValueDictionary[int, object]" = weakref.WeakValueDictionary()
_keys = itertools.count(1)
_lock = threading.Lock()


def register_executor(executor) -> int:
    """A key that names `executor` in the ops until it is garbage collected."""
    with _lock:
        key = next(_keys)
        _registry[key] = executor
    return key


def executor_of(key: int):
    executor = _registry.get(int(key))
    if executor is None:
        raise ValueError(f"no live DCPExecutor has key {key}: the executor a compiled graph or "
                         "a pending backward refers to was destroyed")
    return executor


@torch.library.custom_op("dcp::attention_forward", mutates_args=())
def attention_forward(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, executor: int,
                      softmax_scale: Optional[float] = None, kind: Optional[str] = None
                      ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    ex = executor_of(executor)
    o, lse, kept = ex.forward(q, k, v, softmax_scale, kind)
    return o, lse, kept, torch.tensor([ex.generation], dtype=torch.int64)


@attention_forward.register_fake
def _attention_forward_fake(q, k, v, executor, softmax_scale=None, kind=None):
    kept_bytes = torch.library.get_ctx().new_dynamic_size()
    return (torch.empty_like(q, memory_format=torch.contiguous_format),
            q.new_empty((q.shape[1], q.shape[0]), dtype=torch.float32),
            q.new_empty((kept_bytes,), dtype=torch.uint8),
            torch.empty((1,), dtype=torch.int64, device="cpu"))


@torch.library.custom_op("dcp::attention_backward", mutates_args=())
def attention_backward(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, o: torch.Tensor,
                       lse: torch.Tensor, do: torch.Tensor, kept: torch.Tensor,
                       stamp: torch.Tensor, executor: int, softmax_scale: Optional[float] = None,
                       kind: Optional[str] = None
                       ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    ex = executor_of(executor)
    if int(stamp[0]) != ex.generation:
        raise RuntimeError("dcp attention backward: the executor was prepared with another plan "
                           "since this forward ran; finish backward before prepare(next plan)")
    return ex.backward(q, k, v, o, lse, do, kept, softmax_scale, kind)


@attention_backward.register_fake
def _attention_backward_fake(q, k, v, o, lse, do, kept, stamp, executor, softmax_scale=None,
                             kind=None):
    return (torch.empty_like(q, memory_format=torch.contiguous_format),
            torch.empty_like(k, memory_format=torch.contiguous_format),
            torch.empty_like(v, memory_format=torch.contiguous_format))


def _setup_context(ctx, inputs, output) -> None:
    q, k, v, executor, softmax_scale, kind = inputs
    o, lse, kept, stamp = output
    ctx.save_for_backward(q, k, v, o, lse, kept, stamp)
    ctx.executor, ctx.softmax_scale, ctx.kind = executor, softmax_scale, kind
    ctx.mark_non_differentiable(lse, kept, stamp)


def _backward(ctx, do, _dlse, _dkept, _dstamp):
    q, k, v, o, lse, kept, stamp = ctx.saved_tensors
    if do is None:
        do = torch.zeros_like(o)
    dq, dk, dv = attention_backward(q, k, v, o, lse, do, kept, stamp, ctx.executor,
                                    ctx.softmax_scale, ctx.kind)
    return dq, dk, dv, None, None, None


attention_forward.register_autograd(_backward, setup_context=_setup_context)
