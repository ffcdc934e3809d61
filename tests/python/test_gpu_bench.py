# SPDX-License-Identifier: Apache-2.0
"""Smoke tests of the GPU benchmarks (bench/gpu_attention.py, bench/gpu_attention_routes.py,
bench/gpu_distributed.py, bench/device_dispatch_bench.py, bench/gpu_tile_sweep.py): each runs
as a subprocess at tiny sizes on the CPU (Triton's interpreter; gloo with dcp's cpu kernels) and
must exit 0 and print its table rows. The real-size single-tile run needs CUDA and skips
elsewhere."""
from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
import torch

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
ATTENTION_BENCH = os.path.join(ROOT, "bench", "gpu_attention.py")
ROUTES_BENCH = os.path.join(ROOT, "bench", "gpu_attention_routes.py")
DISTRIBUTED_BENCH = os.path.join(ROOT, "bench", "gpu_distributed.py")
DISPATCH_BENCH = os.path.join(ROOT, "bench", "device_dispatch_bench.py")
TILE_SWEEP = os.path.join(ROOT, "bench", "gpu_tile_sweep.py")


def _run(command: list[str], timeout: float, **environment: str) -> subprocess.CompletedProcess:
    env = dict(os.environ, **environment)
    if "TRITON_INTERPRET" not in environment:
        env.pop("TRITON_INTERPRET", None)
    try:
        result = subprocess.run(command, cwd=ROOT, env=env, capture_output=True, text=True,
                                timeout=timeout)
    except subprocess.TimeoutExpired as error:
        pytest.fail(f"{' '.join(command)} ran past {timeout} s\nstdout:\n{error.stdout}\n"
                    f"stderr:\n{error.stderr}")
    assert result.returncode == 0, (f"{' '.join(command)} exited {result.returncode}\n"
                                    f"stdout:\n{result.stdout}\nstderr:\n{result.stderr}")
    return result


def _table_rows(stdout: str) -> list[list[str]]:
    """The cells of the Markdown table's data rows."""
    rows = []
    for line in stdout.splitlines():
        if line.startswith("|") and not line.startswith("|---"):
            rows.append([cell.strip() for cell in line.strip().strip("|").split("|")])
    return rows[1:]  # after the header


@pytest.mark.seconds(14)
def test_single_tile_bench_under_the_interpreter(tmp_path) -> None:
    records = tmp_path / "tile.json"
    result = _run([sys.executable, ATTENTION_BENCH, "--device", "cpu", "--sizes", "32",
                   "--head-dim", "16", "--heads", "2", "--kv-heads", "1", "--repeats", "1",
                   "--masks", "causal,lambda",
                   # a window shorter than the tile: rows with two key intervals
                   "--sink", "4", "--window", "12", "--json", str(records)],
                  timeout=300, TRITON_INTERPRET="1")
    rows = _table_rows(result.stdout)
    seen = {(r[0], r[1], r[2]) for r in rows}
    for mask in ("causal", "lambda"):
        for name in ("forward", "backward", "forward+backward"):
            assert ("32", mask, name) in seen, result.stdout
    for row in rows:
        assert float(row[4]) > 0, row  # dcp TFLOP/s
        assert row[5] == row[6] == "n/a (needs CUDA)", row
    assert "max error" in result.stdout
    assert records.exists()


@pytest.mark.seconds(6)
def test_routes_bench_writes_a_table_the_selection_reads(tmp_path) -> None:
    """Triton under the interpreter and the flash route on its fp64 emulation, checked and
    timed per tile; the table is what DCPExecutor(attention_kernels="auto") reads."""
    from dcp.torch.kernels import kernel_selection
    records = tmp_path / "timings.json"
    result = _run([sys.executable, ROUTES_BENCH, "--device", "cpu", "--sizes", "32",
                   "--head-dim", "16", "--heads", "2", "--kv-heads", "1", "--repeats", "1",
                   "--masks", "causal,lambda", "--sink", "4", "--window", "12", "--json",
                   str(records)], timeout=300, TRITON_INTERPRET="1")
    rows = _table_rows(result.stdout)
    assert {(r[1], r[2], r[3]) for r in rows} == {
        (mask, shape, p) for mask, shape in (("causal", "causal"), ("lambda", "split"))
        for p in ("forward", "backward")}, result.stdout
    for row in rows:
        assert float(row[4]) > 0 and float(row[5]) > 0 and row[6] == "-", row
    choices = kernel_selection.load_choices(str(records))
    assert set(choices) == {(p, shape, 32) for p in ("forward", "backward")
                            for shape in ("causal", "split")}


