#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# The test command: installs what is missing, checks formatting (clang-format) and lints the Python
# code (ruff), builds with ASan+UBSan and runs ctest, then installs the Python package
# (pip install .) and runs its tests (pytest, on every core).
set -euo pipefail
cd "$(dirname "$0")/.."

bash scripts/install_deps.sh
bash scripts/format.sh --check
bash scripts/lint.sh
cmake --preset ci
cmake --build --preset ci -j "$(nproc)"
ctest --preset ci -j "$(nproc)"

bash scripts/install_python.sh
python3 -m pytest tests/python -q -p no:cacheprovider -n "$(nproc)"
