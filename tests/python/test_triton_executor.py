# SPDX-License-Identifier: Apache-2.0
"""The torch executor end to end with the Triton kernels (under Triton's interpreter, on CPU
tensors over gloo): the same o, lse, dq, dk and dv as with dcp's cpu kernels, on 2 ranks, for
plans of one mask and for every kind of a plan of attention kinds (a Triton device per kind)."""
from __future__ import annotations

import functools

import pytest
import torch

import dist_cases
import reference
from worlds import run_world, run_world_once

SEQLENS = [21, 1, 30]
RANDOM = [reference.random_interval_mask(n, seed=n + 1) for n in SEQLENS]


def _case(name: str, masks, dtype: str = "fp32", heads: int = 2, kv_heads: int = 1,
          strategy: str = "dcp-pure") -> dict:
    return dict(name=name, seqlens=SEQLENS, masks=masks, heads=heads, kv_heads=kv_heads,
                head_dim=16, dtype=dtype, block_size=8, strategy=strategy, seed=len(name))


CASES = [
    _case("causal", "causal"),
    _case("random-intervals", RANDOM),
    _case("lambda-gqa-bf16", "lambda:sink=3,window=6", dtype="bf16", heads=4, kv_heads=2),
    # o, lse, dq and dk, dv partials all travel (in bf16, narrowed and widened by the device).
    _case("causal-gqa-bf16", "causal", dtype="bf16", heads=4, kv_heads=2),
    _case("causal-zigzag", "causal", strategy="zigzag"),
]
# Two kinds with bf16 partials (each kind's device narrows and widens its own).
KINDS_CASE = dict(_case("kinds-bf16", None, dtype="bf16"),
                  kinds={"full": "causal", "local": "sliding_window:window=6"},
                  layers={"local": 2})
TOLERANCE = {"fp32": 1e-5, "bf16": 1e-2}  # of max |cpu|; bf16: one rounding of the output


@functools.lru_cache(maxsize=None)
def _results():
    return run_world_once("triton-executor", 2, dist_cases.triton_and_cpu_cases,
                          CASES + [KINDS_CASE], timeout=600, group_timeout=300,
                          triton_interpreter=True)


def _expect_close(triton: dict, cpu: dict, dtype: str, where) -> None:
    for name in ("o", "lse", "dq", "dk", "dv"):
        got, want = triton[name].double(), cpu[name].double()
        finite = torch.isfinite(want)
        assert torch.equal(finite, torch.isfinite(got)), (where, name)
        assert torch.equal(got[~finite], want[~finite]), (where, name)  # -inf lse alike
        scale = max(want[finite].abs().max().item(), 1e-30) if finite.any() else 1.0
        error = (got[finite] - want[finite]).abs().max().item() / scale if finite.any() else 0
        assert error <= TOLERANCE[dtype], (where, name, error)


# The first case asks for the world that every test here reads (run_world_once): it starts among
# the long tests (conftest.py), so the others find the results ready.
@pytest.mark.parametrize("index", [pytest.param(0, marks=pytest.mark.seconds(25)),
                                   *range(1, len(CASES))], ids=[c["name"] for c in CASES])
def test_triton_kernels_match_cpu_kernels(index: int) -> None:
    for rank, per_rank in enumerate(_results()):
        triton, cpu = per_rank[index]
        assert torch.equal(triton["positions"], cpu["positions"])
        assert triton["partial_dtype"] == cpu["partial_dtype"] == CASES[index]["dtype"]
        _expect_close(triton, cpu, CASES[index]["dtype"], rank)


def test_triton_kernels_run_every_attention_kind_as_the_cpu_kernels() -> None:
    for rank, per_rank in enumerate(_results()):
        triton, cpu = per_rank[len(CASES)]
        assert torch.equal(triton["positions"], cpu["positions"])
        assert triton["kinds"] == cpu["kinds"] == list(KINDS_CASE["kinds"])
        for kind in KINDS_CASE["kinds"]:
            _expect_close(triton[kind], cpu[kind], KINDS_CASE["dtype"], (rank, kind))


def test_triton_kernels_on_the_cpu_need_the_interpreter(monkeypatch) -> None:
    import dcp.torch as dcpt
    monkeypatch.delenv("TRITON_INTERPRET", raising=False)
    with pytest.raises(ValueError, match="TRITON_INTERPRET=1"):
        dcpt.DCPExecutor(kernels="triton")
    with pytest.raises(ValueError, match="neither 'cpu' nor 'triton'"):
        dcpt.DCPExecutor(kernels="cuda")
    with pytest.raises(ValueError, match="the cpu kernels run on the CPU"):
        dcpt.DCPExecutor(device="cuda:0", kernels="cpu")


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_cuda_executor_matches_cpu_kernels() -> None:
    """One process on a GPU (transfers to itself through the communication stream): the Triton
    kernels on CUDA give the cpu kernels' o, lse, dq, dk, dv for every mask kind and dtype."""
    import dcp
    import dcp.torch as dcpt
    for mask in ("causal", RANDOM, "lambda:sink=3,window=6",
                 "shared_question:question=0.25,answers=3"):
        for dtype in ("fp32", "bf16"):
            plan = dcp.plan(SEQLENS, mask, heads=4, kv_heads=2, head_dim=64, dtype=dtype,
                            block_size=16, nodes=1, devices_per_node=1)
            q, k, v, do = reference.inputs(sum(SEQLENS), 4, 2, 64, dtype, seed=3)
            torch_dtype = reference.TORCH_DTYPE[dtype]
            outputs = []
            for device, kernels in (("cuda", "triton"), ("cpu", "cpu")):
                executor = dcpt.DCPExecutor(device=device, kernels=kernels)
                executor.prepare(plan)
                ql, kl, vl = (x.to(device, torch_dtype).requires_grad_() for x in (q, k, v))
                o, lse = dcpt.attention(executor, ql, kl, vl, return_lse=True)
                o.backward(do.to(device, torch_dtype))
                outputs.append([t.detach().double().cpu() for t in (o, lse, ql.grad, kl.grad,
                                                                     vl.grad)])
            for got, want in zip(*outputs):
                finite = torch.isfinite(want)
                assert torch.equal(finite, torch.isfinite(got))
                scale = max(want[finite].abs().max().item(), 1e-30)
                error = (got[finite] - want[finite]).abs().max().item() / scale
                assert error <= TOLERANCE[dtype], (mask, dtype, error)


def test_triton_executor_refuses_head_dims_its_kernels_cannot_run() -> None:
    [message] = run_world(1, dist_cases.triton_head_dim_refusal, timeout=120,
                           triton_interpreter=True)
    assert "head dim 512 is outside the Triton kernels' 1..256" in message, message
