# SPDX-License-Identifier: Apache-2.0
"""Functions the multi-process tests run on every rank (importable for spawned processes)."""
from __future__ import annotations

import torch

import dcp
import dcp.torch as dcpt
import reference


def shape_of(size: int) -> tuple[int, int]:
    """(nodes, devices per node) for a world of `size` ranks: two nodes when it divides evenly."""
    return (2, size // 2) if size % 2 == 0 and size > 2 else (1, size)


def attention_case(rank: int, size: int, case: dict) -> dict:
    """Plans case's batch, runs dcp attention forward and backward on this rank's tokens, and
    returns the local outputs with their batch positions."""
    nodes, per_node = shape_of(size)
    plan = dcp.plan(case["seqlens"], case["masks"], heads=case["heads"], kv_heads=case["kv_heads"],
                    head_dim=case["head_dim"], dtype=case["dtype"], block_size=case["block_size"],
                    cluster="cpu-local", nodes=nodes, devices_per_node=per_node,
                    strategy=case["strategy"], seed=0)
    executor = dcpt.DCPExecutor(threads=1)
    executor.prepare(plan)
    q, k, v, do = reference.inputs(sum(case["seqlens"]), case["heads"], case["kv_heads"],
                                   case["head_dim"], case["dtype"], case["seed"])
    positions = torch.from_numpy(plan.local_token_positions(rank))
    dtype = reference.TORCH_DTYPE[case["dtype"]]
    ql, kl, vl = (x[positions].to(dtype).requires_grad_() for x in (q, k, v))
    if case.get("packed_kv"):
        kv = torch.stack((kl, vl)).detach().requires_grad_()
        o = dcpt.DCPAttn.apply(executor, ql, kv)
        o.backward(do[positions].to(dtype))
        dk, dv = kv.grad[0], kv.grad[1]
        _, lse = executor.forward(ql, kl, vl)
    else:
        o, lse = dcpt.attention(executor, ql, kl, vl, return_lse=True)
        o.backward(do[positions].to(dtype))
        dk, dv = kl.grad, vl.grad
    return {"positions": positions, "o": o.detach(), "lse": lse, "dq": ql.grad, "dk": dk,
            "dv": dv, "strategy": plan.strategy}


def attention_cases(rank: int, size: int, cases: list[dict]) -> list[dict]:
    return [attention_case(rank, size, case) for case in cases]
