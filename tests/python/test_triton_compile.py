# SPDX-License-Identifier: Apache-2.0
"""Every kernel variant of dcp.torch.kernels.triton_kernels compiles to PTX and cubin for sm_90
without a GPU, and those of head dim 128 also for sm_80, each within the architecture's shared
memory. Head dim 128 has each kernel's and dtype's largest tiles and shared memory, the limit that
is tighter on sm_80; the head-dim-64 variants are the same code at smaller sizes, and compiling them
for sm_80 as well would add a third of the test's time.

Compiling needs triton imported without TRITON_INTERPRET, so the work runs in two fresh worker
processes (half the compilations each) with the variable removed and a private kernel cache."""
import json
import os
import subprocess
import sys

import pytest

_WORKERS = 2
_SHARED_LIMIT = {80: 166912, 90: 232448}  # bytes of shared memory one block may use (opt-in)

# Runs compilations worker, worker + workers, ... of the list: every variant for sm_90, and those
# of head dim 128 (or without one) for sm_80 too; prints one JSON line: the kernels the module
# defines and, per compilation, the PTX target, cubin size and shared memory (or the error).
_WORKER = r"""
import json, re, sys, traceback
worker, workers = int(sys.argv[1]), int(sys.argv[2])
import dcp.torch.kernels.triton_kernels as tk
import triton
kernels = sorted(name for name, value in vars(tk.jit).items()
                 if isinstance(value, triton.runtime.JITFunction) and name.endswith("_kernel"))
jobs = [(variant, arch) for variant in tk.kernel_variants() for arch in (80, 90)
        if arch == 90 or dict(variant.constexprs).get("HEAD_DIM", 128) == 128]
results = []
for variant, arch in jobs[worker::workers]:
    result = {"variant": str(variant), "kernel": variant.kernel, "arch": arch}
    try:
        compiled = tk.compile_variant(variant, arch)
        target = re.search(r"^\.target\s+(\S+)", compiled.asm["ptx"], re.MULTILINE)
        result.update(target=target.group(1) if target else None,
                      cubin_bytes=len(compiled.asm["cubin"]), shared=compiled.metadata.shared)
    except Exception:
        result["error"] = traceback.format_exc()[-3000:]
    results.append(result)
print(json.dumps({"kernels": kernels, "results": results}))
"""


