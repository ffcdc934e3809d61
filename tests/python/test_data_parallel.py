# SPDX-License-Identifier: Apache-2.0
"""Data parallelism around dcp on gloo ranks: a tiny transformers Llama under FSDP2 over the
pool, under DDP, and on a 2 x 2 (dp, cp) mesh trains like one sdpa process (losses and every
parameter's first-step gradient to 1e-4 relative, so a gradient averaged instead of summed
fails); every replica of a mesh gets its own share of each global batch; ranks the plan leaves
without tokens train (one mask, Gemma 3's and Qwen2's attention kinds); a run resumed from a
torch.distributed.checkpoint continues with the same losses; states and wrappers that do not fit
are refused by name."""
from __future__ import annotations

import re
import types

import pytest
import torch

pytest.importorskip("transformers")

import dcp  # noqa: E402
import dcp.torch as dcpt  # noqa: E402
import hf_cases  # noqa: E402
import scale_cases  # noqa: E402
from dcp.torch.data import shares  # noqa: E402
from dist_cases import LOADER_LENGTHS, TokenDataset  # noqa: E402
from worlds import run_world, run_world_once  # noqa: E402


def _like_dense(got: dict, family: str, dataset=None) -> None:
    want = hf_cases.train_hf_dense(family, got["batches"], dataset)
    for step, (a, b) in enumerate(zip(got["losses"], want["losses"])):
        assert abs(a - b) <= 1e-4 * abs(b), f"{family} step {step}: dcp {a} vs sdpa {b}"
    assert set(got["grads"]) == set(want["grads"])
    for name, grad in want["grads"].items():
        scale = grad.abs().max().item()
        err = (got["grads"][name] - grad).abs().max().item()
        assert err <= 1e-4 * scale + 1e-9, f"{family} {name}: gradient off by {err} of {scale}"


def _trained(mode: str) -> list:
    """The 4-rank training of a tiny Llama in `mode`, run once for every test that reads it."""
    return run_world_once(f"data-parallel-{mode}", 4, scale_cases.train_data_parallel, "llama",
                          mode, timeout=600, group_timeout=120)


@pytest.mark.seconds(25)
@pytest.mark.parametrize("mode", ["fsdp", "ddp", "mesh"])
def test_data_parallel_training_equals_one_sdpa_process(mode: str) -> None:
    ranks = _trained(mode)
    got = ranks[0]
    assert len(got["losses"]) == hf_cases.HF_TRAIN["steps"]
    for other in ranks[1:]:
        assert other["losses"] == got["losses"] and other["batches"] == got["batches"]
    _like_dense(got, "llama")
    if mode == "mesh":
        for step, batch in enumerate(got["batches"]):
            by_replica = {r["shares"][step][0]: r["shares"][step][1] for r in ranks}
            assert sorted(by_replica) == [0, 1]
            assert not set(by_replica[0]) & set(by_replica[1]), f"step {step}: shares overlap"
            assert sorted(by_replica[0] + by_replica[1]) == sorted(batch)


@pytest.mark.seconds(25)
def test_a_rank_without_tokens_trains_under_fsdp2() -> None:
    families = ["llama", "gemma3", "qwen2"]  # one mask; two attention kinds each
    ranks = run_world(4, scale_cases.train_families, families, "fsdp", True, timeout=600,
                      group_timeout=120)
    for family in families:
        runs = [r[family] for r in ranks]
        assert any(n == 0 for r in runs for n in r["local_tokens"]), f"{family}: no empty rank"
        _like_dense(runs[0], family, scale_cases.SlicedText(scale_cases.EMPTY_RANK["lengths"]))


@pytest.mark.seconds(10)
def test_a_mesh_gives_every_replica_its_own_share_of_each_global_batch() -> None:
    ranks = run_world(4, scale_cases.epoch_shares, LOADER_LENGTHS, 128, timeout=300)
    batches = [r["batches"] for r in ranks]
    assert len({len(b) for b in batches}) == 1 and len(batches[0]) >= 2
    replica_of = [b[0]["replica"] for b in batches]
    assert sorted(replica_of) == [0, 0, 1, 1]  # ranks 0, 1 are replica 0 on a (dp, cp) mesh
    seen: list[int] = []
    for step in range(len(batches[0])):
        entries = [b[step] for b in batches]
        assert len({e["step"] for e in entries}) == 1
        # The ranks of a replica share its plan; the replicas' plans are their own.
        by_replica = {}
        for e in entries:
            by_replica.setdefault(e["replica"], []).append(e)
        for members in by_replica.values():
            assert all(m["plan"] == members[0]["plan"] for m in members)
            assert members[0]["tokens"] <= 128
        first = [by_replica[r][0] for r in (0, 1)]
        assert first[0]["plan"] != first[1]["plan"]
        assert not set(first[0]["indices"]) & set(first[1]["indices"])
        # Every rank agrees on the replicas' simulated steps; the loss is normalised globally.
        assert all(e["replica_steps"] == entries[0]["replica_steps"] for e in entries)
        assert len(entries[0]["replica_steps"]) == 2 and min(entries[0]["replica_steps"]) > 0
        union = first[0]["indices"] + first[1]["indices"]
        assert entries[0]["loss_tokens"] == sum(LOADER_LENGTHS[i] for i in union) - len(union)
        seen += union
    assert ranks[0]["left_out"] == []
    assert sorted(seen) == list(range(len(LOADER_LENGTHS))), "every sample once per epoch"


