# SPDX-License-Identifier: Apache-2.0
"""The planner from Python: plans, plan files, verification, simulation, masks; and its errors."""
from __future__ import annotations

import os
import subprocess

import numpy as np
import pytest

import dcp

ROOT = os.path.join(os.path.dirname(__file__), "..", "..")
OPTIONS = dict(heads=4, kv_heads=2, head_dim=32, dtype="bf16", block_size=64, nodes=2,
               devices_per_node=2, seed=3)


def test_planning_is_deterministic_and_files_round_trip(tmp_path) -> None:
    a = dcp.plan([700, 300, 45], "lambda:sink=8,window=128", **OPTIONS)
    b = dcp.plan([700, 300, 45], "lambda:sink=8,window=128", **OPTIONS)
    assert a.to_bytes() == b.to_bytes()
    path = tmp_path / "plan.bin"
    a.save(str(path))
    assert dcp.load_plan(str(path)) == a
    assert dcp.plan_from_bytes(a.to_bytes()) == a
    assert (a.world_size, a.nodes, a.devices_per_node) == (4, 2, 2)
    assert (a.q_heads, a.kv_heads, a.head_dim, a.dtype) == (4, 2, 32, "bf16")
    assert a.seqlens == [700, 300, 45] and a.total_tokens == 1045
    assert sorted(np.concatenate([a.local_token_positions(r) for r in range(4)]).tolist()) == \
        list(range(1045))


def test_partials_travel_in_the_dtype_asked() -> None:
    import torch
    assert dcp.plan([700, 45], "causal", strategy="dcp-pure", **OPTIONS).partial_dtype == "bf16"
    assert dcp.plan([700, 45], "causal", strategy="zigzag", **OPTIONS).partial_dtype == "fp32"
    for given in ("fp32", torch.float32):
        plan = dcp.plan([700, 45], "causal", strategy="dcp-pure", partial_dtype=given, **OPTIONS)
        assert plan.partial_dtype == "fp32"


def test_verify_and_simulate() -> None:
    plan = dcp.plan([2048, 512], "causal", strategy="dcp-pure", **OPTIONS)
    report = plan.verify()
    assert report["ok"], report["message"]
    assert report["forward"]["work_units"] > 0
    simulated = plan.simulate("a100-p4de")
    assert simulated["forward"]["seconds"] > 0 and simulated["backward"]["seconds"] > 0
    assert len(simulated["forward"]["device_compute_seconds"]) == 4
    faster = plan.simulate("h100-dgx")
    assert faster["seconds"] < simulated["seconds"]


def _cli_plan_bytes(tmp_path, seqlens, *flags) -> bytes:
    """The plan file `dcp plan` writes for these lengths, causal, with the OPTIONS shape."""
    cli = os.path.join(ROOT, "build", "ci", "apps", "dcp")
    if not os.path.exists(cli):
        pytest.skip("the dcp command line is built by the test command (build/ci)")
    out = tmp_path / "cli.bin"
    subprocess.run([cli, "plan", "--seqlens", ",".join(map(str, seqlens)), "--mask", "causal",
                    "--heads", "4", "--kv-heads", "2", "--head-dim", "32", "--dtype", "bf16",
                    "--nodes", "2", "--devices-per-node", "2", "--seed", "3", *flags,
                    "-o", str(out)],
                   check=True, capture_output=True)
    return out.read_bytes()


def test_same_bytes_as_the_command_line(tmp_path) -> None:
    expected = _cli_plan_bytes(tmp_path, [700, 300, 45], "--block-size", "64")
    assert dcp.plan([700, 300, 45], "causal", **OPTIONS).to_bytes() == expected


def test_token_flops_plans_as_the_command_line_does(tmp_path) -> None:
    # The rest of each layer, priced on each candidate's busiest device, in dcp's search.
    expected = _cli_plan_bytes(tmp_path, [700, 300, 45], "--block-size", "64",
                               "--token-flops", "2e8")
    assert dcp.plan([700, 300, 45], "causal", token_flops=2e8, **OPTIONS).to_bytes() == expected


