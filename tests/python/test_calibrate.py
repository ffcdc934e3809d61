# SPDX-License-Identifier: Apache-2.0
"""dcp.calibrate on 4 gloo processes as 2 nodes x 2: the cluster file it writes reads back with
the planner and has positive, finite constants; the shape comes from devices_per_node or
torchrun's LOCAL_WORLD_SIZE; bad input raises naming the value on every rank, without a hang;
`python -m dcp.calibrate` under torchrun. Small sizes and short loops: validity, never speed."""
from __future__ import annotations

import math
import os
import subprocess
import sys

import pytest
import torch

import dcp
import dcp.calibrate
from worlds import run_world

# Messages large enough that their time stands out of gloo's small-message time on a loaded
# 2-core machine (a few ms).
SMALL = dict(repeats=2, timing_seconds=0.002, tile_tokens=64, copy_bytes=1 << 20,
             min_bytes=4 << 20, max_bytes=64 << 20, group_peers=3)


def calibrate_case(rank: int, size: int, options: dict, local_world_size: int | None) -> str:
    if local_world_size is not None:  # as torchrun sets them
        os.environ["LOCAL_WORLD_SIZE"] = str(local_world_size)
        os.environ["LOCAL_RANK"] = str(rank % local_world_size)
    else:
        os.environ.pop("LOCAL_WORLD_SIZE", None)
        os.environ.pop("LOCAL_RANK", None)
    return dcp.calibrate.calibrate(**options)


def cluster_values(text: str) -> dict[str, str]:
    pairs = (line.split("=", 1) for line in text.splitlines() if "=" in line)
    return {key.strip(): value.strip() for key, value in pairs}


def test_four_ranks_as_two_nodes_write_a_cluster_file_the_planner_reads(tmp_path) -> None:
    out = str(tmp_path / "gloo.cluster")
    texts = run_world(4, calibrate_case, dict(SMALL, devices_per_node=2, out=out,
                                              name="gloo-2x2"), None, timeout=300)
    assert all(text == texts[0] for text in texts)
    with open(out) as f:
        assert f.read() == texts[0]
    values = cluster_values(texts[0])
    assert values["name"] == "gloo-2x2"
    assert (values["nodes"], values["devices_per_node"]) == ("2", "2")
    for key in ("intra_node_gbps", "inter_node_gbps", "forward_tflops", "backward_tflops",
                "memory_gbps"):
        assert 0 < float(values[key]) < math.inf, key
    for key in ("intra_node_latency_us", "inter_node_latency_us", "kernel_overhead_us",
                "launch_overhead_us", "launch_peer_overhead_us"):
        assert 0 <= float(values[key]) < math.inf, key
    for key in ("intra_node_efficiency", "inter_node_efficiency"):
        points = [p.split(":") for p in values[key].split(",")]
        assert [int(b) for b, _ in points] == [4 << 20, 16 << 20, 64 << 20]
        assert all(0 < float(e) <= 1 for _, e in points), values[key]
    assert values["nics_per_node"] in ("1", "2")
    plan = dcp.plan([700, 300], "causal", heads=2, kv_heads=1, head_dim=16, block_size=128,
                    cluster=out)
    assert (plan.nodes, plan.devices_per_node) == (2, 2)
    assert plan.simulate(out)["seconds"] > 0


def test_the_shape_comes_from_torchruns_local_world_size() -> None:
    texts = run_world(4, calibrate_case, SMALL, 2, timeout=300)
    values = cluster_values(texts[0])
    assert (values["nodes"], values["devices_per_node"]) == ("2", "2")


@pytest.mark.parametrize("size,options,local,words", [
    (3, dict(devices_per_node=2), None, "world size 3 is not a multiple of devices_per_node 2"),
    (2, {}, None, "LOCAL_WORLD_SIZE is not set"),
    (3, {}, 2, "world size 3 is not a multiple of LOCAL_WORLD_SIZE 2"),
    (2, dict(devices_per_node=2, out="/nonexistent-dir/x.cluster"), None,
     "out '/nonexistent-dir/x.cluster': rank 0 cannot write it"),
    (2, dict(devices_per_node=2, repeats=0), None, "repeats must be in [1, 1000], got 0"),
])
def test_bad_input_raises_naming_the_value_on_every_rank(size, options, local, words) -> None:
    results = run_world(size, calibrate_case, dict(SMALL, **options), local, timeout=120,
                        group_timeout=30, allow_failures=True)
    for rank, result in enumerate(results):
        assert result[0] == "error", f"rank {rank} did not raise: {result}"
        assert "ValueError" in result[1] and words in result[1], result[1]


