# SPDX-License-Identifier: Apache-2.0
"""Plans of several attention kinds through dcp and dcp.torch: every kind's o, lse, dq, dk and dv
against dense float64 attention under the kind's mask on 1 to 4 gloo processes, one executor
running every kind; the plan's kinds, layers, files, verification and simulation; and every
refusal, each naming the value."""
from __future__ import annotations

import functools
import json

import pytest
import torch

import dcp
import dcp.torch as dcpt
import dist_cases
import reference
from worlds import run_world

SEQLENS = [29, 1, 6, 40]
KINDS = {"full": "causal", "local": "sliding_window:window=7", "chunk": "chunked:chunk=5"}
CASE = dict(seqlens=SEQLENS, kinds=KINDS, layers={"local": 3, "chunk": 2}, heads=4, kv_heads=2,
            head_dim=16, dtype="fp32", block_size=8, strategy="dcp", seed=3)
SHAPE = dict(heads=2, kv_heads=1, head_dim=8, dtype="fp32", block_size=8, cluster="cpu-local",
             nodes=1, devices_per_node=1)


@functools.lru_cache(maxsize=None)
def _dense(kind: str):
    q, k, v, do = reference.inputs(sum(SEQLENS), CASE["heads"], CASE["kv_heads"],
                                   CASE["head_dim"], CASE["dtype"], CASE["seed"])
    return reference.dense_attention(q, k, v, do,
                                     reference.dense_mask(SEQLENS, [KINDS[kind]] * len(SEQLENS)))


@pytest.mark.seconds(8)
@pytest.mark.parametrize("size", [1, 2, 3, 4])
def test_every_kind_matches_dense_attention_under_its_mask(size: int) -> None:
    ranks = run_world(size, dist_cases.kinds_attention_case, CASE, timeout=600)
    assert all(torch.equal(r["plan"], ranks[0]["plan"]) for r in ranks), "one plan on every rank"
    assert ranks[0]["kinds"] == list(KINDS)
    for kind in KINDS:
        local = [dict(r[kind], positions=r["positions"]) for r in ranks]
        reference.expect_dense_attention(SEQLENS, CASE["dtype"], local, _dense(kind))


# --- the plan ---------------------------------------------------------------------------------


def _plan(**options):
    return dcp.plan(SEQLENS, KINDS, {"local": 3}, **{**SHAPE, **options})


def test_a_kinds_plan_names_its_kinds_and_layers() -> None:
    plan = _plan()
    assert plan.kinds == ["full", "local", "chunk"]
    assert plan.layers == {"full": 1, "local": 3, "chunk": 1}
    local = plan.kind("local")
    assert (local.kinds, local.layers) == (["local"], {"local": 3})
    pairs = {k: plan.kind(k).verify()["forward"]["pairs"] for k in KINDS}
    assert pairs["local"] < pairs["full"] and pairs["chunk"] < pairs["full"]
    assert plan.verify()["forward"] == plan.kind("full").verify()["forward"]  # the first kind's
    with pytest.raises(ValueError, match="no attention kind 'global' in the plan .*full, local, "
                       "chunk"):
        plan.kind("global")
    plain = dcp.plan(SEQLENS, "causal", **SHAPE)
    assert (plain.kinds, plain.layers) == (["attention"], {"attention": 1})


def test_verify_and_simulate_report_every_kind() -> None:
    plan = _plan()
    report = plan.verify()
    assert report["ok"] and set(report["kinds"]) == set(KINDS)
    assert all(k["ok"] for k in report["kinds"].values())
    assert report["kinds"]["local"]["layers"] == 3
    assert "kind 'local' (3 layers): ok" in report["message"]
    sim = plan.simulate("cpu-local")
    step = sum(k["layers"] * k["seconds"] for k in sim["kinds"].values())
    assert sim["step_seconds"] == pytest.approx(step)
    assert sim["seconds"] == sim["step_seconds"]
    plain = dcp.plan(SEQLENS, "causal", **SHAPE)
    sim = plain.simulate("cpu-local")
    assert sim["seconds"] == pytest.approx(sim["forward"]["seconds"] + sim["backward"]["seconds"])
    assert set(plain.verify()["kinds"]) == {"attention"}


