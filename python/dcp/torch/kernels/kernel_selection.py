# SPDX-License-Identifier: Apache-2.0
"""Which attention kernel runs a class of tiles, chosen from recorded timings.

A class is (pass, shape, tile-size bucket): the pass ("forward" or "backward"), the tile's
shape class from its own mask (dcp.torch.kernels.varlen_windows: full, causal, window, split) and
the bucket of its larger side, the smallest power of two at or above it.
bench/gpu_attention_routes.py times each class on each kernel and writes a timing table, one
record per measurement:

    {"records": [{"pass": "forward", "shape": "causal", "tokens": 4096, "kernel": "flash",
                  "seconds": 0.00123}, ...]}

A class goes to the flash route only where it was measured on both kernels and flash was
strictly faster; ties and missing measurements keep the Triton kernels. Other kernels in the
table (the benchmark's SDPA-flash reference) are read but never chosen. DCP_ATTENTION_TIMINGS
names the table DCPExecutor(attention_kernels="auto") reads. Pure functions, no CUDA.
"""
from __future__ import annotations

import json
import math
import os

from dcp.torch.kernels.varlen_windows import OTHER, SHAPES

PASSES = ("forward", "backward")
CHOSEN = ("triton", "flash")  # the kernels a class can go to
KERNELS = CHOSEN + ("sdpa_flash",)  # what a table may record
TIMINGS_ENVIRONMENT = "DCP_ATTENTION_TIMINGS"
_FIELDS = ("pass", "shape", "tokens", "kernel", "seconds")


def bucket(tokens: int) -> int:
    """The smallest power of two >= tokens (>= 1)."""
    return 1 << max(0, int(tokens) - 1).bit_length()


def _checked(i: int, record) -> tuple[tuple[str, str, int], str, float]:
    where = f"timings entry {i} ({record!r})"
    if not isinstance(record, dict) or not set(_FIELDS) <= set(record):
        raise ValueError(f"{where}: a record has the fields {', '.join(_FIELDS)}")
    if record["pass"] not in PASSES:
        raise ValueError(f"{where}: pass {record['pass']!r} is not one of {', '.join(PASSES)}")
    if record["shape"] not in SHAPES or record["shape"] == OTHER:
        raise ValueError(f"{where}: shape {record['shape']!r} is not one of "
                         f"{', '.join(s for s in SHAPES if s != OTHER)}")
    tokens = record["tokens"]
    if not isinstance(tokens, int) or isinstance(tokens, bool) or tokens < 1:
        raise ValueError(f"{where}: tokens {tokens!r} is not a positive integer")
    if record["kernel"] not in KERNELS:
        raise ValueError(f"{where}: kernel {record['kernel']!r} is not one of "
                         f"{', '.join(KERNELS)}")
    seconds = record["seconds"]
    if (not isinstance(seconds, (int, float)) or isinstance(seconds, bool)
            or not math.isfinite(seconds) or seconds <= 0):
        raise ValueError(f"{where}: seconds {seconds!r} is not a positive finite number")
    return (record["pass"], record["shape"], bucket(tokens)), record["kernel"], float(seconds)


def choose_kernels(records) -> dict[tuple[str, str, int], str]:
    """{(pass, shape, bucket): "triton" or "flash"} for every class the records measure. Raises
    ValueError naming the first bad record (a missing or unknown field, a non-positive time, a
    class and kernel measured twice)."""
    if isinstance(records, dict):
        records = records.get("records")
    if not isinstance(records, list):
        raise ValueError("timings: a table is {\"records\": [...]} or a list of records")
    seen: dict[tuple, int] = {}
    times: dict[tuple, dict[str, float]] = {}
    for i, record in enumerate(records):
        key, kernel, seconds = _checked(i, record)
        if (key, kernel) in seen:
            raise ValueError(f"timings entry {i} ({record!r}): {kernel} on {key} is measured "
                             f"again (first in entry {seen[key, kernel]})")
        seen[key, kernel] = i
        times.setdefault(key, {})[kernel] = seconds
    return {key: ("flash" if "flash" in t and "triton" in t and t["flash"] < t["triton"]
                  else "triton") for key, t in times.items()}


def kernel_for(choices: dict, pass_: str, shape: str, q_tokens: int, kv_tokens: int) -> str:
    """The kernel of a tile: its class's choice, "triton" for a class not measured."""
    return choices.get((pass_, shape, bucket(max(q_tokens, kv_tokens))), "triton")


def load_choices(path: str) -> dict[tuple[str, str, int], str]:
    """choose_kernels of the JSON table at `path`; ValueError naming the file if it is bad."""
    try:
        with open(path) as f:
            table = json.load(f)
    except (OSError, ValueError) as error:
        raise ValueError(f"{path}: cannot read a timing table: {error}") from None
    try:
        return choose_kernels(table)
    except ValueError as error:
        raise ValueError(f"{path}: {error}") from None


def choices_from_environment() -> dict[tuple[str, str, int], str]:
    """The choices of the table DCP_ATTENTION_TIMINGS names ({} when it is unset)."""
    path = os.environ.get(TIMINGS_ENVIRONMENT)
    return load_choices(path) if path else {}
