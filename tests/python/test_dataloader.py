# SPDX-License-Identifier: Apache-2.0
"""DCPDataloader: the same batches and plans on every rank, every sample once per epoch, labels
and positions right across block and rank boundaries, planner threads that stop, bad input."""
from __future__ import annotations

import gc
import os

import numpy as np
import pytest
import torch

import dcp.torch as dcpt
import dist_cases
from dist_cases import LOADER, LOADER_LENGTHS, TokenDataset
from worlds import run_world


def _threads() -> int:
    return len(os.listdir("/proc/self/task"))


def test_ranks_get_the_same_plans_and_every_sample_once_per_epoch() -> None:
    ranks = run_world(3, dist_cases.loader_case, 2)
    batches = [len(r) for r in ranks]
    assert batches[0] == batches[1] == batches[2] > 2
    for epoch in (0, 1):
        epoch_batches = [b for b in ranks[0] if b["epoch"] == epoch]
        seen = sorted(i for b in epoch_batches for i in b["indices"])
        assert seen == list(range(len(LOADER_LENGTHS))), "every sample once per epoch"
    for b in range(batches[0]):
        first = ranks[0][b]
        for r in ranks[1:]:
            assert torch.equal(r[b]["plan"], first["plan"]), f"batch {b}: plans differ"
            assert r[b]["indices"] == first["indices"]
        # The ranks' tokens together are the batch's, once each, with labels and positions right.
        total = sum(first["seqlens"])
        assert sum(first["seqlens"]) <= LOADER["tokens_per_batch"]
        tokens = torch.full((total,), -1, dtype=torch.long)
        labels = torch.full((total,), -7, dtype=torch.long)
        positions = torch.full((total,), -1, dtype=torch.long)
        for r in ranks:
            at = r[b]["global_positions"]
            assert (tokens[at] == -1).all()
            tokens[at], labels[at], positions[at] = (r[b]["input_ids"], r[b]["labels"],
                                                      r[b]["position_ids"])
            assert torch.equal(r[b]["loss_mask"], r[b]["labels"] != dcpt.IGNORE_INDEX)
        expected = torch.cat([TokenDataset(LOADER_LENGTHS)[i] for i in first["indices"]])
        assert torch.equal(tokens, expected)
        assert torch.equal(positions, expected % 1000)
        ends = torch.cumsum(torch.tensor(first["seqlens"]), 0) - 1
        want = torch.roll(expected, -1)
        want[ends] = dcpt.IGNORE_INDEX
        assert torch.equal(labels, want)
        assert first["loss_tokens"] == total - len(first["seqlens"])


def test_same_seed_same_batches_and_another_seed_others() -> None:
    def run(seed):
        loader = dcpt.DCPDataloader(TokenDataset(LOADER_LENGTHS), None, **{**LOADER, "seed": seed})
        return [(local.batch_indices, plan.to_bytes()) for local, plan in loader]
    assert run(7) == run(7)
    assert [i for i, _ in run(7)] != [i for i, _ in run(8)]
    packed = dcpt.pack_batches(LOADER_LENGTHS, LOADER["tokens_per_batch"], seed=7)
    assert packed == [i for i, _ in run(7)]


def test_iterable_datasets_are_packed_in_pools() -> None:
    stream = [TokenDataset(LOADER_LENGTHS)[i] for i in range(len(LOADER_LENGTHS))]
    loader = dcpt.DCPDataloader(stream_of(stream), None, pool_size=5, **LOADER)
    seen = sorted(i for local, _ in loader for i in local.batch_indices)
    assert seen == list(range(len(LOADER_LENGTHS)))


def stream_of(items):
    class Stream(torch.utils.data.IterableDataset):
        def __iter__(self):
            return iter(items)
    return Stream()


def test_planner_threads_stop_on_break_and_on_error() -> None:
    gc.collect()
    before = _threads()
    loader = dcpt.DCPDataloader(TokenDataset(LOADER_LENGTHS), None, planner_threads=2, **LOADER)
    for _ in loader:
        assert _threads() >= before + 2
        break
    gc.collect()
    assert _threads() == before

    calls = []

    def failing_mask(sample):
        calls.append(1)
        if len(calls) > 6:
            raise KeyError("this mask_fn fails on its 7th sample")
        return "causal"
    with pytest.raises(KeyError, match="7th sample"):
        for _ in dcpt.DCPDataloader(TokenDataset(LOADER_LENGTHS), failing_mask, **LOADER):
            pass
    gc.collect()
    assert _threads() == before


def test_the_loader_waits_little_once_plans_are_ahead() -> None:
    loader = dcpt.DCPDataloader(TokenDataset(LOADER_LENGTHS), None, **LOADER)
    batches = sum(1 for _ in loader)
    assert batches > 0 and loader.wait_seconds >= 0 and loader.plan_seconds > 0


@pytest.mark.parametrize("mask,error,words", [
    (lambda s: "sliding_window:window=0", ValueError, "window"),
    (lambda s: "nonsense", ValueError, "nonsense"),
    (lambda s: np.zeros((s.numel(), 1, 2), np.int64), TypeError, "int64"),
    (lambda s: np.zeros((s.numel() + 1, 1, 2), np.int32), ValueError, "mask of sequence"),
    (lambda s: 42, TypeError, "int"),
])
def test_a_malformed_mask_names_itself(mask, error, words) -> None:
    with pytest.raises(error) as info:
        next(iter(dcpt.DCPDataloader(TokenDataset(LOADER_LENGTHS), mask, **LOADER)))
    assert words in str(info.value)


def test_a_sample_longer_than_a_batch_is_refused() -> None:
    with pytest.raises(ValueError, match="sample 2 has 120 tokens, more than tokens_per_batch 100"):
        next(iter(dcpt.DCPDataloader(TokenDataset(LOADER_LENGTHS), None,
                                     **{**LOADER, "tokens_per_batch": 100})))
    with pytest.raises(ValueError, match="sample 0 has shape"):
        next(iter(dcpt.DCPDataloader([torch.zeros(2, 3, dtype=torch.long)], None, **LOADER)))
    with pytest.raises(TypeError, match="float32"):
        next(iter(dcpt.DCPDataloader([torch.zeros(3)], None, **LOADER)))