def test_a_kinds_plan_round_trips_through_its_file(tmp_path) -> None:
    plan = _plan()
    again = dcp.plan_from_bytes(plan.to_bytes())
    assert again == plan and again.kinds == plan.kinds and again.layers == plan.layers
    plan.save(str(tmp_path / "kinds.bin"))
    loaded = dcp.load_plan(tmp_path / "kinds.bin")
    assert loaded == plan and loaded.to_bytes() == plan.to_bytes()
    # One kind on its own is a plan of its own, named.
    local = dcp.plan_from_bytes(plan.kind("local").to_bytes())
    assert (local.kinds, local.layers) == (["local"], {"local": 3})
    assert local == plan.kind("local")
    exported = json.loads(plan.to_json())
    assert [k["name"] for k in exported["kinds"]] == list(KINDS)


def test_plain_plans_keep_their_bytes() -> None:
    plain = dcp.plan(SEQLENS, "causal", **SHAPE)
    # The default kind of one layer is a plain plan, as a dict or not.
    assert dcp.plan(SEQLENS, {"attention": "causal"}, **SHAPE).to_bytes() == plain.to_bytes()
    assert plain.kind("attention").to_bytes() == plain.to_bytes()
    # One named kind: the same Programs, in a kinds file.
    named = dcp.plan(SEQLENS, {"full": "causal"}, **SHAPE)
    assert named.to_bytes() != plain.to_bytes()
    assert json.loads(named.to_json())["kinds"][0]["plan"] == json.loads(plain.to_json())


def test_workload_reports_every_kind() -> None:
    figures = dcp.workload(SEQLENS, KINDS, {"local": 3}, **SHAPE)
    assert figures["block_size"] == 8 and figures["tokens"] == sum(SEQLENS)
    assert figures["kinds"]["local"]["layers"] == 3
    full, local = figures["kinds"]["full"], figures["kinds"]["local"]
    assert local["pairs"] < full["pairs"] == dcp.workload(SEQLENS, "causal", **SHAPE)["pairs"]


@pytest.mark.parametrize("mask,layers,error,words", [
    ({"full": "causal"}, {"local": 2}, ValueError,
     "layers names attention kind 'local', which mask does not give (its kinds are full)"),
    ({"full": "causal", "local": "sliding_window:window=4"}, {"local": 0}, ValueError,
     "layers of attention kind 'local': 0; a kind has 1 to 4096 layers"),
    ({"full": "causal"}, {"full": -2}, ValueError, "attention kind 'full': -2"),
    ({"full": "causal"}, {"full": 2.5}, TypeError, "layers of attention kind 'full' is a float"),
    ({"full": "causal"}, [2], TypeError, "layers is a list"),
    ("causal", {"attention": 2}, ValueError, "layers counts the layers of named attention kinds"),
    ({"full": "causal", "local": ["causal", "causal"]}, None, ValueError,
     "mask of attention kind 'local': masks has 2 entries for 4 sequences"),
    ({"full": "causal", "local": "sliding_window:window=0"}, None, ValueError,
     "mask of attention kind 'local': "),
    ({"full": "causal", "bad name": "causal"}, None, ValueError, "attention kind name 'bad name'"),
    ({"full": "causal", 3: "causal"}, None, TypeError, "attention kinds are named by strings"),
    ({}, None, ValueError, "mask is an empty dict"),
])
def test_kinds_and_layers_are_checked(mask, layers, error, words) -> None:
    with pytest.raises(error) as info:
        dcp.plan(SEQLENS, mask, layers, **SHAPE)
    assert words in str(info.value)


def test_a_kinds_mask_array_for_other_lengths_is_refused() -> None:
    wrong = dcp.mask_intervals("causal", sum(SEQLENS) + 1)
    with pytest.raises(ValueError, match="mask of attention kind 'local': "):
        dcp.plan(SEQLENS, {"full": "causal", "local": wrong}, **SHAPE)


# --- the executor -----------------------------------------------------------------------------


def _inputs(executor: dcpt.DCPExecutor):
    n = executor.local_tokens
    return (torch.randn(n, 2, 8, requires_grad=True), torch.randn(n, 1, 8, requires_grad=True),
            torch.randn(n, 1, 8, requires_grad=True))


