# SPDX-License-Identifier: Apache-2.0
"""Bad input to the executor and attention raises naming the value; a dead peer makes the others
raise within the group's timeout."""
from __future__ import annotations

import re
import time

import pytest
import torch

import dcp
import dcp.torch as dcpt
import dist_cases
from worlds import run_world

SHAPE = dict(heads=4, kv_heads=2, head_dim=8, dtype="fp32", block_size=8, cluster="cpu-local")


@pytest.fixture()
def executor():
    ex = dcpt.DCPExecutor(threads=1)
    ex.prepare(dcp.plan([20, 7], "causal", nodes=1, devices_per_node=1, **SHAPE))
    return ex


def qkv(n=27, heads=4, kv_heads=2, d=8, dtype=torch.float32):
    return (torch.randn(n, heads, d, dtype=dtype), torch.randn(n, kv_heads, d, dtype=dtype),
            torch.randn(n, kv_heads, d, dtype=dtype))


def test_attention_before_prepare() -> None:
    with pytest.raises(RuntimeError, match="prepare"):
        dcpt.attention(dcpt.DCPExecutor(), *qkv())


def test_a_plan_for_another_world_size() -> None:
    plan = dcp.plan([64], "causal", nodes=1, devices_per_node=2, **SHAPE)
    with pytest.raises(ValueError, match=re.escape("the plan is for 2 devices (1 x 2) but the "
                                                   "group has 1 ranks")):
        dcpt.DCPExecutor().prepare(plan)
    with pytest.raises(TypeError, match="dcp.Plan"):
        dcpt.DCPExecutor().prepare("plan.bin")


@pytest.mark.parametrize("make,error,words", [
    (lambda: qkv(n=26), ValueError, "q has shape (26, 4, 8)"),
    (lambda: (qkv()[0], qkv(kv_heads=1)[1], qkv()[2]), ValueError, "k has shape (27, 1, 8)"),
    (lambda: qkv(d=16), ValueError, "(27, 4, 8)"),
    (lambda: qkv(dtype=torch.bfloat16), TypeError, "torch.bfloat16"),
    (lambda: (qkv()[0].to("meta"), *qkv()[1:]), ValueError, "meta"),
    (lambda: ([[0.0]], *qkv()[1:]), TypeError, "list"),
])
def test_tensors_outside_the_local_layout(executor, make, error, words) -> None:
    with pytest.raises(error) as info:
        dcpt.attention(executor, *make())
    assert words in str(info.value)


def test_backward_needs_the_kept_tensor_its_forward_returned(executor) -> None:
    q, k, v = qkv()
    o, lse, kept = executor.forward(q, k, v)
    assert kept.dtype == torch.uint8 and kept.numel() == executor.kept_bytes
    with pytest.raises(ValueError, match=r"kept is a torch.uint8 tensor of shape \(3,\)"):
        executor.backward(q, k, v, o, lse, torch.randn_like(q), torch.empty(3, dtype=torch.uint8))
    with pytest.raises(ValueError, match="kept is a list"):
        executor.backward(q, k, v, o, lse, torch.randn_like(q), [])


def test_non_contiguous_inputs_are_taken(executor) -> None:
    q, k, v = qkv()
    wide = torch.randn(27, 8, 8)[:, ::2]  # a strided view with q's shape
    assert not wide.is_contiguous()
    torch.testing.assert_close(dcpt.attention(executor, wide, k, v),
                               dcpt.attention(executor, wide.contiguous(), k, v))


def test_bad_softmax_scale_and_packed_kv(executor) -> None:
    q, k, v = qkv()
    with pytest.raises(ValueError, match="softmax_scale -1"):
        dcpt.attention(executor, q, k, v, softmax_scale=-1.0)
    with pytest.raises(ValueError, match=re.escape("(27, 2, 8)")):
        dcpt.DCPAttn.apply(executor, q, k)


def test_backward_after_the_next_prepare(executor) -> None:
    q, k, v = (x.requires_grad_() for x in qkv())
    o = dcpt.attention(executor, q, k, v)
    executor.prepare(dcp.plan([20, 7], "causal", nodes=1, devices_per_node=1, **SHAPE))
    with pytest.raises(RuntimeError, match="prepared with another plan"):
        o.sum().backward()


def test_a_scale_given_per_call_is_used(executor) -> None:
    q, k, v = qkv()
    base = dcpt.attention(executor, q, k, v)
    scaled = dcpt.attention(executor, q, k, v, softmax_scale=1 / 8 ** 0.5)
    torch.testing.assert_close(base, scaled)  # the plan's scale is 1/sqrt(d)
    assert not torch.allclose(base, dcpt.attention(executor, q, k, v, softmax_scale=2.0))


def test_a_dead_peer_makes_the_others_raise_within_the_timeout() -> None:
    timeout = 10
    start = time.monotonic()
    results = run_world(3, dist_cases.dying_peer_case, timeout=60, group_timeout=timeout,
                        allow_failures=True)
    assert time.monotonic() - start < 4 * timeout
    assert results[1] == ("missing", 3)
    for rank in (0, 2):
        kind, trace = results[rank]
        assert kind == "error", f"rank {rank} did not raise: {results[rank]}"
        assert "RuntimeError" in trace and "rank" in trace, trace


class _Transport:
    def start(self, ops):
        return 0

    def wait(self, group):
        pass

    def barrier(self):
        pass

    def abort(self, reason):
        pass


class _FailingDevice:
    """A device whose runs of copies fail; everything else does nothing."""

    def prepare(self, forward, backward):
        pass

    def begin(self, pass_index, scale):
        pass

    def end(self):
        pass

    def copy_run(self, store, kind, row_begin, row_end, max_tokens):
        raise ValueError(f"no copies here ({row_end - row_begin} rows)")

    def _nothing(self, *args):
        pass

    attention = memory_run = convert_partials = _nothing


def test_a_device_failing_inside_a_run_names_the_runs_instructions() -> None:
    from dcp import _core
    plan = dcp.plan([20, 7], "causal", nodes=1, devices_per_node=1, strategy="dcp-pure",
                    **{**SHAPE, "heads": 2, "kv_heads": 2})
    executor = _core.Executor(_Transport(), 0, 1, 1, _FailingDevice())
    executor.prepare(plan)
    n = executor.local_tokens
    q, k, v = (torch.zeros(n, 2, 8) for _ in range(3))
    o, lse = torch.zeros(n, 2, 8), torch.zeros(2, n)
    kept = torch.empty(executor.kept_bytes, dtype=torch.uint8)
    words = (r"(?s)instruction 0 \(load\) \(a run of instructions 0\.\.\d+\): "
             r"the device's copy_run failed: .*no copies here")
    with pytest.raises(RuntimeError, match=words):
        executor.forward(q, k, v, o, lse, kept, 0.0)
