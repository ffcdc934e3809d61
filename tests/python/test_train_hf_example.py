# SPDX-License-Identifier: Apache-2.0
"""examples/train_hf.py as a user runs it: torchrun on 2 gloo ranks with dcp, and the one-process
sdpa baseline (--dense) on the same batches, give the same losses; so do 2 ranks under FSDP2 as
2 data-parallel replicas (a 2 x 1 (dp, cp) mesh), stopped with --save and continued with
--resume; bad flags exit 2."""
from __future__ import annotations

import csv
import os
import subprocess
import sys

import pytest

pytest.importorskip("transformers")

EXAMPLE = os.path.join(os.path.dirname(__file__), "..", "..", "examples", "train_hf.py")
FLAGS = ["--model", "mistral", "--steps", "4", "--tokens-per-batch", "768", "--block-size", "64"]


def rows(out: str) -> list[dict]:
    with open(os.path.join(out, "loss.csv"), newline="") as f:
        return list(csv.DictReader(f))


@pytest.mark.seconds(20)
def test_two_ranks_train_like_the_dense_baseline(tmp_path) -> None:
    dcp_out, dense_out = str(tmp_path / "dcp"), str(tmp_path / "dense")
    launched = subprocess.run(
        [sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", "2", EXAMPLE,
         *FLAGS, "--out", dcp_out], capture_output=True, text=True, timeout=300)
    assert launched.returncode == 0, launched.stderr[-3000:]
    assert "attention: sliding_window:window=48" in launched.stdout
    dense = subprocess.run([sys.executable, EXAMPLE, *FLAGS, "--dense", "--out", dense_out],
                           capture_output=True, text=True, timeout=300)
    assert dense.returncode == 0, dense.stderr[-3000:]
    got, want = rows(dcp_out), rows(dense_out)
    assert len(got) == len(want) == 4
    for a, b in zip(got, want):
        assert a["batch_crc"] == b["batch_crc"]
        assert abs(float(a["loss"]) - float(b["loss"])) <= 1e-4 * abs(float(b["loss"]))
    assert os.path.getsize(os.path.join(dcp_out, "loss.svg")) > 0


@pytest.mark.seconds(30)
def test_fsdp2_on_a_mesh_saved_and_resumed_trains_like_the_dense_baseline(tmp_path) -> None:
    flags = ["--model", "llama", "--tokens-per-batch", "384", "--block-size", "32", "--dp", "2"]
    launch = [sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", "2", EXAMPLE,
              *flags, "--fsdp"]
    ckpt = str(tmp_path / "ckpt")
    first = subprocess.run([*launch, "--steps", "2", "--save", ckpt, "--out",
                            str(tmp_path / "first")], capture_output=True, text=True, timeout=300)
    assert first.returncode == 0, first.stderr[-3000:]
    assert "2 ranks as 2 x 1 (dp, cp), FSDP2" in first.stdout
    rest = subprocess.run([*launch, "--steps", "4", "--resume", ckpt, "--out",
                           str(tmp_path / "rest")], capture_output=True, text=True, timeout=300)
    assert rest.returncode == 0, rest.stderr[-3000:]
    assert "resumed from" in rest.stdout and "after step 2" in rest.stdout
    assert "s of planning in background threads" in rest.stdout
    dense = subprocess.run([sys.executable, EXAMPLE, *flags, "--steps", "4", "--dense", "--out",
                            str(tmp_path / "dense")], capture_output=True, text=True, timeout=300)
    assert dense.returncode == 0, dense.stderr[-3000:]
    got = rows(str(tmp_path / "first")) + rows(str(tmp_path / "rest"))
    want = rows(str(tmp_path / "dense"))
    assert [r["step"] for r in got] == [r["step"] for r in want] == ["1", "2", "3", "4"]
    for a, b in zip(got, want):
        assert a["batch_crc"] == b["batch_crc"]
        assert abs(float(a["loss"]) - float(b["loss"])) <= 1e-4 * abs(float(b["loss"]))


@pytest.mark.parametrize("flags,words", [
    (["--model", "nosuchfamily"], "neither a family"),
    (["--steps", "0"], "--steps 0"),
    (["--dp", "0"], "--dp 0"),
    (["--resume", "/nonexistent/ckpt"], "is not a directory"),
])
def test_bad_flags_exit_2(flags, words, tmp_path, capsys) -> None:
    # In this process: the example's main() parses its flags before anything else, and a new
    # interpreter would spend seconds importing torch and transformers to print one line.
    import train_hf
    with pytest.raises(SystemExit) as exited:
        train_hf.main([*flags, "--out", str(tmp_path)])
    err = capsys.readouterr().err
    assert exited.value.code == 2 and words in err, err
