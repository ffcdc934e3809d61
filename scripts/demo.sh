#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# The main job: builds dcp (release) and runs it on a sampled, realistic 128K-token batch.
set -euo pipefail
cd "$(dirname "$0")/.."

bash scripts/install_deps.sh
echo "building dcp (release) ..."
mkdir -p build
if ! { cmake --preset release && cmake --build --preset release -j "$(nproc)" --target dcp; } >build/demo-build.log 2>&1; then
  cat build/demo-build.log >&2
  echo "build failed; the log above is also in build/demo-build.log" >&2
  exit 1
fi
dcp=build/release/apps/dcp

echo "== a LongDataCollections-like batch of 131072 tokens (dcp batches --dist ldc --count 1 --seed 0)"
batch=$("$dcp" batches --dist ldc --tokens 131072 --count 1 --seed 0)
echo "$batch"
echo
echo "== dcp workload --mask causal (8 q heads, 2 kv heads, head dim 128, bf16, 32 devices)"
"$dcp" workload --seqlens "$batch" --mask causal --devices 32
echo
for mask in causal lambda:sink=64,window=4096; do
  echo "== dcp partition --mask $mask --nodes 4 --devices-per-node 8 --block-size 1024"
  "$dcp" partition --seqlens "$batch" --mask "$mask" --nodes 4 --devices-per-node 8 --block-size 1024 | tail -6
  echo
done
for strategy in dcp zigzag hybrid; do
  echo "== dcp plan --strategy $strategy --mask causal --cluster a100-p4de (4 x 8) --block-size 1024"
  "$dcp" plan --seqlens "$batch" --mask causal --cluster a100-p4de --block-size 1024 \
    --strategy "$strategy" -o "build/demo-$strategy.plan" | tail -5
  echo "== dcp verify build/demo-$strategy.plan"
  "$dcp" verify "build/demo-$strategy.plan" | cut -c1-160
  echo
done
echo "Estimates are the planner's cost model on the a100-p4de preset; Programs execute for real"
echo "with the runtime (next issue). dcp inspect build/demo-dcp.plan shows each device's Program."
