#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# dcp-pure's plan of one batch on 2 x 2 reduces partials inside a node in both passes (checked on
# its JSON), and `dcp run` executes it under mpirun within the fp32 bound of dense fp64 attention.
#   in_node_reduction_mpi.sh DCP MPIEXEC [mpirun flags...]
set -euo pipefail
dcp=$1
mpiexec=$2
shift 2
here=$(cd "$(dirname "$0")" && pwd)
config=(--seqlens 700,450,1260,415,2555 --block-size 64 --head-dim 16 --dtype fp32
        --mask causal_blockwise:block=32,local=2 --nodes 2 --devices-per-node 2
        --strategy dcp-pure --seed 8 --eps-compute 0.1)  # rows split across devices
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
"$dcp" plan "${config[@]}" --json "$tmp/plan.json" > /dev/null
if ! python3 "$here/../python/in_node_reductions.py" "$tmp/plan.json"; then
  echo "the plan no longer reduces partials inside a node in both passes; pick another batch" >&2
  exit 1
fi
"$mpiexec" -n 4 "$@" "$dcp" run --comm mpi "${config[@]}" --timeout 30
