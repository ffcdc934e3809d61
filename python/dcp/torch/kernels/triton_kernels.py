# SPDX-License-Identifier: Apache-2.0
"""Triton kernels of the GPU path: one launch per Program instruction, or per run of copies.

Every function works on one pass's buffer table (the *arena*: a 1-D uint8 tensor) and on the
local tensors of the pass, all on one device (CUDA, or CPU under TRITON_INTERPRET=1); the
attention kernels also read kv values in the pass's kept tensor (1-D uint8: the kv values the
forward pass received and keeps for the backward pass). Slot offsets are byte offsets into the
arena, and kept offsets into the kept tensor, multiples of the schema's slot_alignment (64).

Value layouts inside a slot (h = q heads per head block, hk = kv heads per block, d = head dim,
E = bytes per storage element; "storage" is the plan's dtype: fp32, bf16 or fp16):
  kQ      q  [t][h][d] storage
  kKV     k  [t][hk][d] storage, then v [t][hk][d] storage at byte t*hk*d*E
  kOut    o  [t][h][d] fp32, then lse [h][t] fp32 at byte t*h*d*4
  kQGrad  q  [t][h][d] storage, do [t][h][d] at t*h*d*E, lse [h][t] fp32 at 2*t*h*d*E,
          delta [h][t] fp32 right after lse
  kDQ     dq [t][h][d] fp32
  kDKV    dk [t][hk][d] fp32, then dv [t][hk][d] fp32 at byte t*hk*d*4
Local tensors: q, o, do, dq [T][H][d] and k, v, dk, dv [T][HK][d] in storage dtype (H, HK all
heads), lse [H][T] fp32.

Tables (int64 [n, width], built by the C++ lowering, dcp/runtime/lowering.h): each table's
columns, their order and so its width are the lowering's schema, dcp._core.LOWERING_SCHEMA
(dcp/runtime/lowering_schema.h); the launchers check widths against it and the kernels take
every column index from it (table() builds a table from rows given by column name).
  wire_rows    per partial that a launch narrows before sending or widens after receiving: its
               slot (slot_off), its wire buffer (wire_off), the fp32 values converted (elements)
               and the bytes copied after them (tail_bytes); one launch converts a launch's
               partials.
  memory_rows  a run of Merges (count: tokens) or Sums (count: fp32 elements) of the value at
               src_off into the one at dst_off, one launch per run; no row reads or writes what
               another row of its run writes.
  copy_rows    per copy: the slot (slot_off), the first local token, tokens, and the head block
               (a copy moves heads [head_block x head_scale, + heads)). One launch runs a
               table's rows (a run of Loads of one kind, or of Stores), each row its own slot or
               its own rows and heads of a local tensor.
  entries      q_off: the kQ (forward) or kQGrad (backward) slot; kv_off: the kKV slot, or
               where kv_buffer is the schema's "kept" buffer the kv value's offset in the kept
               tensor; mask: -1 for a full tile, else the row start s in mask_rows: row r attends
               to keys [intervals[2i], intervals[2i+1]) for i in [mask_rows[s+r],
               mask_rows[s+r+1]) (sorted, disjoint, non-empty, inside [0, kv_tokens)); a row may
               have none. q_group, kv_group: the groups the entry contributes to (-1: none); the
               kernels do not read them (the groups list their members).
  q_groups, kv_groups
               one output value (out_off) and the entries (members[member_begin:member_end])
               that contribute to it; accumulate: add to (merge into) what the output holds, else
               overwrite it. All members of a q group share one q value; of a kv group one kv
               (input_off; the kernels take it, and kv_buffer, from the first member).
  members [M]  entry indices (1-D); mask_rows int32, mask_intervals int32 (pairs), 1-D.

Numerics: s = scale * q.k; lse natural log; a row with no key: lse = -inf, o = 0, zero gradients,
never NaN. fp32 inputs use IEEE fp32 dots unless allow_tf32. q head j reads kv head j // (h/hk).

Implementation notes (binding for callers and for kernel_variants()):
  * A group's `tokens` is the token count of its output value and of the shared input value: a q
    group's members have q_tokens == tokens, a kv group's members kv_tokens == tokens.
  * Tables are contiguous; local tensors are contiguous in their last dim (any token and head
    strides). Tables are read on the device only: no launch synchronises with the host.
  * Attention over one q sub-block (BLOCK_M rows) and one kv entry loops over kv sub-blocks
    from the smallest interval start to the largest interval end of its rows. Each kv sub-block
    is classified from the rows' intervals: no row attends to it (skipped, no dot), every row
    attends to all of it (no element mask) or cut (element mask from the intervals).
  * The backward is two launches. The dq kernel's program owns one (q group, q sub-block, q
    head) and loops over the group's kv entries and kv sub-blocks; the dk/dv kernel's program
    owns one (kv group, kv sub-block, kv head) and loops over the group's q entries, their q sub-
    blocks and the q heads of the GQA group. Every output element is written by exactly one
    program, so there are no atomics, the sums run in a fixed order (deterministic), and an
    overwritten output needs no zero-initialisation pass; the price is that s = q.k^T and p are
    computed twice (once per kernel).
  * Blocks: attention sub-blocks on the GPU come from _GPU_TILES per kernel and head-dim class
    (DCP_TRITON_TILES=FILE or set_tiles() replace entries); the copies move BLOCK_T x BLOCK_D tiles
    of one head (BLOCK_D = next power of two >= d, masked, so any d works). Under the interpreter
    (INTERPRET) attention blocks are 16 x 16, 16-bit dot operands are widened to fp32 (the
    interpreter multiplies bf16 bit patterns) and fp32 -> bf16 rounds to nearest even by hand
    (the interpreter truncates); on the GPU the native conversions round to nearest even.
  * Slot offsets read from the tables are declared multiples of the slot alignment (vectorized
    access).
    Counts (tokens, heads, ...) are not specialized by value, so for head dims 64 and 128 and
    16-byte aligned tensors a launch compiles one of kernel_variants(); compile_variant() builds
    any of them ahead of time without a GPU.
"""
from __future__ import annotations