def test_static_dp_plans_as_the_command_line_does(tmp_path) -> None:
    # One table gives the command line's flags and dcp.plan's keywords (dcp/planner_options.h).
    expected = _cli_plan_bytes(tmp_path, [700, 300, 45], "--block-size", "64", "--static-dp", "2",
                               "--strategy", "ring")
    assert dcp.plan([700, 300, 45], "causal", static_dp=2, strategy="ring",
                    **OPTIONS).to_bytes() == expected


# A value, and a strategy it applies to, for every planner option: an option added to the table
# without one here fails test_every_planner_option_is_a_keyword.
OPTION_SAMPLES = {
    "cluster": ("h100-dgx", "dcp"), "nodes": (1, "dcp"), "devices_per_node": (4, "dcp"),
    "strategy": ("zigzag", None), "static_dp": ("auto", "ring"),
    "loongtrain_window": (1, "loongtrain"), "stages": (1, "dcp-pure"),
    "compute_masked_tiles": (True, "te"), "eps_compute": (0.2, "dcp"), "eps_memory": (0.5, "dcp"),
    "max_device_tokens": (4096, "dcp"),
    "token_flops": (1e8, "dcp"), "keep_kv": ("none", "dcp-pure"), "partial_dtype": ("fp32", "ring"),
}


def test_every_planner_option_is_a_keyword() -> None:
    described = dcp.planner_options()
    assert sorted(o["name"] for o in described) == sorted(OPTION_SAMPLES)
    base = {k: v for k, v in OPTIONS.items() if k not in ("nodes", "devices_per_node")}
    for option in described:
        assert option["flag"] == "--" + option["name"].replace("_", "-")
        assert option["type"] in ("int", "float", "str", "int|str", "float|str", "bool")
        assert option["help"]
        value, strategy = OPTION_SAMPLES[option["name"]]
        given = {option["name"]: value}
        if strategy is not None:
            given["strategy"] = strategy
        plan = dcp.plan([300, 100], "causal", **base, **given)
        assert plan.verify()["ok"], option["name"]


def test_every_planner_option_is_a_flag_of_dcp_plan() -> None:
    cli = os.path.join(ROOT, "build", "ci", "apps", "dcp")
    if not os.path.exists(cli):
        pytest.skip("the dcp command line is built by the test command (build/ci)")
    listed = subprocess.run([cli, "plan", "--help"], check=True, capture_output=True,
                            text=True).stdout
    for option in dcp.planner_options():
        assert f"  {option['flag']} {option['value_name']}".rstrip() in listed, option["name"]


# A value for every batch option: one added to the table without one here fails the test below.
BATCH_SAMPLES = {
    "heads": 4, "kv_heads": 1, "head_dim": 64, "dtype": "fp16", "softmax_scale": 0.1,
    "block_size": 64, "head_block_size": 2,
}


def test_every_batch_option_is_a_keyword_and_a_flag_of_dcp_plan(tmp_path) -> None:
    described = dcp.batch_options()
    assert sorted(o["name"] for o in described) == sorted(BATCH_SAMPLES)
    base = dict(nodes=2, devices_per_node=2, seed=3)
    for option in described:
        assert option["flag"] == "--" + option["name"].replace("_", "-")
        assert option["help"]
        given = {**OPTIONS, option["name"]: BATCH_SAMPLES[option["name"]]}
        assert dcp.plan([300, 100], "causal", **given).verify()["ok"], option["name"]
    # Every batch option at once plans the bytes the command line's flags plan.
    cli = os.path.join(ROOT, "build", "ci", "apps", "dcp")
    if not os.path.exists(cli):
        pytest.skip("the dcp command line is built by the test command (build/ci)")
    flags = [item for name, value in BATCH_SAMPLES.items()
             for item in ("--" + name.replace("_", "-"), str(value))]
    out = tmp_path / "cli.bin"
    subprocess.run([cli, "plan", "--seqlens", "300,100", "--mask", "causal", "--nodes", "2",
                    "--devices-per-node", "2", "--seed", "3", *flags, "-o", str(out)],
                   check=True, capture_output=True)
    assert dcp.plan([300, 100], "causal", **base, **BATCH_SAMPLES).to_bytes() == out.read_bytes()


