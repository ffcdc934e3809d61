#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Installs the Python package dcp (pip install .) with what it builds and tests with: PyTorch,
# NumPy, pytest with pytest-xdist (the tests run on every core), transformers and accelerate (the
# optional extra dcp[hf]) and TRL (dcp[trl]) from PyPI, scikit-build-core and nanobind to build.
# Skips what is there.
set -euo pipefail
cd "$(dirname "$0")/.."

python=${PYTHON:-python3}
need=()
# module:package
for pair in torch:torch numpy:numpy pytest:pytest xdist:pytest-xdist nanobind:nanobind \
    scikit_build_core:scikit-build-core transformers:transformers accelerate:accelerate trl:trl; do
  "$python" -c "import ${pair%%:*}" 2>/dev/null || need+=("${pair#*:}")
done
if [ ${#need[@]} -gt 0 ]; then
  echo "installing from PyPI: ${need[*]} (PyTorch takes a few minutes)" >&2
  "$python" -m pip install --quiet --disable-pip-version-check "${need[@]}"
fi
# The build dir (build/python) is kept between runs, so a rebuild is incremental.
"$python" -m pip install --quiet --disable-pip-version-check --no-build-isolation .
