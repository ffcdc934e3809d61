#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# The GPU checks, on a machine with one CUDA GPU and PyTorch + Triton already installed (no
# network needed): builds and installs dcp into that Python, then runs, each under its own time
# limit and in this order, so that the most important results come first:
#   1. the GPU tests: every Triton kernel against fp64 references compiled for this GPU, the
#      executor on CUDA against the cpu kernels, the kernel timing of dcp.calibrate;
#   2. bench/gpu_attention.py: dcp's kernels next to SDPA-flash and FlexAttention;
#   3. the flash route (docs/gpu.md): its o, lse, dq, dk, dv on torch's FlashAttention kernels
#      against fp64 for every mask kind, then bench/gpu_attention_routes.py times each attention
#      instruction shape on the Triton kernels, the route and SDPA-flash into
#      DIR/attention_timings.json, the table DCPExecutor(attention_kernels="auto") chooses from
#      (DCP_ATTENTION_TIMINGS=DIR/attention_timings.json);
#   4. bench/gpu_distributed.py on one rank: the executor end to end on a whole batch;
#   5. the cost model against the GPU: `python -m dcp.calibrate --device-only` times this GPU's
#      kernels into a cluster file (DIR/gpu.cluster), then bench/gpu_distributed.py plans and
#      simulates batches on that file beside their measured times;
#   6. a transformers Llama-style model (~1B parameters, 32768 packed tokens) on dcp against the
#      same model on transformers' sdpa and flex_attention paths (bench/hf_bench.py);
#   7. compute-sanitizer racecheck and memcheck on the kernel tests, if the tool is there.
# Logs and JSON records go to DIR (default gpu_results/). Exit status: 1 if any step failed.
# STEPS (default all) picks some of gpu_tests, gpu_attention, flash_route, gpu_executor,
# cost_model, hf_step, sanitizer; the build always runs.
#
#   bash scripts/gpu_check.sh [DIR [STEP...]]
set -uo pipefail
cd "$(dirname "$0")/.."
out=${1:-gpu_results}
shift || true
steps=" ${*:-gpu_tests gpu_attention flash_route gpu_executor cost_model hf_step sanitizer} "
for wanted in $steps; do
  case $wanted in
    gpu_tests | gpu_attention | flash_route | gpu_executor | cost_model | hf_step | sanitizer) ;;
    *) echo "error: step '$wanted' is not one of gpu_tests gpu_attention flash_route" \
         "gpu_executor cost_model hf_step sanitizer" >&2; exit 2 ;;
  esac
done
wants() { [[ $steps == *" $1 "* ]]; }
mkdir -p "$out"
python=${PYTHON:-python3}
export PYTHONUNBUFFERED=1
failed=()

step() {  # step NAME SECONDS COMMAND...: runs COMMAND with a time limit, logs to DIR/NAME.log
  local name=$1 seconds=$2
  shift 2
  local start=$SECONDS
  echo "=== $name (limit ${seconds}s): $*"
  timeout --kill-after=10 "$seconds" "$@" >"$out/$name.log" 2>&1
  local rc=$?
  tail -n 40 "$out/$name.log"
  echo "=== $name: exit $rc after $((SECONDS - start))s"
  [ "$rc" -eq 0 ] || failed+=("$name")
}

unset TRITON_INTERPRET  # the GPU runs compiled kernels, never the interpreter
nvidia-smi --query-gpu=name,memory.total,driver_version,clocks.max.sm --format=csv
if ! "$python" -c 'import sys, torch; sys.exit(0 if torch.cuda.is_available() else 1)'; then
  echo "error: $python's torch sees no CUDA device; the GPU tests would only skip" >&2
  exit 1
fi
"$python" -c 'import sys, torch, triton; print(sys.version.split()[0], "torch", torch.__version__,
"triton", triton.__version__, torch.cuda.get_device_name(0))'

export CMAKE_BUILD_PARALLEL_LEVEL=${CMAKE_BUILD_PARALLEL_LEVEL:-$(nproc)}
step build 300 "$python" -m pip install --no-build-isolation --no-index --no-deps \
  --disable-pip-version-check -q .
if [[ " ${failed[*]} " == *" build "* ]]; then
  echo "the build failed; nothing else can run"
  exit 1
fi

wants gpu_tests && step gpu_tests 240 "$python" -m pytest -q -p no:cacheprovider -rs \
  --durations=10 tests/python/test_triton_kernels.py::test_kernels_on_cuda \
  tests/python/test_triton_executor.py::test_cuda_executor_matches_cpu_kernels \
  tests/python/test_calibrate.py::test_the_triton_kernels_are_timed_and_fitted_on_cuda
wants gpu_attention && step gpu_attention 200 "$python" bench/gpu_attention.py \
  --sizes 512,1024,2048,4096 --repeats 10 --json "$out/gpu_attention.json"
if wants flash_route; then
  step flash_route_tests 180 "$python" -m pytest -q -p no:cacheprovider -rs --durations=10 \
    tests/python/test_varlen_route.py -k cuda
  step flash_route_bench 180 "$python" bench/gpu_attention_routes.py \
    --sizes 1024,2048,4096,8192 --json "$out/attention_timings.json"
fi
wants gpu_executor && step gpu_executor 120 "$python" -m torch.distributed.run --standalone \
  --nproc-per-node 1 bench/gpu_distributed.py --seqlens 32768,16384,8192,4096,2048,1024,1024 \
  --strategies dcp-pure,ring --repeats 5 --json "$out/gpu_executor.json"
if wants cost_model; then
  rm -f "$out/gpu.cluster"  # the steps below use this run's calibration only
  step calibrate_device 120 "$python" -m dcp.calibrate --device-only --base h100-dgx \
    --name gpu-calibrated --out "$out/gpu.cluster"
  if [ -f "$out/gpu.cluster" ]; then
    # batches of one long sequence, a mix, and many short ones; causal and a sparse mask
    batch=0
    for case in "65536:causal" "32768,16384,8192,4096,2048,1024,1024:causal" \
        "32768,16384,8192,4096,2048,1024,1024:lambda:sink=64,window=4096" \
        "$(printf '2048,%.0s' {1..31})2048:causal"; do
      batch=$((batch + 1))
      step "cost_model_$batch" 120 "$python" -m torch.distributed.run --standalone \
        --nproc-per-node 1 bench/gpu_distributed.py --seqlens "${case%%:*}" \
        --mask "${case#*:}" --cluster "$out/gpu.cluster" --strategies dcp-pure,ring \
        --repeats 3 --json "$out/cost_model_$batch.json"
    done
  fi
fi
wants hf_step && step hf_step 180 "$python" bench/hf_bench.py --measure dense --device cuda \
  --tokens 32768 --vocab 32000 --hidden 2048 --layers 16 --heads 16 --kv-heads 8 --head-dim 128 \
  --block-size 4096 --repeats 3 --baselines sdpa,flex_attention
if wants sanitizer && command -v compute-sanitizer >/dev/null; then
  for tool in racecheck memcheck; do
    step "sanitizer_$tool" 300 env DCP_TRITON_INTERPRETER_CHILD=1 DCP_TRITON_KERNEL_DEVICE=cuda \
      compute-sanitizer --tool "$tool" --error-exitcode 3 \
      "$python" -m pytest -q -p no:cacheprovider tests/python/test_triton_kernels.py \
      -k "attention_forward or attention_backward or load_attend"
  done
fi

echo "failed steps: ${failed[*]:-none}"
[ ${#failed[@]} -eq 0 ]
