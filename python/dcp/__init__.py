# SPDX-License-Identifier: Apache-2.0
"""dcp: dynamic context parallelism for long-context training.

The planner from Python (every call goes to the C++ facade; nothing is implemented twice):

    import dcp
    plan = dcp.plan([45613, 9419], mask="lambda:sink=64,window=4096", heads=8, kv_heads=2,
                    head_dim=128, dtype="bf16", nodes=2, devices_per_node=4)
    plan.verify()["ok"]; plan.simulate("a100-p4de")["seconds"]; plan.save("plan.bin")
    same = dcp.load_plan("plan.bin")

A model whose layers attend differently is planned with one mask per attention kind and each
kind's layer count; every kind's Programs run on one token placement:

    plan = dcp.plan([45613, 9419], {"full": "causal", "local": "sliding_window:window=4096"},
                    layers={"full": 4, "local": 20}, nodes=2, devices_per_node=4)
    plan.kinds, plan.layers, plan.kind("local").work_units

The PyTorch API (DCPDataloader, DCPExecutor, DCPAttn) is in dcp.torch; docs/python.md.
"""
from __future__ import annotations

from typing import Any, Sequence

import numpy as np

from . import _core

__all__ = ["Plan", "plan", "workload", "load_plan", "plan_from_bytes", "mask_intervals",
           "dtype_name", "batch_options", "planner_options"]

Plan = _core.PlanHandle

_DTYPES = {"bf16": "bf16", "bfloat16": "bf16", "torch.bfloat16": "bf16",
           "fp16": "fp16", "float16": "fp16", "torch.float16": "fp16", "half": "fp16",
           "fp32": "fp32", "float32": "fp32", "torch.float32": "fp32", "float": "fp32"}


def dtype_name(dtype: Any) -> str:
    """'bf16', 'fp16' or 'fp32' for a dtype given as a string or a torch dtype."""
    name = _DTYPES.get(str(dtype))
    if name is None:
        raise TypeError(f"dtype {dtype!r} is not one of bf16, fp16, fp32 (or their torch dtypes)")
    return name


def _mask_array(mask: Any, what: str) -> np.ndarray:
    if hasattr(mask, "detach") and hasattr(mask, "cpu"):  # a torch tensor
        mask = mask.detach().cpu().numpy()
    array = np.asarray(mask)
    if array.dtype != np.int32:
        raise TypeError(f"{what} is an array of {array.dtype}; per-row key intervals must be int32 "
                        "of shape (tokens, K, 2)")
    if array.ndim != 3 or array.shape[2] != 2:
        raise ValueError(f"{what} has shape {tuple(array.shape)}; per-row key intervals must have "
                         "shape (tokens, K, 2)")
    return np.ascontiguousarray(array)


def _masks(mask: Any) -> Any:
    """A spec string, an int32 (tokens, K, 2) array, or a list of either, one per sequence; or a
    dict {kind name: one of those}."""
    if isinstance(mask, dict):
        return {name: _masks(m) for name, m in mask.items()}
    if isinstance(mask, str):
        return mask
    if isinstance(mask, (list, tuple)):
        return [m if isinstance(m, str) else _mask_array(m, f"mask of sequence {i}")
                for i, m in enumerate(mask)]
    return _mask_array(mask, "mask")


def _request(seqlens: Sequence[int], mask: Any = "causal", layers: dict | None = None,
             **options: Any) -> Any:
    """A plan request. The options and their defaults are the C++ planner's (an option left out
    or None keeps its default); only dtypes are translated here, torch's to dcp's names."""
    for name in ("dtype", "partial_dtype"):
        if options.get(name) is not None:
            options[name] = dtype_name(options[name])
    return _core.make_request([int(n) for n in seqlens], _masks(mask), layers, options)


def batch_options() -> list[dict]:
    """The batch's options (its attention shape and block model), described as planner_options()
    describes the planner's, for dcp.plan's keywords and `dcp plan`'s flags alike: heads,
    kv_heads, head_dim, dtype, softmax_scale, block_size ('auto' or a whole number),
    head_block_size."""
    return _core.batch_options()


