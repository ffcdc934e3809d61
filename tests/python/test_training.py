# SPDX-License-Identifier: Apache-2.0
"""Training parity: the example GPT (embedding, RMSNorm, RoPE, GQA attention, SwiGLU MLP) trained
50 steps on 4 ranks with dcp, data parallel over the group, and on 1 process with dense SDPA, same
seed and same packed batches: the losses agree to 1e-4 relative at every step (fp32)."""
from __future__ import annotations

import dcp.torch as dcpt
import dist_cases
from worlds import run_world


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