@pytest.mark.seconds(8)
def test_an_epoch_ending_with_fewer_samples_than_replicas_leaves_them_out() -> None:
    # Five samples of a whole batch each: two global batches of two, then one sample for two.
    ranks = run_world(4, scale_cases.epoch_shares, [40] * 5, 40, timeout=300)
    for r in ranks:
        assert len(r["batches"]) == 2 and len(r["left_out"]) == 1
        trained = {i for b in r["batches"] for i in b["indices"]}
        assert trained.isdisjoint(r["left_out"])
    seen = sorted(i for r in ranks[::2] for b in r["batches"] for i in b["indices"])
    assert sorted(seen + ranks[0]["left_out"]) == list(range(5))


@pytest.mark.seconds(30)
def test_a_resumed_run_continues_with_the_same_batches_plans_and_losses(tmp_path) -> None:
    args = dict(timeout=600, group_timeout=120)
    # The uninterrupted run: the mesh training's first six steps (the same model, loader and
    # optimizer).
    whole = _trained("mesh")[0]["losses"][:6]
    first = run_world(4, scale_cases.resume_run, str(tmp_path / "ckpt"), "first", **args)[0]
    rest = run_world(4, scale_cases.resume_run, str(tmp_path / "ckpt"), "rest", **args)[0]
    assert first == whole[:3]
    assert rest == whole[3:], "the resumed steps differ from the uninterrupted run's"


@pytest.mark.seconds(20)
def test_a_rank_that_dies_mid_step_makes_the_others_raise_at_once(tmp_path) -> None:
    timeout = 20
    ckpt = str(tmp_path / "ckpt")
    results = run_world(3, scale_cases.dying_rank, ckpt, timeout=300, group_timeout=timeout,
                        allow_failures=True)
    assert results[1][0] == "missing"  # it exited
    named = 0
    for rank in (0, 2):
        kind, message = results[rank]
        assert kind == "error", f"rank {rank} did not raise: {results[rank]}"
        took = re.search(r"RuntimeError: after ([0-9.]+) s:", message)
        assert took and float(took.group(1)) < timeout, message
        # dcp's transfers name the peer; FSDP2's collectives raise gloo's error, which names its
        # address.
        peers = re.search(r"transfers with ranks \[([0-9, ]+)\] failed", message)
        if peers and 1 in [int(p) for p in peers.group(1).split(",")]:
            named += 1
        else:
            assert "by peer" in message, message
    assert named >= 1, "no survivor's dcp transfers named rank 1"
    # The checkpoint written before the death is whole: a new process group loads it.
    states = run_world(3, scale_cases.load_after_a_death, ckpt, timeout=300)
    assert all(s["batch"] == 1 and s["epoch"] == 0 for s in states)


def _loader(dataset, **overrides):
    options = dict(tokens_per_batch=160, heads=4, kv_heads=2, head_dim=8, dtype=torch.float32,
                   block_size=16, cluster="cpu-local", seed=7)
    options.update(overrides)
    return dcpt.DCPDataloader(dataset, **options)