def test_single_tile_bench_refuses_the_cpu_without_the_interpreter() -> None:
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    result = subprocess.run([sys.executable, ATTENTION_BENCH, "--device", "cpu", "--sizes", "32"],
                            cwd=ROOT, env=env, capture_output=True, text=True, timeout=120)
    assert result.returncode != 0
    assert "GPU" in result.stderr and "TRITON_INTERPRET=1" in result.stderr


@pytest.mark.seconds(8)
def test_distributed_bench_on_two_gloo_ranks(tmp_path) -> None:
    records = tmp_path / "distributed.json"
    result = _run([sys.executable, "-m", "torch.distributed.run", "--standalone",
                   "--nproc-per-node", "2", DISTRIBUTED_BENCH, "--device", "cpu", "--backend",
                   "gloo", "--kernels", "cpu", "--seqlens", "40,9", "--block-size", "8",
                   "--heads", "2", "--kv-heads", "1", "--head-dim", "8", "--repeats", "1",
                   "--strategies", "dcp-pure,ring", "--profile", "--json", str(records)],
                  timeout=300)
    rows = {r[0]: r for r in _table_rows(result.stdout)}
    assert set(rows) == {"dcp-pure", "ring"}, result.stdout
    for row in rows.values():
        assert float(row[1]) > 0 and float(row[2]) > 0, row  # forward, backward ms
    assert rows["ring"][6] == "1.00", rows["ring"]  # ring is the only static strategy
    for strategy in ("dcp-pure", "ring"):  # --profile: each pass's kernels, by time
        assert f"{strategy} forward:" in result.stdout and f"{strategy} backward:" in result.stdout
    for record in json.loads(records.read_text())["records"]:
        for rows_of_pass in record["kernels"].values():
            assert rows_of_pass and all(row["us"] > 0 and row["calls"] > 0
                                        for row in rows_of_pass), record["kernels"]


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
def test_single_tile_bench_on_cuda(tmp_path) -> None:
    records = tmp_path / "tile.json"
    result = _run([sys.executable, ATTENTION_BENCH, "--sizes", "1024,2048,4096", "--masks",
                   "causal,full,lambda", "--repeats", "5", "--json", str(records)], timeout=1800)
    rows = _table_rows(result.stdout)
    assert len(rows) == 3 * 3 * 3, result.stdout
    for row in rows:
        assert float(row[4]) > 0, row
    assert records.exists()


def test_dispatch_bench_runs_every_rank_of_a_plan() -> None:
    result = _run([sys.executable, DISPATCH_BENCH, "--nodes", "1", "--devices-per-node", "2",
                   "--repeats", "1"], timeout=300)
    assert "| forward |" in result.stdout and "| backward |" in result.stdout, result.stdout


@pytest.mark.seconds(10)
def test_tile_sweep_under_the_interpreter(tmp_path) -> None:
    """The sweep's loop, checks, table and output file (under the interpreter the kernels ignore
    the tile table, so the times say nothing about the tiles)."""
    import json
    out = tmp_path / "tiles.json"
    result = _run([sys.executable, TILE_SWEEP, "--device", "cpu", "--cases", "16:causal",
                   "--kernels", "dq", "--head-dim", "64", "--heads", "1", "--kv-heads", "1",
                   "--repeats", "1", "--out", str(out)], timeout=300, TRITON_INTERPRET="1")
    rows = _table_rows(result.stdout)
    assert len(rows) == 9 and sum("(best)" in r[5] for r in rows) == 1, result.stdout
    chosen = json.loads(out.read_text())
    assert list(chosen) == ["dq"] and len(chosen["dq"]["d64"]) == 4, chosen
