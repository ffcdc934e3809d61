# SPDX-License-Identifier: Apache-2.0
"""DCPDataloader: the same batches and plans on every rank, every sample once per epoch, labels
and positions right across block and rank boundaries, planner threads that stop, bad input."""
from __future__ import annotations

import gc
import os

import numpy as np
import pytest
import torch

import dcp
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


# The loader's options of the batch, as dcp.plan takes them.
_BATCH = {name: LOADER[name] for name in ("heads", "kv_heads", "head_dim", "dtype", "block_size",
                                           "cluster", "seed")}


@pytest.mark.parametrize("options", [
    dict(strategy="ring", compute_masked_tiles=True),
    dict(strategy="loongtrain", loongtrain_window=1),
    dict(strategy="zigzag", static_dp="auto"),
    dict(static_dp=2, stages=2, eps_compute=0.2, eps_memory=0.05, keep_kv="none",
         partial_dtype="fp32", token_flops=1e6),
])
def test_every_planner_option_plans_the_loaders_batches_as_dcp_plan_does(options) -> None:
    assert set(options) <= {option["name"] for option in dcp.planner_options()}
    loader = dcpt.DCPDataloader(TokenDataset(LOADER_LENGTHS), None, **LOADER, **options)
    batches = 0
    for local, plan in loader:
        want = dcp.plan(local.seqlens, "causal", nodes=1, devices_per_node=1, **_BATCH, **options)
        assert plan.strategy.startswith(options.get("strategy", "dcp"))
        assert plan.to_bytes() == want.to_bytes(), f"batch {batches} with {options}"
        batches += 1
    assert batches > 1


def test_a_static_data_parallel_degree_plans_the_ranks_batches_as_dcp_plan_does() -> None:
    options = dict(strategy="ring", static_dp=2)
    ranks = run_world(2, dist_cases.loader_plans_case, options)
    assert ranks[0] and ranks[0] == ranks[1]
    for seqlens, got in ranks[0]:
        want = dcp.plan(seqlens, "causal", nodes=1, devices_per_node=2, **_BATCH, **options)
        assert got == want.to_bytes()


def test_an_unknown_loader_keyword_is_refused_naming_it() -> None:
    with pytest.raises(TypeError, match="static_dpp") as info:
        dcpt.DCPDataloader(TokenDataset(LOADER_LENGTHS), None, static_dpp=2, **LOADER)
    assert "static_dp," in str(info.value)  # the options it takes are listed
    with pytest.raises(TypeError, match="static_dp is a float"):
        next(iter(dcpt.DCPDataloader(TokenDataset(LOADER_LENGTHS), None, static_dp=2.5,
                                     **LOADER)))
