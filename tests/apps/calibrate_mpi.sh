#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# `dcp calibrate --comm mpi` under mpirun: 4 ranks as 2 nodes x 2 write a cluster file that
# `dcp plan --cluster` reads; 2 ranks without a shape take it from Open MPI (one node) and say
# the inter-node constants are copies; a world that does not match the shape, or an --out rank 0
# cannot write, ends every rank with exit status 2 before measuring.
#   calibrate_mpi.sh DCP MPIEXEC [mpirun flags...]
set -euo pipefail
dcp=$1
mpiexec=$2
shift 2
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
# Small and short: the wiring is under test, not the machine. The largest message (64 MiB) still
# takes longer than an 8-byte one when 4 ranks share 2 busy cores (at 16 MiB, 1 run in 3 under load
# timed both alike and calibrate rightly refused the fit).
small=(--repeats 2 --timing-seconds 0.002 --tile-tokens 64 --copy-bytes 1048576
       --min-bytes 1048576 --max-bytes 67108864 --group-peers 3 --timeout 60)

fail() { echo "calibrate_mpi: $*" >&2; exit 1; }

"$mpiexec" -n 4 "$@" "$dcp" calibrate --comm mpi --nodes 2 --devices-per-node 2 "${small[@]}" \
  --name test-2x2 --out "$tmp/2x2.cluster" > "$tmp/2x2.txt"
for key in "name = test-2x2" "nodes = 2" "devices_per_node = 2" "intra_node_efficiency =" \
           "inter_node_efficiency =" "launch_peer_overhead_us =" "nics_per_node ="; do
  grep -q "^$key" "$tmp/2x2.cluster" || fail "the 2 x 2 cluster file lacks '$key'"
done
grep -q "pairs node 0 -> node 1 at once" "$tmp/2x2.txt" || fail "no aggregate row in the table"
# The printed file is the written one.
sed -n '/^name = /,$p' "$tmp/2x2.txt" | cmp -s - "$tmp/2x2.cluster" ||
  fail "the printed cluster file differs from the written one"
"$dcp" plan --cluster "$tmp/2x2.cluster" --seqlens 700,300 --block-size 128 --head-dim 16 \
  > "$tmp/plan.txt" || fail "dcp plan cannot read the calibrated cluster file"

"$mpiexec" -n 2 "$@" "$dcp" calibrate --comm mpi "${small[@]}" --out "$tmp/1x2.cluster" \
  > "$tmp/1x2.txt"
grep -q "^nodes = 1$" "$tmp/1x2.cluster" || fail "2 ranks of one machine are not 1 node"
grep -q "^devices_per_node = 2$" "$tmp/1x2.cluster" || fail "2 ranks of one machine: not 2 devices"
grep -q "note: one node: the inter-node constants are copies" "$tmp/1x2.txt" ||
  fail "one node, but no note that the inter-node constants are copies"

mpirun_flags=("$@")
expect_status_2() {  # expect_status_2 WORDS RANKS ARGS...
  local words=$1 ranks=$2
  shift 2
  local status=0
  timeout 60 "$mpiexec" -n "$ranks" "${mpirun_flags[@]}" "$dcp" calibrate --comm mpi "$@" \
    > "$tmp/bad.out" 2> "$tmp/bad.err" || status=$?
  [ "$status" -eq 2 ] || fail "expected exit status 2, got $status: $(cat "$tmp/bad.err")"
  grep -q -- "$words" "$tmp/bad.err" ||
    fail "the error does not say '$words': $(cat "$tmp/bad.err")"
  [ ! -s "$tmp/bad.out" ] || fail "a failing calibration printed on stdout"
}
expect_status_2 "the cluster shape 2 x 2 has 4 devices but there are 3 ranks" 3 \
  --nodes 2 --devices-per-node 2 "${small[@]}" --out "$tmp/bad.cluster"
expect_status_2 "the world size 3 is not a multiple of 2" 3 --devices-per-node 2 "${small[@]}"
expect_status_2 "not a file in an existing directory" 2 "${small[@]}" --out "$tmp/missing/x.cluster"
[ ! -e "$tmp/bad.cluster" ] || fail "a failing calibration wrote its --out file"
echo "calibrate_mpi: passed"
