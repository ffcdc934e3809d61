# SPDX-License-Identifier: Apache-2.0
"""Training parity: the example GPT (embedding, RMSNorm, RoPE, GQA attention, SwiGLU MLP) trained
50 steps on 4 ranks with dcp, data parallel over the group, and on 1 process with dense SDPA, same
seed and same packed batches: the losses agree to 1e-4 relative at every step (fp32). A smaller
GPT whose layers attend differently (sliding window, causal, chunked: one plan of three attention
kinds per batch) trains on 2 and 4 ranks like its dense twin, each layer under its kind's mask."""
from __future__ import annotations

import pytest

import dcp.torch as dcpt
import dist_cases
from worlds import run_world


@pytest.mark.seconds(30)
def test_four_ranks_with_dcp_train_like_one_dense_process() -> None:
    ranks = run_world(4, dist_cases.train_dcp, timeout=900, group_timeout=120)
    result = ranks[0]
    assert len(result["losses"]) == dist_cases.TRAIN["steps"]
    for r in ranks[1:]:
        assert r["batches"] == result["batches"]
        assert r["losses"] == result["losses"]
    # The loader's batches are dcp's packing of the dataset, epoch after epoch.
    dataset = dist_cases.RandomBytes()
    expected = [b for epoch in range(20) for b in dcpt.pack_batches(
        dataset.lengths, dist_cases.TRAIN["tokens_per_batch"], seed=epoch)]
    assert result["batches"] == expected[: dist_cases.TRAIN["steps"]]
    dense = dist_cases.train_dense(result["batches"])
    for step, (got, want) in enumerate(zip(result["losses"], dense)):
        assert abs(got - want) <= 1e-4 * abs(want), f"step {step}: dcp {got} vs dense {want}"
    assert dense[-1] < dense[0]  # it learns


@pytest.mark.seconds(10)
@pytest.mark.parametrize("size", [2, 4])
def test_layers_of_several_attention_kinds_train_like_dense(size: int) -> None:
    ranks = run_world(size, dist_cases.train_dcp, True, timeout=900, group_timeout=120)
    result = ranks[0]
    assert len(result["losses"]) == dist_cases.KIND_TRAIN["steps"]
    for r in ranks[1:]:
        assert r["batches"] == result["batches"]
        assert r["losses"] == result["losses"]
    dense = dist_cases.train_dense(result["batches"], kinds=True)
    for step, (got, want) in enumerate(zip(result["losses"], dense)):
        assert abs(got - want) <= 1e-4 * abs(want), f"step {step}: dcp {got} vs dense {want}"
    # The kinds matter: the same model with causal attention in every layer learns otherwise.
    causal = {kind: "causal" for kind in dist_cases.KIND_TRAIN["masks"]}
    other = dist_cases.train_dense(result["batches"], kinds=True, masks=causal)
    assert any(abs(a - b) > 1e-3 * abs(b) for a, b in zip(dense, other))
