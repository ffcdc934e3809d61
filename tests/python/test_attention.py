# SPDX-License-Identifier: Apache-2.0
"""DCPAttn / dcp.torch.attention forward and backward on 1, 2, 3 and 4 processes (gloo), against
dense float64 attention computed by PyTorch (SDPA with an explicit boolean mask)."""
from __future__ import annotations

import functools
import json

import pytest

import dcp
import dist_cases
import in_node_reductions
import reference
from worlds import run_world, run_world_once

SEQLENS = [29, 1, 6, 40]  # a 1-token sequence and one shorter than a block
BLOCK = 8
RANDOM = [reference.random_interval_mask(n, seed=n) for n in SEQLENS]
MASKS = {
    "causal": "causal",
    "full": "full",
    "sliding_window": "sliding_window:window=7",
    "lambda": "lambda:sink=3,window=6",
    "shared_question": "shared_question:question=0.25,answers=3",
    "causal_blockwise": "causal_blockwise:block=4,local=2",
    "chunked": "chunked:chunk=5",
    "random_intervals": RANDOM,
    "mixed": ["causal", RANDOM[1], "full", "lambda:sink=2,window=9"],
}


def _case(mask: str, dtype: str = "fp32", strategy: str = "dcp-pure", **extra) -> dict:
    return dict(name=f"{mask}-{dtype}-{strategy}" + "".join(f"-{k}" for k in extra),
                seqlens=SEQLENS, masks=MASKS[mask], heads=4, kv_heads=2, head_dim=16, dtype=dtype,
                block_size=BLOCK, strategy=strategy, seed=len(mask), **extra)


CASES = ([_case(m) for m in MASKS]
         + [_case("causal", "bf16"), _case("random_intervals", "bf16"),
            _case("causal", strategy="dcp"), _case("causal", strategy="zigzag"),
            _case("lambda", strategy="ring"), _case("shared_question", packed_kv=True),
            # kv received in the forward pass sent again, and kept within a 2 KiB budget (about
            # two of this batch's kv values per rank); every other dcp case keeps all.
            _case("causal", keep_kv="none"), _case("shared_question", keep_kv=2 / 1024),
            # partials in fp32 although the storage is bf16 (the bf16 cases above send them in
            # bf16, dcp's default), and in fp16 with fp16 storage.
            _case("causal", "bf16", partial_dtype="fp32"), _case("lambda", "fp16"),
            _case("random_intervals", "fp16", partial_dtype="fp16")])
WORLDS = [1, 2, 3, 4]


@functools.lru_cache(maxsize=None)
def _world_results(size: int) -> list[list[dict]]:
    return run_world_once(f"attention-world-{size}", size, dist_cases.attention_cases, CASES,
                          timeout=600)


@functools.lru_cache(maxsize=None)
def _reference(index: int):
    case = CASES[index]
    q, k, v, do = reference.inputs(sum(case["seqlens"]), case["heads"], case["kv_heads"],
                                   case["head_dim"], case["dtype"], case["seed"])
    masks = case["masks"] if isinstance(case["masks"], list) else [case["masks"]] * len(SEQLENS)
    return reference.dense_attention(q, k, v, do, reference.dense_mask(case["seqlens"], masks))


@pytest.mark.parametrize("size", WORLDS)
@pytest.mark.parametrize("index", range(len(CASES)), ids=[c["name"] for c in CASES])
def test_matches_dense_attention(size: int, index: int) -> None:
    reference.expect_dense_attention(SEQLENS, CASES[index]["dtype"],
                                     [results[index] for results in _world_results(size)],
                                     _reference(index))


def test_kv_is_kept_from_the_forward_pass_as_planned() -> None:
    results = _world_results(4)
    kept = {c["name"]: [r[i]["kept_bytes"] for r in results] for i, c in enumerate(CASES)}
    assert max(kept["causal-fp32-dcp-pure"]) > 0, "dcp-pure keeps the kv its ranks received"
    assert kept["causal-fp32-dcp-pure-keep_kv"] == [0] * 4, "keep_kv='none' keeps nothing"
    assert 0 < max(kept["shared_question-fp32-dcp-pure-keep_kv"]) <= 2048, "within the budget"
    assert kept["causal-fp32-zigzag"] == [0] * 4, "static strategies receive kv again"


def test_partials_travel_in_the_dtype_planned() -> None:
    dtypes = {c["name"]: {r[i]["partial_dtype"] for r in _world_results(4)}
              for i, c in enumerate(CASES)}
    assert dtypes["causal-bf16-dcp-pure"] == {"bf16"}, "dcp sends partials in the storage dtype"
    assert dtypes["causal-bf16-dcp-pure-partial_dtype"] == {"fp32"}
    assert dtypes["random_intervals-fp16-dcp-pure-partial_dtype"] == {"fp16"}
    assert dtypes["causal-fp32-zigzag"] == {"fp32"}


# One sequence on 2 x 2 whose plan merges partials on a device of the contributing node and sends
# the merge across once, in both passes.
REDUCTION = dict(name="in-node-reduction", seqlens=[400], masks="causal_blockwise:block=4,local=2",
                 heads=4, kv_heads=2, head_dim=16, dtype="fp32", block_size=8,
                 strategy="dcp-pure", seed=5)


@pytest.mark.seconds(8)
def test_partials_reduced_inside_a_node_match_dense_attention() -> None:
    case = REDUCTION
    plan = dcp.plan(case["seqlens"], case["masks"], heads=case["heads"], kv_heads=case["kv_heads"],
                    head_dim=case["head_dim"], dtype=case["dtype"], block_size=case["block_size"],
                    cluster="cpu-local", nodes=2, devices_per_node=2, strategy=case["strategy"],
                    seed=0)
    programs = json.loads(plan.to_json())
    assert in_node_reductions.sent_on(programs["forward"]) > 0, "no forward reduction"
    assert in_node_reductions.sent_on(programs["backward"]) > 0, "no backward reduction"
    ranks = [results[0] for results in run_world(4, dist_cases.attention_cases, [case],
                                                  timeout=600)]
    q, k, v, do = reference.inputs(sum(case["seqlens"]), case["heads"], case["kv_heads"],
                                   case["head_dim"], case["dtype"], case["seed"])
    dense = reference.dense_attention(q, k, v, do,
                                      reference.dense_mask(case["seqlens"], [case["masks"]]))
    reference.expect_dense_attention(case["seqlens"], case["dtype"], ranks, dense)