def torchrun(tmp_path, *args: str) -> subprocess.CompletedProcess:
    command = [sys.executable, "-m", "torch.distributed.run", "--standalone",
               "--nproc-per-node", "2", "-m", "dcp.calibrate", *args]
    env = dict(os.environ, OMP_NUM_THREADS="1")
    return subprocess.run(command, capture_output=True, text=True, timeout=180, cwd=tmp_path,
                          env=env)


@pytest.mark.seconds(20)
def test_python_m_dcp_calibrate_under_torchrun(tmp_path) -> None:
    out = tmp_path / "torchrun.cluster"
    small = ["--repeats", "1", "--timing-seconds", "0.002", "--tile-tokens", "64",
             "--copy-bytes", "1048576", "--min-bytes", "4194304", "--max-bytes", "67108864"]
    done = torchrun(tmp_path, *small, "--out", str(out))
    assert done.returncode == 0, done.stderr
    assert "note: one node: the inter-node constants are copies" in done.stdout
    text = out.read_text()
    assert done.stdout.endswith(text)
    assert cluster_values(text)["devices_per_node"] == "2"
    bad = torchrun(tmp_path, *small, "--devices-per-node", "3")
    assert bad.returncode != 0
    assert "world size 2 is not a multiple of devices_per_node 3" in bad.stderr


def test_python_m_dcp_calibrate_outside_torchrun_says_how_to_run_it(monkeypatch, capsys) -> None:
    monkeypatch.delenv("RANK", raising=False)
    monkeypatch.delenv("WORLD_SIZE", raising=False)
    assert dcp.calibrate.main([]) == 2
    assert "run it under torchrun" in capsys.readouterr().err


@pytest.mark.seconds(14)
def test_device_only_times_the_cpu_kernels_and_keeps_the_base_links(tmp_path, capsys) -> None:
    out = tmp_path / "device.cluster"
    small = ["--repeats", "1", "--timing-seconds", "0.002", "--tile-tokens", "64",
             "--copy-bytes", "1048576"]
    env = {k: v for k, v in os.environ.items() if k not in ("RANK", "WORLD_SIZE")}
    done = subprocess.run([sys.executable, "-m", "dcp.calibrate", "--device-only", "--base",
                           "a100-p4de", "--name", "my-device", "--out", str(out), *small],
                          capture_output=True, text=True, timeout=120, cwd=tmp_path, env=env)
    assert done.returncode == 0, done.stderr
    text = out.read_text()
    assert done.stdout.endswith(text)
    assert "note: only the device was measured" in done.stdout and "a100-p4de" in done.stdout
    values, base = cluster_values(text), cluster_values(dcp._core.cluster_text("a100-p4de"))
    assert values["name"] == "my-device"
    for key in ("nodes", "devices_per_node", "inter_node_gbps", "nics_per_node",
                "inter_node_efficiency", "launch_overhead_us"):
        assert values[key] == base[key], key
    # the cpu kernels, one thread: far below an A100's rate
    assert 0 < float(values["forward_tflops"]) < float(base["forward_tflops"]) / 10
    plan = dcp.plan([96, 32], "causal", heads=2, kv_heads=1, head_dim=16, cluster=str(out),
                    nodes=1, devices_per_node=2, strategy="dcp-pure")
    assert plan.simulate(str(out))["seconds"] > 0
    for args, words in ((["--base", "nope"], "'nope' is neither a preset"),
                        (["--out", str(tmp_path / "missing" / "f")], "cannot write it"),
                        (["--repeats", "0"], "repeats"),
                        (["--heads", "2"], "heads must be 1 on the cpu kernels")):
        # In this process: main() is what `python -m dcp.calibrate` runs.
        capsys.readouterr()
        assert dcp.calibrate.main(["--device-only", *small, *args]) == 2, args
        err = capsys.readouterr().err
        assert words in err, (args, err)
    assert not (tmp_path / "missing").exists()
    assert dcp.calibrate.calibrate_device("cpu-local", repeats=1, timing_seconds=0.002,
                                          tile_tokens=64, copy_bytes=1 << 20).startswith(
        "name = calibrated")