import dataclasses
import os

import torch
import triton
import triton.language as tl

from dcp import _core
from dcp.torch.kernels import _triton_jit as jit

INTERPRET = os.environ.get("TRITON_INTERPRET") == "1"

# The lowering's tables (each one's columns by name: their count is the table's width), the
# numbers of the buffers a kv value can lie in (an entry's kv_buffer) and the slot alignment.
TABLES = _core.LOWERING_SCHEMA["tables"]
BUFFERS = _core.LOWERING_SCHEMA["buffers"]
SLOT_ALIGNMENT = _core.LOWERING_SCHEMA["slot_alignment"]
_MAX_ROWS = 65535  # a launch grid's second and third dimension: longer tables launch in chunks


def table(name: str, rows, device=None) -> torch.Tensor:
    """The lowering's table `name` (a key of TABLES) as an int64 [len(rows), width] tensor on
    `device`, from rows given as dicts of every column's value by name."""
    columns = TABLES[name]
    order = sorted(columns, key=columns.get)
    values = []
    for row in rows:
        if row.keys() != columns.keys():
            raise ValueError(f"a row of {name} has columns {sorted(row)}; the table has "
                             f"{order}")
        values.append([int(row[column]) for column in order])
    return torch.tensor(values, dtype=torch.int64).reshape(-1, len(order)).to(device)



def _chunks(table: torch.Tensor):
    """(rows, count) of each launch of a table: at most _MAX_ROWS rows each."""
    for start in range(0, table.shape[0], _MAX_ROWS):
        chunk = table[start:start + _MAX_ROWS]
        yield chunk, chunk.shape[0]
_STORAGE_DTYPES = (torch.float32, torch.bfloat16, torch.float16)
_TL_DTYPE = {torch.float32: tl.float32, torch.bfloat16: tl.bfloat16, torch.float16: tl.float16}
_SIGNATURE_DTYPE = {torch.float32: "fp32", torch.bfloat16: "bf16", torch.float16: "fp16"}
_ADD_BLOCK = 1024


# --- launch configuration ---------------------------------------------------------------------

