# SPDX-License-Identifier: Apache-2.0
"""Several layers through one executor: all forwards, then backward in reverse (autograd), and
again with activation checkpointing re-running a layer's forward. Gradients equal those of the
same model on one process with dense attention (SDPA)."""
from __future__ import annotations

import pytest
import torch

import dist_cases
import reference
from worlds import run_world

SEQLENS = [21, 3, 30]


def _dense_grads(mask: str):
    torch.manual_seed(0)
    model = dist_cases.AttentionStack(**dist_cases.STACK).double()
    x, weight = dist_cases.stack_inputs(sum(SEQLENS))
    allowed = reference.dense_mask(SEQLENS, [mask] * len(SEQLENS))
    group = dist_cases.STACK["heads"] // dist_cases.STACK["kv_heads"]

    def attn(q, k, v):
        return torch.nn.functional.scaled_dot_product_attention(
            q.transpose(0, 1), k.repeat_interleave(group, 1).transpose(0, 1),
            v.repeat_interleave(group, 1).transpose(0, 1), attn_mask=allowed).transpose(0, 1)

    x = x.clone().requires_grad_()
    (model(x, attn) * weight).sum().backward()
    return x.grad, [p.grad for p in model.parameters()]


@pytest.mark.seconds(7)
@pytest.mark.parametrize("size,checkpointed", [(2, []), (4, []), (3, [1]), (4, [0, 2])])
def test_stack_gradients_equal_dense(size: int, checkpointed: list[int]) -> None:
    mask = "lambda:sink=2,window=9"
    ranks = run_world(size, dist_cases.stack_case, SEQLENS, mask, checkpointed)
    dx_ref, grads_ref = _dense_grads(mask)
    dx = torch.full_like(dx_ref, float("nan"))
    for r in ranks:
        dx[r["positions"]] = r["dx"].double()
    assert reference.worst_relative(dx, dx_ref) < 1e-4
    for i, ref in enumerate(grads_ref):
        total = sum(r["grads"][i].double() for r in ranks)
        assert reference.worst_relative(total, ref) < 1e-4, f"parameter {i}"