def test_triton_kernel_calls_compute_attention_under_the_interpreter() -> None:
    """The synthetic calls the GPU calibration times are real attention: o of a forward call and
    dq of a backward call match torch (Triton's interpreter on the CPU, small tiles)."""
    script = r"""
import torch
from dcp.torch.kernels import kernel_timing as kt
for causal, h in ((False, 1), (True, 1), (True, 3)):
    call = dict(kind="forward", heads=h, rows=2, q_tokens=16, tiles=2, kv_tokens=16,
                causal=causal, head_dim=16, dtype="fp32", copy_bytes=0)
    c = kt.TritonCall(call, torch.device("cpu"), seed=3)
    c()
    a = c.arena
    def values(offset, count):
        return a[offset:offset + 4 * count].view(torch.float32)
    n = 16 * h * 16  # tokens x heads x head dim
    for row in range(2):
        q = values(c.entries[2 * row, 0].item(), n).reshape(16, h, 16)
        ks = [values(c.entries[t, 1].item(), n).reshape(16, h, 16) for t in range(2)]
        vs = [values(c.entries[t, 1].item() + 4 * n, n).reshape(16, h, 16) for t in range(2)]
        k, v = torch.cat(ks), torch.cat(vs)
        got = values(c.out[row], n).reshape(16, h, 16).double()
        for head in range(h):
            s = q[:, head].double() @ k[:, head].double().T / 4
            if causal:
                keep = torch.arange(16)[None, :] <= torch.arange(16)[:, None]
                s = s.masked_fill(~torch.cat((keep, keep), 1), float("-inf"))
            o = torch.softmax(s, 1) @ v[:, head].double()
            assert torch.allclose(got[:, head], o, atol=1e-4), (causal, h, row, head,
                                                               (got[:, head] - o).abs().max())
back = dict(kind="backward", heads=2, rows=1, q_tokens=16, tiles=1, kv_tokens=32,
            causal=False, head_dim=16, dtype="fp32", copy_bytes=0)
b = kt.TritonCall(back, torch.device("cpu"), seed=4)
b()
dq = b.arena[b.out[0]:b.out[0] + 4 * 2 * 256].view(torch.float32).reshape(16, 2, 16)
dkv = b.arena[b.out[1]:b.out[1] + 4 * 2 * 2 * 512].view(torch.float32)
assert torch.isfinite(dq).all() and torch.isfinite(dkv).all()
assert all(dq[:, head].abs().sum() > 0 for head in range(2))
print("ok")
"""
    env = dict(os.environ, TRITON_INTERPRET="1")
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                          timeout=300, env=env)
    assert done.returncode == 0 and done.stdout.strip() == "ok", done.stderr


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_the_triton_kernels_are_timed_and_fitted_on_cuda() -> None:
    from dcp import _core
    from dcp.torch.kernels import kernel_timing
    calls = _core.device_calls(2, 128, 1 << 20, 0.002)
    seconds = kernel_timing.time_calls(calls, torch.device("cuda", 0), 2, 0.002)
    assert len(seconds) == len(calls)
    assert all(len(s) == 2 and all(0 < t < math.inf for t in s) for s in seconds)
    links = [(8, 2e-5), (1 << 20, 6e-5), (4 << 20, 1e-4)]
    report = _core.fit_cluster(1, 2, links, [], [(1, 1e-5, 2e-5)], (0, 0.0), [seconds], 2, 128,
                               1 << 20, 0.002, kernel_timing.subtiles(), "gpu")
    values = cluster_values(report["text"])
    assert float(values["forward_tflops"]) > 0 and float(values["backward_tflops"]) > 0
    alone = cluster_values(dcp.calibrate.calibrate_device("h100-dgx", repeats=2,
                                                          timing_seconds=0.002,
                                                          copy_bytes=1 << 20))
    assert float(alone["forward_tflops"]) > 0 and alone["nodes"] == "4"
    # 128 heads at once fill the GPU: the rate is far above one head's on the same tile
    assert float(alone["forward_tflops"]) > 2 * float(values["forward_tflops"]), (alone, values)