def _copy_constexprs(head_dim: int) -> dict:
    """BLOCK_T tokens x BLOCK_D dims per program of the copy, merge and store kernels."""
    block_d = triton.next_power_of_2(head_dim)
    return {"HEAD_DIM": head_dim, "BLOCK_T": max(1, min(64, 4096 // block_d)), "BLOCK_D": block_d}


# The head dims the attention kernels support: beyond 256 their tiles do not fit an SM's shared
# memory (the dk/dv kernel needs 266 KB at d = 512 in fp32).
MAX_HEAD_DIM = 256


# GPU tiles of the attention kernels: (BLOCK_M q rows, BLOCK_N keys, warps, pipeline stages) per
# kernel and per class of head dim and storage ("d64": padded head dim <= 64; "d128": <= 128 in a
# 16-bit dtype; "wide": fp32 beyond 64 or anything beyond 128, whose 64-wide tiles would not fit
# the registers and shared memory).
# The d128 and d64 entries were chosen by bench/gpu_tile_sweep.py on an H200 (docs/gpu_h200/;
# d64's dk/dv tile passed the kernel tests on the GPU before it became the default); the "wide"
# ones are not measured yet.
_GPU_TILES = {
    "forward": {"d64": (64, 64, 4, 2), "d128": (64, 64, 4, 3), "wide": (32, 32, 8, 2)},
    "dq": {"d64": (64, 64, 4, 2), "d128": (64, 64, 4, 2), "wide": (32, 32, 8, 2)},
    "dkv": {"d64": (64, 32, 4, 2), "d128": (64, 32, 4, 2), "wide": (32, 32, 8, 2)},
}
ATTENTION_KERNELS = {"forward": "_attention_forward_kernel", "dq": "_attention_dq_kernel",
                     "dkv": "_attention_dkv_kernel"}
TILES_ENVIRONMENT = "DCP_TRITON_TILES"


def set_tiles(tiles: dict) -> None:
    """Replaces entries of the GPU tile table: {kernel: {class: [BLOCK_M, BLOCK_N, warps,
    stages]}}, kernel one of forward, dq, dkv and class one of d64, d128, wide (the format
    bench/gpu_tile_sweep.py writes). Checks everything before changing anything."""
    if not isinstance(tiles, dict):
        raise ValueError(f"tiles: a table is {{kernel: {{class: [BLOCK_M, BLOCK_N, warps, "
                         f"stages]}}}}; got {type(tiles).__name__}")
    checked = {}
    for kernel, classes in tiles.items():
        if kernel not in _GPU_TILES:
            raise ValueError(f"tiles: kernel {kernel!r} is not one of {', '.join(_GPU_TILES)}")
        if not isinstance(classes, dict):
            raise ValueError(f"tiles: {kernel} maps classes to tiles; got {classes!r}")
        for size, tile in classes.items():
            if size not in _GPU_TILES[kernel]:
                raise ValueError(f"tiles: class {size!r} of {kernel} is not one of "
                                 f"{', '.join(_GPU_TILES[kernel])}")
            valid = (isinstance(tile, (list, tuple)) and len(tile) == 4
                     and all(isinstance(x, int) and not isinstance(x, bool) for x in tile))
            if valid:
                block_m, block_n, warps, stages = tile
                valid = (block_m in (16, 32, 64, 128, 256) and block_n in (16, 32, 64, 128, 256)
                         and warps in (1, 2, 4, 8, 16) and 1 <= stages <= 8)
            if not valid:
                raise ValueError(f"tiles: {kernel}/{size} = {tile!r} is not [BLOCK_M, BLOCK_N, "
                                 "warps, stages] with blocks in 16..256 and warps in 1..16 "
                                 "(powers of two) and stages in 1..8")
            checked[(kernel, size)] = tuple(tile)
    for (kernel, size), tile in checked.items():
        _GPU_TILES[kernel][size] = tile


def _tiles_from_environment() -> None:
    path = os.environ.get(TILES_ENVIRONMENT)
    if not path:
        return
    import json
    try:
        with open(path) as f:
            tiles = json.load(f)
    except (OSError, ValueError) as error:
        raise ValueError(f"{TILES_ENVIRONMENT}={path}: cannot read a tile table: {error}") from None
    try:
        set_tiles(tiles)
    except ValueError as error:
        raise ValueError(f"{TILES_ENVIRONMENT}={path}: {error}") from None


_tiles_from_environment()


def _attention_launch(kernel: str, head_dim: int, dtype: torch.dtype,
                      allow_tf32: bool) -> tuple[dict, dict]:
    """Constexprs and launch options (warps, stages) of one attention kernel ("forward", "dq" or
    "dkv"): 16 x 16 blocks under the interpreter (its cost is per block iteration), else the
    kernel's entry in _GPU_TILES."""
    if dtype not in _TL_DTYPE:
        raise ValueError(f"storage dtype {dtype} is not fp32, bf16 or fp16")
    if not 1 <= head_dim <= MAX_HEAD_DIM:
        raise ValueError(f"head dim {head_dim} is outside the Triton kernels' 1..{MAX_HEAD_DIM}")
    block_d = max(16, triton.next_power_of_2(head_dim))  # tl.dot needs 16 in every dim
    if INTERPRET:
        block_m, block_n, options = 16, 16, {}
    else:
        size = ("d64" if block_d <= 64 else
                "d128" if block_d <= 128 and dtype != torch.float32 else "wide")
        block_m, block_n, warps, stages = _GPU_TILES[kernel][size]
        options = {"num_warps": warps, "num_stages": stages}
    precision = "tf32" if allow_tf32 and dtype == torch.float32 else "ieee"
    constexprs = {"STORAGE": _TL_DTYPE[dtype], "HEAD_DIM": head_dim, "BLOCK_D": block_d,
                  "BLOCK_M": block_m, "BLOCK_N": block_n, "PRECISION": precision,
                  "INTERPRET": INTERPRET}
    return constexprs, options


def _check_arena(arena: torch.Tensor) -> None:
    if arena.dtype != torch.uint8 or arena.dim() != 1:
        raise ValueError(f"the arena is a 1-D uint8 tensor; got {arena.dim()}-D {arena.dtype}")


def _kept_or_arena(kept, arena: torch.Tensor) -> torch.Tensor:
    """The tensor the kernels read kept kv values in (entries whose kv_buffer is "kept"): `kept`,
    or the arena where there is none (or it is empty: no entry reads a kept value then)."""
    _check_arena(arena)
    if kept is None or kept.numel() == 0:
        return arena
    if kept.dtype != torch.uint8 or kept.dim() != 1 or kept.device != arena.device:
        raise ValueError(f"the kept tensor is a 1-D uint8 tensor on {arena.device}; got "
                         f"{kept.dim()}-D {kept.dtype} on {kept.device}")
    return kept


def _check_local(*tensors: torch.Tensor) -> None:
    for tensor in tensors:
        if tensor.dim() != 3 or tensor.stride(2) != 1 or tensor.dtype not in _STORAGE_DTYPES:
            raise ValueError("local tensors are [tokens][heads][head dim], contiguous in the head "
                             f"dim, fp32, bf16 or fp16; got {tuple(tensor.shape)} {tensor.dtype} "
                             f"strides {tensor.stride()}")


def _check_lse(lse: torch.Tensor) -> None:
    if lse.dim() != 2 or lse.stride(1) != 1 or lse.dtype != torch.float32:
        raise ValueError(f"lse is fp32 [heads][tokens], contiguous by token; got "
                         f"{tuple(lse.shape)} {lse.dtype}")


def _check_tables(entries, groups, groups_name, members, mask_rows, mask_intervals) -> None:
    for name, rows in (("entries", entries), (groups_name, groups)):
        columns = len(TABLES[name])
        if rows.dtype != torch.int64 or rows.dim() != 2 or rows.shape[1] != columns \
                or not rows.is_contiguous():
            raise ValueError(f"{name} must be a contiguous int64 [n, {columns}] tensor")
    for name, rows, dtype in (("members", members, torch.int64), ("mask_rows", mask_rows,
                              torch.int32), ("mask_intervals", mask_intervals, torch.int32)):
        if rows.dtype != dtype or rows.dim() != 1 or not rows.is_contiguous():
            raise ValueError(f"{name} must be a contiguous 1-D {dtype} tensor")


# --- launches ---------------------------------------------------------------------------------

def _check_rows(rows: torch.Tensor, name: str, most: int) -> int:
    """The number of rows of a copy, wire or memory table (`name`: copy_rows, wire_rows or
    memory_rows; contiguous int64 [n, its width], on the arena's device); `most` bounds what a
    row holds (a launch's grid) and must not be negative."""
    columns = len(TABLES[name])
    if rows.dtype != torch.int64 or rows.dim() != 2 or rows.shape[1] != columns \
            or not rows.is_contiguous():
        raise ValueError(f"{name} must be a contiguous int64 [n, {columns}] tensor; got "
                         f"{tuple(rows.shape)} {rows.dtype}")
    if most < 0:
        raise ValueError(f"{name}: the largest row's size {most} is negative")
    return rows.shape[0]


def convert_partials(arena, rows, narrow, wire_dtype, max_values):
    """Each row of a wire table, one launch: narrow: the slot's first `elements` fp32 values to
    wire_dtype (bf16 or fp16, nearest even) at the wire offset, then the tail's bytes (an o
    partial's lse) copied after them; else the other way, widening. max_values bounds a row's
    elements + tail_bytes / 2."""
    _check_arena(arena)
    n = _check_rows(rows, "wire_rows", max_values)
    if wire_dtype not in (torch.bfloat16, torch.float16):
        raise ValueError(f"partials travel in bf16 or fp16, not {wire_dtype}")
    if n == 0 or max_values == 0:
        return
    for chunk, n in _chunks(rows):
        jit._convert_kernel[(triton.cdiv(max_values, _ADD_BLOCK), n)](
            arena, chunk, NARROW=bool(narrow), WIRE=_TL_DTYPE[wire_dtype],
            WIDTH=wire_dtype.itemsize, BLOCK=_ADD_BLOCK, INTERPRET=INTERPRET)


def load_q_copies(arena, copies, q, heads, max_tokens, head_scale=1):
    """Each copy (a row of the copy table `copies`; first head = head_block x head_scale): kQ
    slot at slot_off = q[token:token+tokens, head:head+heads, :] as dense [t][h][d]. One launch
    for all rows; rows write distinct slots."""
    _check_arena(arena)
    _check_local(q)
    n = _check_rows(copies, "copy_rows", max_tokens)
    if n == 0 or max_tokens == 0 or heads == 0:
        return
    c = _copy_constexprs(q.shape[2])
    for rows, n in _chunks(copies):
        jit._load_q_kernel[(triton.cdiv(max_tokens, c["BLOCK_T"]), heads, n)](
            arena, rows, q, q.stride(0), q.stride(1), head_scale, heads, **c)


def load_kv_copies(arena, copies, k, v, heads, max_tokens, head_scale=1):
    """Each copy: kKV slot at slot_off = k then v [token:token+tokens, head:head+heads, :]."""
    _check_arena(arena)
    _check_local(k, v)
    if k.stride() != v.stride() or k.dtype != v.dtype:
        raise ValueError("k and v must have the same dtype and strides")
    n = _check_rows(copies, "copy_rows", max_tokens)
    if n == 0 or max_tokens == 0 or heads == 0:
        return
    c = _copy_constexprs(k.shape[2])
    for rows, n in _chunks(copies):
        jit._load_kv_kernel[(triton.cdiv(max_tokens, c["BLOCK_T"]), heads, n)](
            arena, rows, k, v, k.stride(0), k.stride(1), head_scale, heads, **c)


def load_qgrad_copies(arena, copies, q, do, o, lse, heads, max_tokens, head_scale=1):
    """Each copy: kQGrad slot at slot_off: q, do, lse[head:head+heads, token:token+tokens] and
    delta = sum over d of o * do (fp32)."""
    _check_arena(arena)
    _check_local(q, do, o)
    _check_lse(lse)
    if not q.stride() == do.stride() == o.stride() or not q.dtype == do.dtype == o.dtype:
        raise ValueError("q, do and o must have the same dtype and strides")
    n = _check_rows(copies, "copy_rows", max_tokens)
    if n == 0 or max_tokens == 0 or heads == 0:
        return
    c = _copy_constexprs(q.shape[2])
    for rows, n in _chunks(copies):
        jit._load_qgrad_kernel[(triton.cdiv(max_tokens, c["BLOCK_T"]), heads, n)](
            arena, rows, q, do, o, lse, q.stride(0), q.stride(1), lse.stride(0), head_scale,
            heads, **c)


def store_q_copies(arena, copies, out, heads, max_tokens, head_scale=1, lse=None):
    """Each copy: out[token:token+tokens, head:head+heads, :] = the slot's fp32 [t][h][d] in
    out's dtype; with lse (kOut) also lse[head:head+heads, token:token+tokens] = the slot's lse.
    Rows write distinct tokens or heads."""
    _check_arena(arena)
    _check_local(out)
    if lse is not None:
        _check_lse(lse)
    n = _check_rows(copies, "copy_rows", max_tokens)
    if n == 0 or max_tokens == 0 or heads == 0:
        return
    c = _copy_constexprs(out.shape[2])
    for rows, n in _chunks(copies):
        jit._store_q_kernel[(triton.cdiv(max_tokens, c["BLOCK_T"]), heads, n)](
            arena, rows, out, out if lse is None else lse, out.stride(0), out.stride(1),
            0 if lse is None else lse.stride(0), head_scale, heads, HAS_LSE=lse is not None,
            INTERPRET=INTERPRET, **c)


def store_kv_copies(arena, copies, dk, dv, heads, max_tokens, head_scale=1):
    """Each copy: dk, dv[token:token+tokens, head:head+heads, :] = the kDKV slot's fp32 dk, dv."""
    _check_arena(arena)
    _check_local(dk, dv)
    if dk.stride() != dv.stride() or dk.dtype != dv.dtype:
        raise ValueError("dk and dv must have the same dtype and strides")
    n = _check_rows(copies, "copy_rows", max_tokens)
    if n == 0 or max_tokens == 0 or heads == 0:
        return
    c = _copy_constexprs(dk.shape[2])
    for rows, n in _chunks(copies):
        jit._store_kv_kernel[(triton.cdiv(max_tokens, c["BLOCK_T"]), heads, n)](
            arena, rows, dk, dv, dk.stride(0), dk.stride(1), head_scale, heads,
            INTERPRET=INTERPRET, **c)


def merge_rows(arena, rows, heads, head_dim, max_tokens):
    """Each row of a memory table (count: tokens), one launch: kOut at dst_off = log-sum-exp merge
    of the kOut values at dst_off and src_off. Rows are independent (no row reads what another
    writes)."""
    _check_arena(arena)
    n = _check_rows(rows, "memory_rows", max_tokens)
    if n == 0 or max_tokens == 0 or heads == 0:
        return
    c = _copy_constexprs(head_dim)
    for chunk, n in _chunks(rows):
        jit._merge_kernel[(triton.cdiv(max_tokens, c["BLOCK_T"]), heads, n)](arena, chunk, heads,
                                                                            **c)


def add_rows(arena, rows, max_elements):
    """Each row of a memory table (count: fp32 elements), one launch: fp32 dst[i] += src[i]."""
    _check_arena(arena)
    n = _check_rows(rows, "memory_rows", max_elements)
    if n == 0 or max_elements == 0:
        return
    for chunk, n in _chunks(rows):
        jit._add_kernel[(triton.cdiv(max_elements, _ADD_BLOCK), n)](arena, chunk, BLOCK=_ADD_BLOCK)


def _check_heads(heads: int, kv_heads: int) -> None:
    if heads <= 0 or kv_heads <= 0 or heads % kv_heads:
        raise ValueError(f"heads {heads} must be a positive multiple of kv_heads {kv_heads}")


def attention_forward(arena, entries, groups, members, mask_rows, mask_intervals, *, heads,
                      kv_heads, head_dim, dtype, scale, max_tokens, allow_tf32=False, kept=None):
    """Partial o, lse of every group (kOut slots) over its member entries (kv values in the arena
    or, where kv_buffer says so, in the kept tensor `kept`); one launch over (groups x q
    sub-blocks of max_tokens, heads)."""
    kept = _kept_or_arena(kept, arena)
    _check_tables(entries, groups, "q_groups", members, mask_rows, mask_intervals)
    _check_heads(heads, kv_heads)
    if groups.shape[0] == 0 or max_tokens == 0:
        return
    c, options = _attention_launch("forward", head_dim, dtype, allow_tf32)
    blocks = triton.cdiv(max_tokens, c["BLOCK_M"])
    jit._attention_forward_kernel[(groups.shape[0] * blocks, heads)](
        arena, kept, entries, groups, members, mask_rows, mask_intervals, float(scale), heads,
        kv_heads, blocks, **c, **options)


def attention_backward(arena, entries, q_groups, kv_groups, members, mask_rows, mask_intervals, *,
                       heads, kv_heads, head_dim, dtype, scale, max_q_tokens, max_kv_tokens,
                       allow_tf32=False, kept=None):
    """dq of every q group (kDQ slots) and dk, dv of every kv group (kDKV slots) from kQGrad and
    kKV inputs (kv in the arena or, where kv_buffer says so, in the kept tensor `kept`): two
    launches, the dq
    kernel over (q groups x q sub-blocks, heads) and the dk/dv kernel over (kv groups x kv
    sub-blocks, kv heads)."""
    kept = _kept_or_arena(kept, arena)
    _check_tables(entries, q_groups, "q_groups", members, mask_rows, mask_intervals)
    _check_tables(entries, kv_groups, "kv_groups", members, mask_rows, mask_intervals)
    _check_heads(heads, kv_heads)
    if q_groups.shape[0] and max_q_tokens:
        c, options = _attention_launch("dq", head_dim, dtype, allow_tf32)
        blocks = triton.cdiv(max_q_tokens, c["BLOCK_M"])
        jit._attention_dq_kernel[(q_groups.shape[0] * blocks, heads)](
            arena, kept, entries, q_groups, members, mask_rows, mask_intervals, float(scale),
            heads, kv_heads, blocks, **c, **options)
    if kv_groups.shape[0] and max_kv_tokens:
        c, options = _attention_launch("dkv", head_dim, dtype, allow_tf32)
        blocks = triton.cdiv(max_kv_tokens, c["BLOCK_N"])
        jit._attention_dkv_kernel[(kv_groups.shape[0] * blocks, kv_heads)](
            arena, kept, entries, kv_groups, members, mask_rows, mask_intervals, float(scale),
            heads, kv_heads, blocks, **c, **options)


# --- ahead-of-time compilation ----------------------------------------------------------------

# Types of each kernel's runtime arguments, in order ("{s}": the storage dtype; "{lse}": fp32, or
# the storage dtype where store_q passes `out` in place of an absent lse). Integers are i32: the
# launcher specializes any integer below 2**31 that way.
_RUNTIME_TYPES = {
    "_load_q_kernel": "*u8 *i64 *{s} i32 i32 i32 i32",
    "_load_kv_kernel": "*u8 *i64 *{s} *{s} i32 i32 i32 i32",
    "_load_qgrad_kernel": "*u8 *i64 *{s} *{s} *{s} *fp32 i32 i32 i32 i32 i32",
    "_store_q_kernel": "*u8 *i64 *{s} *{lse} i32 i32 i32 i32 i32",
    "_store_kv_kernel": "*u8 *i64 *{s} *{s} i32 i32 i32 i32",
    "_merge_kernel": "*u8 *i64 i32",
    "_add_kernel": "*u8 *i64",
    "_convert_kernel": "*u8 *i64",
    "_attention_forward_kernel": "*u8 *u8 *i64 *i64 *i64 *i32 *i32 fp32 i32 i32 i32",
    "_attention_dq_kernel": "*u8 *u8 *i64 *i64 *i64 *i32 *i32 fp32 i32 i32 i32",
    "_attention_dkv_kernel": "*u8 *u8 *i64 *i64 *i64 *i32 *i32 fp32 i32 i32 i32",
}

# Integer arguments the launcher sees as multiples of 16 (it then specializes them as such, which
# lets the copies vectorize): slot offsets (multiples of the slot alignment, 64) and the token and
# head strides of local tensors (multiples of the head dim).
_ALIGNED_INTEGERS = {"slot_off", "dst_off", "src_off", "token_stride", "head_stride",
                     "src_token_stride", "src_head_stride"}


@dataclasses.dataclass(frozen=True)
class KernelVariant:
    """One compilation the launchers can ask for: the kernel, its constexprs, the storage dtype
    of its pointers and its launch options."""
    kernel: str
    dtype: torch.dtype
    constexprs: tuple  # (name, value) pairs
    options: tuple = ()  # (name, value) pairs: num_warps, num_stages

    def __str__(self) -> str:
        shown = ",".join(f"{k}={v}" for k, v in self.constexprs if k != "INTERPRET")
        return f"{self.kernel}[{_SIGNATURE_DTYPE[self.dtype]};{shown}]"


def kernel_variants() -> list[KernelVariant]:
    """Every variant the launchers compile for storage dtypes fp32, bf16, fp16 and head dims 64
    and 128. accumulate is a runtime value of the group tables; allow_tf32 only matters for fp32."""
    variants = []

    def add_variant(kernel, dtype, constexprs, options=None):
        variants.append(KernelVariant(kernel, dtype, tuple(constexprs.items()),
                                      tuple((options or {}).items())))

    for head_dim in (64, 128):
        copy = _copy_constexprs(head_dim)
        for dtype in _STORAGE_DTYPES:
            add_variant("_load_q_kernel", dtype, copy)
            add_variant("_load_kv_kernel", dtype, copy)
            add_variant("_load_qgrad_kernel", dtype, copy)
            for has_lse in (False, True):
                add_variant("_store_q_kernel", dtype,
                            {"HAS_LSE": has_lse, **copy, "INTERPRET": INTERPRET})
            add_variant("_store_kv_kernel", dtype, {**copy, "INTERPRET": INTERPRET})
            for allow_tf32 in ((False, True) if dtype == torch.float32 else (False,)):
                for kind, kernel in ATTENTION_KERNELS.items():
                    add_variant(kernel, dtype, *_attention_launch(kind, head_dim, dtype,
                                                                  allow_tf32))
        add_variant("_merge_kernel", torch.float32, copy)
    add_variant("_add_kernel", torch.float32, {"BLOCK": _ADD_BLOCK})
    for wire in (torch.bfloat16, torch.float16):
        for narrow in (True, False):
            add_variant("_convert_kernel", wire,
                        {"NARROW": narrow, "WIRE": _TL_DTYPE[wire], "WIDTH": wire.itemsize,
                         "BLOCK": _ADD_BLOCK, "INTERPRET": INTERPRET})
    return variants


def compile_variant(variant: KernelVariant, arch: int):
    """Compiles `variant` for NVIDIA sm_`arch` (80 or 90) without a GPU; returns triton's
    CompiledKernel (asm["ptx"], asm["cubin"], metadata.shared). Needs TRITON_INTERPRET unset when
    this module was imported."""
    if INTERPRET:
        raise RuntimeError("compile_variant needs a process without TRITON_INTERPRET=1")
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource

    kernel = getattr(jit, variant.kernel)
    constexprs = dict(variant.constexprs)
    storage = _SIGNATURE_DTYPE[variant.dtype]
    lse = "fp32" if constexprs.get("HAS_LSE", True) else storage
    types = iter(_RUNTIME_TYPES[variant.kernel].format(s=storage, lse=lse).split())
    signature = {name: "constexpr" if name in constexprs else next(types)
                 for name in kernel.arg_names}
    aligned = {(i,): [["tt.divisibility", 16]] for i, (name, kind) in enumerate(signature.items())
               if kind.startswith("*") or name in _ALIGNED_INTEGERS}
    source = ASTSource(kernel, signature, constexprs, aligned)
    return triton.compile(source, target=GPUTarget("cuda", arch, 32), options=dict(variant.options))
