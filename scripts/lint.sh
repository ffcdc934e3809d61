#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Lints every Python file (package, tests, examples, benchmarks) with ruff, installed from PyPI
# when missing; the rules are pyproject.toml's [tool.ruff]. Exits 1 on findings. Arguments go to
# ruff check: --fix applies its safe fixes.
set -euo pipefail
cd "$(dirname "$0")/.."

python=${PYTHON:-python3}
if ! "$python" -m ruff --version >/dev/null 2>&1; then
  echo "installing from PyPI: ruff" >&2
  "$python" -m pip install --quiet --disable-pip-version-check ruff
fi
"$python" -m ruff check --quiet "$@" .
