#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Runs a command that must fail, and checks that it did: non-zero exit status, ended within a
# bound, and output (stdout and stderr together) matching an extended regular expression.
# Usage: expect_job_failure.sh MAX_SECONDS PATTERN -- COMMAND [ARGS...]
set -uo pipefail

if [ $# -lt 4 ] || [ "$3" != "--" ]; then
  echo "usage: $0 MAX_SECONDS PATTERN -- COMMAND [ARGS...]" >&2
  exit 2
fi
max_seconds=$1
pattern=$2
shift 3

start=$(date +%s%N)
# The outer timeout only keeps a hung job from outliving the test; its status (124) is non-zero
# but the elapsed-time check below fails such a run anyway.
output=$(timeout --kill-after=5 $((max_seconds + 10)) "$@" 2>&1)
status=$?
elapsed_ms=$((($(date +%s%N) - start) / 1000000))

printf '%s\n' "$output"
echo "--- exit status ${status}, ${elapsed_ms} ms (bound ${max_seconds} s)"

failed=0
if [ "$status" -eq 0 ]; then
  echo "FAIL: the job exited with status 0"
  failed=1
fi
if [ "$elapsed_ms" -ge $((max_seconds * 1000)) ]; then
  echo "FAIL: the job took ${elapsed_ms} ms, not under ${max_seconds} s"
  failed=1
fi
if ! grep -Eq -- "$pattern" <<<"$output"; then
  echo "FAIL: the output does not match: ${pattern}"
  failed=1
fi
if [ "$failed" -eq 0 ]; then
  echo "OK: failed as expected"
fi
exit "$failed"
