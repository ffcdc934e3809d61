#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Plans a fixed set of small batches and writes one line per case: its name, the sha256 of its
# plan file and the sha256 of its Programs alone (every kind's forward and backward Programs from
# the JSON export, without the header). Run it with the binary before and after a refactor and
# diff the two files: a line that differs names a plan whose bytes changed; where only the file's
# hash differs, the Programs are the same and the header changed (a new plan format). Every
# strategy, the mask kinds, an automatic and a fixed block size, 2 x 4 and 4 x 8 devices, a model
# of two attention kinds. Exit status 1 if a case failed (its line then reads "failed").
#
#   bash scripts/plan_bytes.sh [--dcp PATH_TO_BINARY] OUT.txt
set -uo pipefail
dcp="$(dirname "$0")/../build/release/apps/dcp"
if [ "${1:-}" = "--dcp" ]; then
  dcp=$2
  shift 2
fi
if [ $# -ne 1 ]; then
  echo "usage: $0 [--dcp PATH_TO_BINARY] OUT.txt" >&2
  exit 2
fi
out=$1
if [ ! -x "$dcp" ]; then
  echo "$0: no dcp binary at $dcp" >&2
  exit 2
fi

small="--seqlens 8192,4096,2048,2048,1024,512 --nodes 2 --devices-per-node 4"
long="--seqlens 32768,8192,4096,4096,2048,1024 --nodes 2 --devices-per-node 4"
big="--seqlens 32768,16384,8192,8192,4096,2048,1024,1024 --nodes 4 --devices-per-node 8 --heads 32 --kv-heads 8"
kinds="--mask global=causal --mask local=sliding_window:window=2048 --layers global=1,local=3"

# name|flags of `dcp plan`
cases=(
  "dcp|$small --block-size 1024"
  "dcp-pure|$small --block-size 1024 --strategy dcp-pure"
  "ring|$small --block-size 1024 --strategy ring"
  "zigzag|$small --block-size 1024 --strategy zigzag"
  "ulysses|$small --block-size 1024 --strategy ulysses"
  "hybrid|$small --block-size 1024 --strategy hybrid"
  "te|$small --block-size 1024 --strategy te"
  "loongtrain|$small --block-size 1024 --strategy loongtrain --loongtrain-window 2"
  "dcp-auto-block|$long"
  "dcp-pure-auto-block|$long --strategy dcp-pure"
  "hybrid-auto-block|$long --strategy hybrid"
  "dcp-full|$small --block-size 1024 --mask full"
  "dcp-sliding-window|$small --block-size 1024 --mask sliding_window:window=1536"
  "dcp-lambda|$small --block-size 512 --mask lambda:sink=256,window=1024"
  "dcp-shared-question|$small --block-size 512 --mask shared_question:question=0.25,answers=3"
  "dcp-causal-blockwise|$small --block-size 512 --mask causal_blockwise:block=512,local=2"
  "dcp-chunked|$small --block-size 1024 --mask chunked:chunk=2048"
  "zigzag-lambda|$small --block-size 512 --strategy zigzag --mask lambda:sink=256,window=1024"
  "te-shared-question-masked-tiles|$small --block-size 512 --strategy te --compute-masked-tiles --mask shared_question:question=0.25,answers=3"
  "dcp-options|$small --block-size 1024 --keep-kv none --partial-dtype fp32 --stages 2 --token-flops 1e9 --dtype fp16"
  "ring-static-dp-auto|$small --block-size 1024 --strategy ring --static-dp auto"
  "dcp-sampled-ldc|--dist ldc --tokens 32768 --seed 3 --nodes 2 --devices-per-node 4"
  "dcp-4x8|$big --block-size 1024"
  "dcp-pure-4x8-auto-block|$big --strategy dcp-pure"
  "ulysses-4x8|$big --block-size 1024 --strategy ulysses"
  "loongtrain-4x8|$big --block-size 1024 --strategy loongtrain"
  "dcp-kinds|$small --block-size 1024 $kinds"
  "dcp-pure-kinds-auto-block|$long --strategy dcp-pure $kinds"
  "hybrid-kinds|$small --block-size 1024 --strategy hybrid $kinds"
)

# The sha256 of the Programs in a JSON export: a plan's, or each attention kind's.
programs_of='
import hashlib, json, sys
export = json.load(open(sys.argv[1]))
plans = [kind["plan"] for kind in export["kinds"]] if "kinds" in export else [export["plan"]]
programs = [[plan["forward"], plan["backward"]] for plan in plans]
print(hashlib.sha256(json.dumps(programs, sort_keys=True).encode()).hexdigest())'

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
status=0
: >"$out"
for c in "${cases[@]}"; do
  name=${c%%|*}
  # shellcheck disable=SC2086  # the flags are meant to split into words
  if "$dcp" plan ${c#*|} --out "$tmp/plan" --json "$tmp/plan.json" >"$tmp/log" 2>&1; then
    programs=$(python3 -c "$programs_of" "$tmp/plan.json")
    echo "$name $(sha256sum <"$tmp/plan" | cut -d' ' -f1) $programs" >>"$out"
  else
    echo "$name failed" >>"$out"
    echo "$name failed: $(tail -n 3 "$tmp/log")" >&2
    status=1
  fi
  rm -f "$tmp/plan" "$tmp/plan.json"
done
exit $status