def planner_options() -> list[dict]:
    """The planner's options, described once in C++ (dcp/planner_options.h) for dcp.plan's
    keywords and `dcp plan`'s flags alike: each a dict with name (the keyword), type ('int',
    'float', 'str', 'int|str', 'float|str', 'bool'), default (as text; '' for an option that is
    off), help, flag (the command line's, e.g. '--static-dp') and value_name."""
    return _core.planner_options()


def plan(seqlens: Sequence[int], mask: Any = "causal", layers: dict | None = None,
         **options: Any) -> Plan:
    """Plans one batch, as `dcp plan` does. The batch's options are batch_options(), the flags
    of `dcp plan` (kv_heads is --kv-heads): heads=8, kv_heads=2, head_dim=128, dtype='bf16' (or
    a torch dtype), softmax_scale (1/sqrt(head_dim)), block_size='auto' (or None: chosen),
    head_block_size=1; seed=0 is the planner's.
    The planner's options are planner_options(), the flags of `dcp plan` (static_dp is
    --static-dp), with the same types, defaults and checks: cluster='a100-p4de' (a preset or a
    cluster file), nodes, devices_per_node (the cluster's), strategy='dcp' (dcp | dcp-pure |
    ring | zigzag | ulysses | hybrid | te | loongtrain), static_dp=1 (static strategies and dcp's
    static candidates: the data parallel degree, or 'auto'), loongtrain_window=0 (loongtrain:
    head groups per inner ring; 0: a node's), stages=0 (dcp: chosen), compute_masked_tiles=False
    (static strategies), eps_compute=0.3, eps_memory=0.2 (dcp), max_device_tokens=0 (dcp: the
    most tokens a rank may hold; 0: no limit), token_flops=0 (dcp: the FLOPs
    of the rest of a layer per token, forward and backward, which the rank holding the token
    runs; dcp's search then compares candidates by their step, each pass of a layer ending when
    its slowest rank has run its attention and that;
    dcp.torch.hf.plan_options derives it from a transformers config), keep_kv='all' (dcp: the
    kv values a rank received in the forward pass that it keeps for the backward pass instead of
    receiving them again: 'all', 'none', or up to that many MiB per rank and attention layer),
    partial_dtype=None (the dtype partial o, dq, dk, dv travel in between ranks, accumulated in
    fp32 either way: 'fp32' or the storage dtype; None: the storage dtype for dcp's own plans,
    fp32 for static strategies). An option of dcp's own plans with a static strategy, or the
    reverse, is refused as the command line refuses its flag.

    `mask` is a spec ('causal', 'lambda:sink=64,window=4096', ...) for every sequence, an int32
    (total tokens, K, 2) array of per-row key intervals, or a list with one spec or array per
    sequence. A dict {kind name: mask} (each mask in those forms) plans a model whose layers
    attend differently, `dcp plan --mask KIND=SPEC`: one plan with every kind's Programs on one
    token placement, its kinds cut into the blocks the first kind's block size gives; `layers`
    ({kind name: layer count}, 1 for a kind left out) weighs each kind in the placement and the
    simulated step (`dcp plan --layers`). The same inputs and seed give the same plan bytes.
    Raises ValueError naming the offending value (TypeError for a value of the wrong type)."""
    return _core.plan_request(_request(seqlens, mask, layers, **options))


def workload(seqlens: Sequence[int], mask: Any = "causal", layers: dict | None = None,
             **options: Any) -> dict:
    """The block model of a batch (tokens, block size, token blocks, tiles, work units, pairs),
    with plan()'s options. For a dict of attention kinds, tiles, work units and pairs are given
    per kind, with its layers, under "kinds" {name: {...}}."""
    return _core.workload_summary(_request(seqlens, mask, layers, **options))


def load_plan(path: str) -> Plan:
    """Reads a binary plan file (dcp plan -o, Plan.save), of one mask or of attention kinds.
    Raises ValueError for a damaged file."""
    return _core.load_plan(str(path))


def plan_from_bytes(data: bytes) -> Plan:
    """The inverse of Plan.to_bytes()."""
    return _core.plan_from_bytes(bytes(data))


def mask_intervals(mask: Any, length: int) -> np.ndarray:
    """A sequence's mask as per-row key intervals: int32 (length, K, 2), unused slots [0, 0)."""
    return _core.mask_intervals(mask if isinstance(mask, str) else _mask_array(mask, "mask"),
                                int(length))
