#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# The test command: installs what is missing, checks formatting (clang-format) and lints the Python
# code (ruff), builds with ASan+UBSan and runs ctest, then runs the Python package's tests (pytest,
# on every core). The Python package (pip install .) builds in the background meanwhile: the two
# builds compile dcp separately (Clang with sanitizers, GCC for the wheel) and together keep the
# cores busy where each alone leaves them idle (linking, a last large file).
set -euo pipefail
cd "$(dirname "$0")/.."

bash scripts/install_deps.sh
bash scripts/format.sh --check
bash scripts/lint.sh

python_log=$(mktemp)
bash scripts/install_python.sh >"$python_log" 2>&1 &
python_install=$!
# Stopped with the script if a step below fails first.
trap 'kill "$python_install" 2>/dev/null || true; rm -f "$python_log"' EXIT

cmake --preset ci
cmake --build --preset ci -j "$(nproc)"
ctest --preset ci -j "$(nproc)"

status=0
wait "$python_install" || status=$?
cat "$python_log"
if [ "$status" -ne 0 ]; then
  echo "scripts/install_python.sh failed (exit $status)" >&2
  exit "$status"
fi
python3 -m pytest tests/python -q -p no:cacheprovider -n "$(nproc)"