@pytest.mark.seconds(70)
def test_every_variant_compiles_for_sm90_and_head_dim_128_for_sm80(tmp_path):
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    env["TRITON_CACHE_DIR"] = str(tmp_path / "triton-cache")
    workers = [subprocess.Popen([sys.executable, "-c", _WORKER, str(i), str(_WORKERS)], env=env,
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
               for i in range(_WORKERS)]
    kernels, results = set(), []
    for worker in workers:
        out, err = worker.communicate(timeout=1200)
        assert worker.returncode == 0, err[-5000:]
        report = json.loads(out.strip().splitlines()[-1])
        kernels.update(report["kernels"])
        results += report["results"]

    failures = [f"{r['variant']} sm_{r['arch']}:\n{r['error']}" for r in results if "error" in r]
    assert not failures, "\n\n".join(failures)
    assert {r["kernel"] for r in results} == kernels, "a kernel has no variant in kernel_variants()"
    assert len(results) == len({(r["variant"], r["arch"]) for r in results}), "duplicate variants"
    assert {r["kernel"] for r in results if r["arch"] == 80} == kernels, "a kernel without sm_80"
    for r in results:
        what = f"{r['variant']} sm_{r['arch']}"
        expected = ("sm_80",) if r["arch"] == 80 else ("sm_90", "sm_90a")
        assert r["target"] in expected, f"{what}: PTX target {r['target']}"
        assert r["cubin_bytes"] > 0, f"{what}: empty cubin"
        assert r["shared"] <= _SHARED_LIMIT[r["arch"]], f"{what}: {r['shared']} B shared memory"


# --- the tile table --------------------------------------------------------------------------

_TILES_PROBE = r"""
import torch
import dcp.torch.kernels.triton_kernels as tk
c, options = tk._attention_launch("dkv", 128, torch.bfloat16, False)
print(c["BLOCK_M"], c["BLOCK_N"], options["num_warps"], options["num_stages"])
"""


def _import_with_tiles(tmp_path, text):
    path = tmp_path / "tiles.json"
    path.write_text(text)
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    env.update(DCP_TRITON_TILES=str(path), TRITON_CACHE_DIR=str(tmp_path / "cache"))
    return subprocess.run([sys.executable, "-c", _TILES_PROBE], env=env, capture_output=True,
                          text=True, timeout=120)


def test_a_tile_table_from_the_environment_replaces_its_entries(tmp_path):
    result = _import_with_tiles(tmp_path, '{"dkv": {"d128": [32, 64, 8, 3]}}')
    assert result.returncode == 0, result.stderr
    assert result.stdout.split() == ["32", "64", "8", "3"]


# Imports the module once per table given on the command line, each with DCP_TRITON_TILES naming
# it, in one process (importing torch and triton is most of a probe's time); a failed import leaves
# no module behind, so the next import reads the variable again. Prints one JSON line per table:
# the ValueError's message, or null where the import succeeded.
_REFUSAL_PROBE = r"""
import json, os, sys
import torch
for path in sys.argv[1:]:
    os.environ["DCP_TRITON_TILES"] = path
    try:
        import dcp.torch.kernels.triton_kernels
    except ValueError as error:
        print(json.dumps(str(error)))
    else:
        print(json.dumps(None))
        del sys.modules["dcp.torch.kernels.triton_kernels"]
"""


def test_a_malformed_tile_table_is_refused_naming_the_entry(tmp_path):
    cases = [('{"dkv": {"d128": [48, 64, 8, 3]}}', "dkv/d128 = [48, 64, 8, 3]"),
             ('{"backward": {"d128": [64, 64, 4, 2]}}', "kernel 'backward'"),
             ('{"dq": {"d256": [64, 64, 4, 2]}}', "class 'd256' of dq"),
             ('{"dq": {"d64": [64, 64, 4]}}', "dq/d64 = [64, 64, 4]"),
             ("not json", "cannot read a tile table"),
             ("[]", "got list"),
             ('{"forward": [64, 64, 4, 2]}', "forward maps classes to tiles")]
    paths = []
    for i, (text, _) in enumerate(cases):
        paths.append(tmp_path / f"tiles{i}.json")
        paths[-1].write_text(text)
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    env["TRITON_CACHE_DIR"] = str(tmp_path / "cache")
    result = subprocess.run([sys.executable, "-c", _REFUSAL_PROBE, *map(str, paths)], env=env,
                            capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    messages = [json.loads(line) for line in result.stdout.splitlines()]
    assert len(messages) == len(cases), result.stdout
    for (text, words), message in zip(cases, messages):
        assert message is not None, text
        assert "DCP_TRITON_TILES=" in message and words in message, message


def test_set_tiles_changes_nothing_when_one_entry_is_bad(tmp_path):
    probe = r"""
import torch
import dcp.torch.kernels.triton_kernels as tk
before = {k: dict(v) for k, v in tk._GPU_TILES.items()}
try:
    tk.set_tiles({"forward": {"d64": [128, 64, 8, 3]}, "dq": {"d64": [64, 64, 3, 2]}})
except ValueError as error:
    print("refused:", error)
print(tk._GPU_TILES == before)
"""
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    result = subprocess.run([sys.executable, "-c", probe], env=env, capture_output=True,
                            text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    assert "refused: tiles: dq/d64 = [64, 64, 3, 2]" in result.stdout, result.stdout
    assert result.stdout.strip().endswith("True"), result.stdout