@pytest.mark.parametrize("given,error,words", [
    (dict(kv_heads=3), ValueError, "heads 4 kv_heads 3: q heads 4 is not divisible"),
    (dict(heads=0), ValueError, "heads 0: must be in [1, "),
    (dict(softmax_scale=-1.0), ValueError, "softmax_scale -1: must be > 0"),
    (dict(block_size="big"), ValueError, "block_size"),
    (dict(dtype="int8"), TypeError, "dtype 'int8'"),
    (dict(head_dim=64.0), TypeError, "head_dim is a float"),
    (dict(heads_count=4), TypeError, "heads_count"),
])
def test_batch_options_are_checked_as_the_command_line_checks_them(given, error, words) -> None:
    with pytest.raises(error) as info:
        dcp.plan([64], "causal", **{**OPTIONS, **given})
    assert words in str(info.value)


@pytest.mark.parametrize("given,error,words", [
    (dict(strategy="ring", stages=2), ValueError,
     "stages applies to strategy dcp or dcp-pure; ring has a fixed schedule"),
    (dict(strategy="dcp-pure", static_dp=2), ValueError, "static_dp applies to static strategies"),
    (dict(strategy="ring", loongtrain_window=2), ValueError,
     "loongtrain_window applies to strategy loongtrain, not ring"),
    (dict(strategy="dcp", compute_masked_tiles=True), ValueError,
     "compute_masked_tiles applies to static strategies"),
    (dict(static_dp=2.0, strategy="ring"), TypeError,
     "static_dp is a float, which this option does not take (it takes int|str)"),
    (dict(nodes=True), TypeError, "nodes is a bool"),
    (dict(eps_memory=float("nan")), ValueError, "eps_memory: nan is not a finite number"),
])
def test_planner_options_are_checked_as_the_command_line_checks_them(given, error, words) -> None:
    with pytest.raises(error) as info:
        dcp.plan([64], "causal", **{**OPTIONS, **given})
    assert words in str(info.value)


def test_an_automatic_block_size_plans_as_the_command_line_does(tmp_path) -> None:
    # Both try dcp's own plan at 1024-, 2048- and 4096-token blocks and, since one sequence holds
    # most of the tokens, on the hybrid and loongtrain layouts, and keep the fastest.
    expected = _cli_plan_bytes(tmp_path, [5000, 1500, 45])
    options = {k: v for k, v in OPTIONS.items() if k != "block_size"}
    assert dcp.plan([5000, 1500, 45], "causal", **options).to_bytes() == expected


def test_masks_as_interval_arrays() -> None:
    causal = dcp.mask_intervals("causal", 5)
    assert causal.dtype == np.int32 and causal.shape == (5, 1, 2)
    assert causal[:, 0].tolist() == [[0, 1], [0, 2], [0, 3], [0, 4], [0, 5]]
    # A plan from the arrays equals the plan from the spec.
    spec = dcp.plan([90, 40], "lambda:sink=4,window=16", **OPTIONS)
    arrays = dcp.plan([90, 40],
                      [dcp.mask_intervals("lambda:sink=4,window=16", n) for n in (90, 40)],
                      **OPTIONS)
    assert arrays.to_bytes() == spec.to_bytes()
    whole = np.concatenate([dcp.mask_intervals("lambda:sink=4,window=16", n) for n in (90, 40)])
    assert dcp.plan([90, 40], whole, **OPTIONS).to_bytes() == spec.to_bytes()


def test_workload_summary() -> None:
    w = dcp.workload([128, 64], "causal", heads=4, kv_heads=2, head_dim=32, block_size=32)
    assert w["tokens"] == 192 and w["token_blocks"] == 6
    assert w["pairs"] == 128 * 129 // 2 + 64 * 65 // 2


