#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# The main job: builds dcp (release) and runs `dcp demo`: a realistic batch planned with dcp and
# the static strategies, every plan verified, executed forward and backward on local ranks and
# checked against dense fp64 attention. Extra arguments go to `dcp demo` (see dcp demo --help).
set -euo pipefail
cd "$(dirname "$0")/.."

bash scripts/install_deps.sh
echo "building dcp (release; the first build takes a few minutes) ..."
mkdir -p build
if ! { cmake --preset release && cmake --build --preset release -j "$(nproc)" --target dcp; } >build/demo-build.log 2>&1; then
  cat build/demo-build.log >&2
  echo "build failed; the log above is also in build/demo-build.log" >&2
  exit 1
fi
exec build/release/apps/dcp demo "$@"