def test_the_executor_needs_a_kind_of_the_plan() -> None:
    executor = dcpt.DCPExecutor(threads=1)
    executor.prepare(_plan())
    assert executor.kinds == ["full", "local", "chunk"]
    q, k, v = _inputs(executor)
    with pytest.raises(ValueError, match="the plan has attention kinds full, local, chunk: name "
                       r"the kind of this attention \(kind=...\)"):
        dcpt.attention(executor, q, k, v)
    with pytest.raises(ValueError, match=r"no attention kind 'global' in the plan \(it has full, "
                       r"local, chunk\)"):
        dcpt.attention(executor, q, k, v, kind="global")
    kv = torch.stack((k, v)).detach()
    with pytest.raises(TypeError, match="DCPAttn.apply got two kinds"):
        dcpt.DCPAttn.apply(executor, q, kv, "local", kind="full")
    # A kind after kv, a number after kv (the softmax scale), both by keyword: the same o.
    want = dcpt.attention(executor, q, k, v, 0.5, kind="local")
    torch.testing.assert_close(dcpt.DCPAttn.apply(executor, q, kv, 0.5, "local"), want)
    torch.testing.assert_close(dcpt.DCPAttn.apply(executor, q, kv, softmax_scale=0.5,
                                                  kind="local"), want)
    torch.testing.assert_close(dcpt.DCPAttn.apply(executor, q, kv, "local"),
                               dcpt.attention(executor, q, k, v, kind="local"))
    assert not torch.equal(dcpt.attention(executor, q, k, v, kind="full"),
                           dcpt.attention(executor, q, k, v, kind="local"))


def test_a_kind_of_a_plan_runs_as_a_plan_of_its_own() -> None:
    plan = _plan()
    whole, alone = dcpt.DCPExecutor(threads=1), dcpt.DCPExecutor(threads=1)
    whole.prepare(plan)
    alone.prepare(plan.kind("chunk"))
    assert alone.kinds == ["chunk"]
    q, k, v = _inputs(whole)
    torch.testing.assert_close(dcpt.attention(alone, q, k, v),
                               dcpt.attention(whole, q, k, v, kind="chunk"), rtol=0, atol=0)
    # Preparing a plain plan after a kinds plan leaves one kind, the default.
    whole.prepare(dcp.plan(SEQLENS, "causal", **SHAPE))
    assert whole.kinds == ["attention"]
    torch.testing.assert_close(dcpt.attention(whole, q, k, v),
                               dcpt.attention(whole, q, k, v, kind="attention"))


def test_the_cpp_executor_alone_runs_one_kind_named() -> None:
    """run_locally (what benchmarks compare the torch path with) runs one kind: a plan of several
    is refused, not run as its first kind."""
    plan = dcp.plan(SEQLENS, dict(KINDS), **SHAPE)
    with pytest.raises(ValueError, match="runs one attention kind; the plan has 3"):
        dcp._core.run_locally(plan, 0, 1)
    assert dcp._core.run_locally(plan.kind("local"), 0, 1)["forward_seconds"] > 0


def test_the_loader_plans_the_kinds_mask_fn_gives() -> None:
    lengths = [37, 5, 60, 12]
    loader = dcpt.DCPDataloader(dist_cases.TokenDataset(lengths), lambda s: dict(KINDS),
                                layers={"chunk": 4}, tokens_per_batch=128, heads=2, kv_heads=1,
                                head_dim=8, dtype=torch.float32, block_size=8,
                                cluster="cpu-local")
    batches = list(loader)
    assert batches
    for local, plan in batches:
        assert plan.layers == {"full": 1, "local": 1, "chunk": 4}
        want = dcp.plan(local.seqlens, {k: m for k, m in KINDS.items()}, {"chunk": 4},
                        heads=2, kv_heads=1, head_dim=8, dtype="fp32", block_size=8,
                        cluster="cpu-local", nodes=1, devices_per_node=1)
        assert plan.to_bytes() == want.to_bytes()


@pytest.mark.parametrize("mask_fn,layers,words", [
    (lambda s: KINDS if s.numel() > 10 else {"full": "causal"}, None,
     "every sample needs the same kinds"),
    (lambda s: KINDS if s.numel() > 10 else "causal", None, "every sample needs the same kinds"),
    (lambda s: "causal", {"full": 2}, "layers {'full': 2} counts the layers of attention kinds"),
    (None, {"full": 2}, "give a mask_fn that returns a dict"),
])
def test_the_loader_refuses_kinds_that_differ_between_samples(mask_fn, layers, words) -> None:
    with pytest.raises(ValueError) as info:
        list(dcpt.DCPDataloader(dist_cases.TokenDataset([37, 5, 60]), mask_fn, layers=layers,
                                tokens_per_batch=128, heads=2, kv_heads=1, head_dim=8,
                                dtype=torch.float32, block_size=8, cluster="cpu-local"))
    assert words in str(info.value)