@pytest.mark.parametrize("call,error,words", [
    (lambda: dcp.plan([100], "causal_ish", **OPTIONS), ValueError, "causal_ish"),
    (lambda: dcp.plan([100, 0], "causal", **OPTIONS), ValueError, "seqlens[1] = 0"),
    (lambda: dcp.plan([], "causal", **OPTIONS), ValueError, "seqlens is empty"),
    (lambda: dcp.plan([100], "causal", **{**OPTIONS, "heads": 3}), ValueError, "3"),
    (lambda: dcp.plan([100], "causal", **{**OPTIONS, "strategy": "spiral"}), ValueError, "spiral"),
    (lambda: dcp.plan([100], "causal", **{**OPTIONS, "dtype": "int8"}), TypeError, "int8"),
    (lambda: dcp.plan([100], "causal", **{**OPTIONS, "cluster": "/no/such.cluster"}), Exception,
     "no/such"),
    (lambda: dcp.plan([10, 5], ["causal"], **OPTIONS), ValueError, "1 entries for 2 sequences"),
    (lambda: dcp.plan([4], [np.zeros((4, 1, 2), np.float32)], **OPTIONS), TypeError, "float32"),
    (lambda: dcp.plan([4], [np.zeros((4, 2), np.int32)], **OPTIONS), ValueError, "(4, 2)"),
    (lambda: dcp.plan([4], [np.array([[[0, 9]]] * 4, np.int32)], **OPTIONS), ValueError,
     "mask of sequence 0"),
    (lambda: dcp.plan([4], [np.zeros((3, 1, 2), np.int32)], **OPTIONS), ValueError, "3"),
    (lambda: dcp.plan_from_bytes(b"not a plan"), ValueError, "plan"),
    (lambda: dcp.load_plan("/no/such/plan.bin"), OSError, "/no/such/plan.bin"),
    (lambda: dcp.plan([64], "causal", **OPTIONS).simulate("tpu-pod"), Exception, "tpu-pod"),
    (lambda: dcp.plan([64], "causal", **{**OPTIONS, "keep_kv": "some"}), ValueError,
     "keep_kv: the kept kv budget: 'some'"),
    (lambda: dcp.plan([64], "causal", **{**OPTIONS, "keep_kv": -1}), ValueError, "got -1"),
    (lambda: dcp.plan([64], "causal", **{**OPTIONS, "partial_dtype": "fp16"}), ValueError,
     "partials travel in fp32 or the storage dtype (bf16), not fp16"),
    (lambda: dcp.plan([64], "causal", **{**OPTIONS, "partial_dtype": "fp8"}), TypeError, "fp8"),
    (lambda: dcp.plan([64], "causal", **{**OPTIONS, "eps_computer": 0.1}), TypeError,
     "unknown planner option(s) eps_computer; the options are heads, kv_heads"),
    (lambda: dcp.plan([64], "causal", **{**OPTIONS, "heads": "8"}), TypeError,
     "heads is a str, which this option does not take"),
    (lambda: dcp.plan([64], "causal", **{**OPTIONS, "head_block_size": 0}), ValueError,
     "head_block_size 0: must be in [1, "),
    (lambda: dcp.plan([64], "causal", **{**OPTIONS, "block_size": -1}), ValueError,
     "block_size -1: must be in [1, "),
    (lambda: dcp.plan([64], "causal", **{**OPTIONS, "stages": -2}), ValueError,
     "stages -2: must be in [0, 64]"),
    (lambda: dcp.plan([64], "causal", **{**OPTIONS, "token_flops": -1.0}), ValueError,
     "token_flops must be a number >= 0, got -1"),
])
def test_bad_input_raises_naming_the_value(call, error, words) -> None:
    with pytest.raises(error) as info:
        call()
    assert words in str(info.value)


def test_options_left_out_or_none_are_the_planners_defaults() -> None:
    """The defaults live in the C++ planner alone: leaving an option out, passing None and passing
    the documented default give the same plan bytes."""
    seqlens = [300, 100]
    left_out = dcp.plan(seqlens, "causal", nodes=1, devices_per_node=2).to_bytes()
    nones = dcp.plan(seqlens, "causal", nodes=1, devices_per_node=2, cluster=None,
                     strategy=None, eps_compute=None, keep_kv=None, block_size=None).to_bytes()
    spelled = dcp.plan(seqlens, "causal", nodes=1, devices_per_node=2, cluster="a100-p4de",
                       strategy="dcp", eps_compute=0.3, eps_memory=0.2, keep_kv="all", heads=8,
                       kv_heads=2, head_dim=128, dtype="bf16", head_block_size=1, stages=0,
                       seed=0).to_bytes()
    assert left_out == nones == spelled


def test_damaged_plan_bytes_are_refused() -> None:
    data = bytearray(dcp.plan([300], "causal", **OPTIONS).to_bytes())
    data[len(data) // 2] ^= 0xFF
    with pytest.raises(ValueError):
        dcp.plan_from_bytes(bytes(data))