def test_a_loader_resumes_at_the_next_batch_in_one_process() -> None:
    dataset = TokenDataset(LOADER_LENGTHS)
    loader = _loader(dataset, epochs=2)
    whole = [(lb.epoch, lb.batch_indices, plan.to_bytes()) for lb, plan in loader]
    for cut in (1, len(whole) // 2 + 1, len(whole)):
        loader = _loader(dataset, epochs=2)
        iterator = iter(loader)
        for _ in range(cut):
            next(iterator)
        iterator.close()
        state = loader.state_dict()
        resumed = _loader(dataset, epochs=2)
        resumed.load_state_dict(state)
        rest = [(lb.epoch, lb.batch_indices, plan.to_bytes()) for lb, plan in resumed]
        assert rest == whole[cut:] or (cut == len(whole) and rest == whole)


@pytest.mark.parametrize("field,overrides,dataset_lengths", [
    ("seed", dict(seed=8), LOADER_LENGTHS),
    ("dataset_length", {}, LOADER_LENGTHS[:-1]),
    ("tokens_per_batch", dict(tokens_per_batch=170), LOADER_LENGTHS),
    ("shuffle", dict(shuffle=False), LOADER_LENGTHS),
])
def test_a_loader_state_of_another_configuration_is_refused(field, overrides,
                                                            dataset_lengths) -> None:
    state = _loader(TokenDataset(LOADER_LENGTHS)).state_dict()
    other = _loader(TokenDataset(dataset_lengths), **overrides)
    with pytest.raises(ValueError, match=field):
        other.load_state_dict(state)
    for name, value in (("world_size", 4), ("replicas", 2), ("version", 99), ("batch", -1)):
        with pytest.raises(ValueError, match=name):
            _loader(TokenDataset(LOADER_LENGTHS)).load_state_dict({**state, name: value})


def test_the_loader_plans_at_the_balances_it_is_given() -> None:
    lengths = LOADER_LENGTHS
    loader = _loader(TokenDataset(lengths), eps_memory=0.02, eps_compute=0.1)
    lb, plan = next(iter(loader))
    want = dcp.plan(lb.seqlens, "causal", heads=4, kv_heads=2, head_dim=8, dtype="fp32",
                    block_size=16, cluster="cpu-local", nodes=1, devices_per_node=1, seed=7,
                    eps_memory=0.02, eps_compute=0.1)
    assert plan.to_bytes() == want.to_bytes()
    with pytest.raises(ValueError, match="memory epsilon"):
        next(iter(_loader(TokenDataset(lengths), eps_memory=-1)))


def test_a_mesh_without_the_named_dims_is_refused() -> None:
    mesh = types.SimpleNamespace(mesh_dim_names=("replicate", "shard"))
    with pytest.raises(ValueError, match="'dp' is missing"):
        _loader(TokenDataset(LOADER_LENGTHS), mesh=mesh)
    with pytest.raises(ValueError, match="not two dim names"):
        _loader(TokenDataset(LOADER_LENGTHS), mesh=mesh, mesh_dims=("dp",))


def test_sum_gradients_refuses_a_model_without_fsdp2_or_ddp() -> None:
    with pytest.raises(ValueError, match="Linear holds no FSDP2 module"):
        dcpt.sum_gradients(torch.nn.Linear(2, 2), 1)


@pytest.mark.seconds(6)
def test_sum_gradients_refuses_fsdp2_over_part_of_the_pool() -> None:
    results = run_world(4, scale_cases.shard_over_dp_only, timeout=300)
    for message in results:
        assert "shards" in message and "over a mesh of 2 ranks" in message \
            and "pool of 4" in message, message


# --- the split of a global batch, without ranks ------------------------------------------------

def test_shares_are_dealt_by_work_within_capacity() -> None:
    works = [100.0, 90.0, 10.0, 10.0, 5.0]
    tokens = [10, 10, 10, 10, 10]
    got = shares.deal(works, tokens, 2, 30)
    # 0 and 1 apart; 2 to the lighter; 3 to the first at a tie (110 against 100); 4 to the other.
    assert got == [[0, 3], [1, 2, 4]]
    assert shares.deal([1.0] * 3, [20, 20, 20], 2, 30) is None  # no room for the third


def test_a_split_moves_samples_while_the_slowest_step_shrinks() -> None:
    tokens = [8, 8, 8, 8]
    works = [4.0, 3.0, 2.0, 1.0]
    calls = []

    def judge(ss):  # a step of the square of the work, as attention's pairs grow
        calls.append([list(s) for s in ss])
        return [(tuple(s), sum(works[i] for i in s) ** 2) for s in ss]
    split = shares.split(works, tokens, [[0, 1], [2, 3]], 2, 100, judge, rounds=3)
    assert sorted(i for s in split.shares for i in s) == [0, 1, 2, 3]
    assert split.steps == [sum(works[i] for i in s) ** 2 for s in split.shares]
    assert max(split.steps) == 25.0  # 4 + 1 against 3 + 2
    # Deterministic: the same split again.
    assert shares.split(works, tokens, [[0, 1], [2, 3]], 2, 100, judge, rounds=3) == split


def test_a_split_keeps_the_first_shares_when_no_move_helps() -> None:
    def judge(ss):
        return [(None, 1.0 + len(s)) for s in ss]  # any move makes a share slower
    split = shares.split([1.0, 1.0, 1.0, 1.0], [1] * 4, [[0, 1], [2, 3]], 2, 10, judge, 2)
    assert split.steps == [3.0, 3.0]


def test_a_split_fills_replicas_from_the_packed_batches_when_dealing_finds_no_room() -> None:
    # Dealing by work leaves 5 tokens of room on each replica for the last sample's 10; the
    # packed batches fit.
    tokens, works = [15, 15, 10, 10, 10], [5.0, 4.0, 3.0, 2.0, 1.0]
    assert shares.deal(works, tokens, 2, 30) is None
    split = shares.split(works, tokens, [[0, 1], [2, 3, 4]], 2, 30, None, 0)
    assert split.shares == [[0, 1], [2, 3, 4]]
    # Fewer packed batches than replicas: the empty replica takes a sample.
    assert shares.fill_empty([[0, 1, 2]], 2) == [[0, 1], [2]]
