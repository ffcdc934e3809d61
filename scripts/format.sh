#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Formats every C++ file with clang-format; --check only reports files that differ (exit 1).
set -euo pipefail
cd "$(dirname "$0")/.."

mapfile -t files < <(git ls-files --cached --others --exclude-standard '*.h' '*.cc' '*.cu' '*.cuh' 2>/dev/null || find dcp apps tests bench -name '*.h' -o -name '*.cc')
if [ "${1:-}" = "--check" ]; then
  clang-format --dry-run --Werror "${files[@]}"
else
  clang-format -i "${files[@]}"
fi
