# SPDX-License-Identifier: Apache-2.0
"""Triton kernels of the GPU path: one launch per Program instruction.

Every function works on one pass's buffer table (the *arena*: a 1-D uint8 tensor) and on the
local tensors of the pass, all on one device (CUDA, or CPU under TRITON_INTERPRET=1). Slot
offsets are byte offsets into the arena, multiples of 64.

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

Attention tables (int64 tensors, built by the C++ lowering, dcp/runtime/lowering.h):
  entries [E, 8]  q_off, kv_off, q_tokens, kv_tokens, mask, q_group, kv_group, 0
                  q_off: the kQ (forward) or kQGrad (backward) slot; kv_off: the kKV slot;
                  mask: -1 for a full tile, else the row start s in mask_rows: row r attends to
                  keys [intervals[2i], intervals[2i+1]) for i in [mask_rows[s+r], mask_rows[s+r+1])
                  (sorted, disjoint, non-empty, inside [0, kv_tokens)); a row may have none.
                  q_group, kv_group: the groups the entry contributes to (-1: none); the kernels
                  do not read them (the groups list their members).
  groups  [G, 6]  out_off, tokens, accumulate, member_begin, member_end, input_off
                  one output value and the entries (members[member_begin:member_end]) that
                  contribute to it; accumulate: add to (merge into) what the output holds, else
                  overwrite it. All members of a q group share one q value; of a kv group one kv
                  (input_off; the kernels take it from the first member).
  members [M]     entry indices
  mask_rows int32, mask_intervals int32 (pairs)

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
  * Blocks: attention sub-blocks are 64 x 64 on the GPU (32 x 32 for fp32 storage with d > 64
    and for d > 128), 4 warps for d <= 64 else 8; the copies move BLOCK_T x BLOCK_D tiles of one
    head (BLOCK_D = next power of two >= d, masked, so any d works). Under the interpreter
    (INTERPRET) attention blocks are 16 x 16, 16-bit dot operands are widened to fp32 (the
    interpreter multiplies bf16 bit patterns) and fp32 -> bf16 rounds to nearest even by hand
    (the interpreter truncates); on the GPU the native conversions round to nearest even.
  * Slot offsets read from the tables are declared multiples of 64 bytes (vectorized access).
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

INTERPRET = os.environ.get("TRITON_INTERPRET") == "1"

_LOG2E = tl.constexpr(1.4426950408889634)
_LN2 = tl.constexpr(0.6931471805599453)
_ENTRY_COLUMNS = 8
_GROUP_COLUMNS = 6
_STORAGE_DTYPES = (torch.float32, torch.bfloat16, torch.float16)
_TL_DTYPE = {torch.float32: tl.float32, torch.bfloat16: tl.bfloat16, torch.float16: tl.float16}
_SIGNATURE_DTYPE = {torch.float32: "fp32", torch.bfloat16: "bf16", torch.float16: "fp16"}
_ADD_BLOCK = 1024


# --- device helpers ---------------------------------------------------------------------------

@triton.jit
def _typed(arena, byte_off, DTYPE: tl.constexpr):
    """The arena address `byte_off` as a pointer to DTYPE."""
    return (arena + byte_off).to(tl.pointer_type(DTYPE))


@triton.jit
def _grad_stats(q_slot, value):
    """fp32 pointer to lse [h][t] (delta follows) of the kQGrad value whose q (`value`
    elements) starts at q_slot."""
    return (q_slot + 2 * value).to(tl.pointer_type(tl.float32))


@triton.jit
def _slot_offset(table_ptr):
    """A slot offset read from a table: a multiple of 64 bytes, which lets loads vectorize."""
    return tl.multiple_of(tl.load(table_ptr), 64)


@triton.jit
def _round(x, DTYPE: tl.constexpr, INTERPRET: tl.constexpr):
    """x (fp32) converted to DTYPE, rounding to nearest even."""
    if INTERPRET:
        if DTYPE == tl.bfloat16:
            bits = x.to(tl.uint32, bitcast=True)
            bits += 0x7FFF + ((bits >> 16) & 1)
            y = (bits >> 16).to(tl.uint16).to(tl.bfloat16, bitcast=True)
        else:
            y = x.to(DTYPE)
    else:
        y = x.to(DTYPE)
    return y


@triton.jit
def _dot(a, b, PRECISION: tl.constexpr, INTERPRET: tl.constexpr):
    """a @ b accumulated in fp32."""
    if INTERPRET:
        c = tl.dot(a.to(tl.float32), b.to(tl.float32), input_precision="ieee")
    else:
        c = tl.dot(a, b, input_precision=PRECISION)
    return c


@triton.jit
def _merge_partials(o_a, lse_a, o_b, lse_b):
    """Log-sum-exp merge of two partial outputs over disjoint keys; -inf with -inf gives o = 0."""
    top = tl.maximum(lse_a, lse_b)
    top = tl.where(top == float("-inf"), 0.0, top)
    w_a = tl.exp(lse_a - top)
    w_b = tl.exp(lse_b - top)
    total = w_a + w_b
    has = total > 0
    lse = tl.where(has, top + tl.log(tl.where(has, total, 1.0)), float("-inf"))
    o = (w_a[:, None] * o_a + w_b[:, None] * o_b) / tl.where(has, total, 1.0)[:, None]
    return o, lse


@triton.jit
def _row_intervals(mask_rows, mask_start, rows, tokens):
    """Index of the first interval and interval count of each row (0 for a full tile or a row
    outside the value's `tokens`)."""
    live = rows < tl.where(mask_start >= 0, tokens, 0)
    first = tl.load(mask_rows + mask_start + rows, mask=live, other=0)
    end = tl.load(mask_rows + mask_start + rows + 1, mask=live, other=0)
    return first, end - first


@triton.jit
def _key_range(mask_intervals, first, count, mask_start, kv_tokens):
    """[lo, hi): the keys some row attends to (all keys for a full tile)."""
    has = count > 0
    starts = tl.load(mask_intervals + 2 * first, mask=has, other=2147483647)
    ends = tl.load(mask_intervals + 2 * (first + count) - 1, mask=has, other=0)
    lo = tl.where(mask_start >= 0, tl.min(starts), 0)
    hi = tl.where(mask_start >= 0, tl.max(ends), kv_tokens)
    return lo, hi


@triton.jit
def _block_kind(mask_intervals, first, count, max_count, mask_start, row_valid, n0, kv_tokens,
                BLOCK_N: tl.constexpr):
    """How the rows see keys [n0, n0 + BLOCK_N): 0 no row attends to any (skip), 1 every valid
    row attends to all of them and they are inside the value (no element mask), 2 cut."""
    n1 = n0 + BLOCK_N
    hit = count < 0
    full = count < 0
    for i in range(0, max_count):
        live = i < count
        begin = tl.load(mask_intervals + 2 * (first + i), mask=live, other=0)
        end = tl.load(mask_intervals + 2 * (first + i) + 1, mask=live, other=0)
        hit |= live & (begin < n1) & (end > n0)
        full |= live & (begin <= n0) & (end >= n1)
    any_hit = tl.max(hit.to(tl.int32)) > 0
    all_full = tl.min((full | ~row_valid).to(tl.int32)) > 0
    masked_kind = tl.where(any_hit, tl.where(all_full, 1, 2), 0)
    return tl.where(mask_start >= 0, masked_kind, tl.where(n1 <= kv_tokens, 1, 2))


@triton.jit
def _element_mask(mask_intervals, first, count, max_count, mask_start, cols, kv_tokens):
    """[rows, cols] True where the row attends to the key."""
    allowed = (count[:, None] >= 0) & (cols[None, :] < tl.where(mask_start < 0, kv_tokens, 0))
    for i in range(0, max_count):
        live = i < count
        begin = tl.load(mask_intervals + 2 * (first + i), mask=live, other=0)
        end = tl.load(mask_intervals + 2 * (first + i) + 1, mask=live, other=0)
        inside = (cols[None, :] >= begin[:, None]) & (cols[None, :] < end[:, None])
        allowed |= live[:, None] & inside
    return allowed


# --- copies, merges and sums ------------------------------------------------------------------

# Counts that may be 1 are not specialized (triton would compile a variant per count equal to 1):
# every launch then uses one of kernel_variants().
_COPY_COUNTS = ["token", "tokens", "head", "heads"]
_ATTENTION_COUNTS = ["heads", "kv_heads", "blocks_per_group"]


@triton.jit(do_not_specialize=_COPY_COUNTS)
def _load_q_kernel(arena, slot_off, src, src_token_stride, src_head_stride, token, tokens, head,
                   heads, HEAD_DIM: tl.constexpr, BLOCK_T: tl.constexpr, BLOCK_D: tl.constexpr):
    """slot [tokens][heads][d] = src[token + t, head + h, :] (storage dtype, no conversion)."""
    h = tl.program_id(1)
    t = tl.program_id(0) * BLOCK_T + tl.arange(0, BLOCK_T)
    c = tl.arange(0, BLOCK_D)
    inside = (t < tokens)[:, None] & (c < HEAD_DIM)[None, :]
    rows = (token + t).to(tl.int64)
    x = tl.load(src + rows[:, None] * src_token_stride + (head + h) * src_head_stride + c[None, :],
                mask=inside)
    dst = _typed(arena, slot_off, src.dtype.element_ty)
    tl.store(dst + (t[:, None] * heads + h) * HEAD_DIM + c[None, :], x, mask=inside)


@triton.jit(do_not_specialize=_COPY_COUNTS)
def _load_kv_kernel(arena, slot_off, k, v, token_stride, head_stride, token, tokens, head, heads,
                    HEAD_DIM: tl.constexpr, BLOCK_T: tl.constexpr, BLOCK_D: tl.constexpr):
    """kKV slot: k then v [tokens][heads][d] from k, v[token + t, head + h, :]."""
    h = tl.program_id(1)
    t = tl.program_id(0) * BLOCK_T + tl.arange(0, BLOCK_T)
    c = tl.arange(0, BLOCK_D)
    inside = (t < tokens)[:, None] & (c < HEAD_DIM)[None, :]
    src = (token + t).to(tl.int64)[:, None] * token_stride + (head + h) * head_stride + c[None, :]
    dst = (_typed(arena, slot_off, k.dtype.element_ty) + (t[:, None] * heads + h) * HEAD_DIM
           + c[None, :])
    tl.store(dst, tl.load(k + src, mask=inside), mask=inside)
    tl.store(dst + tokens * heads * HEAD_DIM, tl.load(v + src, mask=inside), mask=inside)


@triton.jit(do_not_specialize=_COPY_COUNTS + ["lse_stride"])
def _load_qgrad_kernel(arena, slot_off, q, do, o, lse, token_stride, head_stride, lse_stride, token,
                       tokens, head, heads, HEAD_DIM: tl.constexpr, BLOCK_T: tl.constexpr,
                       BLOCK_D: tl.constexpr):
    """kQGrad slot: q, do copied; lse gathered; delta[h][t] = sum_d o * do in fp32."""
    h = tl.program_id(1)
    t = tl.program_id(0) * BLOCK_T + tl.arange(0, BLOCK_T)
    c = tl.arange(0, BLOCK_D)
    valid = t < tokens
    inside = valid[:, None] & (c < HEAD_DIM)[None, :]
    rows = (token + t).to(tl.int64)
    src = rows[:, None] * token_stride + (head + h) * head_stride + c[None, :]
    q_tile = tl.load(q + src, mask=inside)
    do_tile = tl.load(do + src, mask=inside)
    o_tile = tl.load(o + src, mask=inside)
    value = tokens * heads * HEAD_DIM
    slot = _typed(arena, slot_off, q.dtype.element_ty)
    dst = slot + (t[:, None] * heads + h) * HEAD_DIM + c[None, :]
    tl.store(dst, q_tile, mask=inside)
    tl.store(dst + value, do_tile, mask=inside)
    stats = _grad_stats(slot, value) + h * tokens + t
    row_lse = tl.load(lse + (head + h) * lse_stride + token + t, mask=valid)
    tl.store(stats, row_lse, mask=valid)
    delta = tl.sum(o_tile.to(tl.float32) * do_tile.to(tl.float32), axis=1)
    tl.store(stats + heads * tokens, delta, mask=valid)


@triton.jit(do_not_specialize=_COPY_COUNTS + ["lse_stride"])
def _store_q_kernel(arena, slot_off, out, lse, token_stride, head_stride, lse_stride, token, tokens,
                    head, heads, HAS_LSE: tl.constexpr, HEAD_DIM: tl.constexpr,
                    BLOCK_T: tl.constexpr, BLOCK_D: tl.constexpr, INTERPRET: tl.constexpr):
    """out[token + t, head + h, :] = slot fp32 [t][h][d] rounded to out's dtype; with HAS_LSE
    also lse[head + h, token + t] = the kOut slot's lse."""
    h = tl.program_id(1)
    t = tl.program_id(0) * BLOCK_T + tl.arange(0, BLOCK_T)
    c = tl.arange(0, BLOCK_D)
    valid = t < tokens
    inside = valid[:, None] & (c < HEAD_DIM)[None, :]
    src = _typed(arena, slot_off, tl.float32)
    x = tl.load(src + (t[:, None] * heads + h) * HEAD_DIM + c[None, :], mask=inside)
    rows = (token + t).to(tl.int64)
    tl.store(out + rows[:, None] * token_stride + (head + h) * head_stride + c[None, :],
             _round(x, out.dtype.element_ty, INTERPRET), mask=inside)
    if HAS_LSE:
        row_lse = tl.load(src + tokens * heads * HEAD_DIM + h * tokens + t, mask=valid)
        tl.store(lse + (head + h) * lse_stride + token + t, row_lse, mask=valid)


@triton.jit(do_not_specialize=_COPY_COUNTS)
def _store_kv_kernel(arena, slot_off, dk, dv, token_stride, head_stride, token, tokens, head, heads,
                     HEAD_DIM: tl.constexpr, BLOCK_T: tl.constexpr, BLOCK_D: tl.constexpr,
                     INTERPRET: tl.constexpr):
    """dk, dv[token + t, head + h, :] = the kDKV slot's fp32 dk, dv rounded to storage."""
    h = tl.program_id(1)
    t = tl.program_id(0) * BLOCK_T + tl.arange(0, BLOCK_T)
    c = tl.arange(0, BLOCK_D)
    inside = (t < tokens)[:, None] & (c < HEAD_DIM)[None, :]
    src = _typed(arena, slot_off, tl.float32) + (t[:, None] * heads + h) * HEAD_DIM + c[None, :]
    dst = (token + t).to(tl.int64)[:, None] * token_stride + (head + h) * head_stride + c[None, :]
    dtype = dk.dtype.element_ty
    tl.store(dk + dst, _round(tl.load(src, mask=inside), dtype, INTERPRET), mask=inside)
    dv_src = src + tokens * heads * HEAD_DIM
    tl.store(dv + dst, _round(tl.load(dv_src, mask=inside), dtype, INTERPRET), mask=inside)


@triton.jit(do_not_specialize=["tokens", "heads"])
def _merge_kernel(arena, dst_off, src_off, tokens, heads, HEAD_DIM: tl.constexpr,
                  BLOCK_T: tl.constexpr, BLOCK_D: tl.constexpr):
    """kOut dst = log-sum-exp merge of kOut dst and kOut src, in place."""
    h = tl.program_id(1)
    t = tl.program_id(0) * BLOCK_T + tl.arange(0, BLOCK_T)
    c = tl.arange(0, BLOCK_D)
    valid = t < tokens
    inside = valid[:, None] & (c < HEAD_DIM)[None, :]
    o_at = (t[:, None] * heads + h) * HEAD_DIM + c[None, :]
    lse_at = tokens * heads * HEAD_DIM + h * tokens + t
    dst = _typed(arena, dst_off, tl.float32)
    src = _typed(arena, src_off, tl.float32)
    o, lse = _merge_partials(tl.load(dst + o_at, mask=inside), tl.load(dst + lse_at, mask=valid),
                             tl.load(src + o_at, mask=inside), tl.load(src + lse_at, mask=valid))
    tl.store(dst + o_at, o, mask=inside)
    tl.store(dst + lse_at, lse, mask=valid)


@triton.jit(do_not_specialize=["elements"])
def _add_kernel(arena, dst_off, src_off, elements, BLOCK: tl.constexpr):
    """fp32 dst[i] += src[i]."""
    i = tl.program_id(0).to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
    inside = i < elements
    dst = _typed(arena, dst_off, tl.float32)
    src = _typed(arena, src_off, tl.float32)
    tl.store(dst + i, tl.load(dst + i, mask=inside) + tl.load(src + i, mask=inside), mask=inside)


# --- attention --------------------------------------------------------------------------------

@triton.jit(do_not_specialize=_ATTENTION_COUNTS)
def _attention_forward_kernel(arena, entries, groups, members, mask_rows, mask_intervals, scale,
                              heads, kv_heads, blocks_per_group, STORAGE: tl.constexpr,
                              HEAD_DIM: tl.constexpr, BLOCK_D: tl.constexpr,
                              BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
                              PRECISION: tl.constexpr, INTERPRET: tl.constexpr):
    """One (group, q sub-block, q head): online softmax over the keys of all the group's
    entries, then written to (or log-sum-exp merged into) the group's kOut slot."""
    head = tl.program_id(1)
    group = groups + (tl.program_id(0) // blocks_per_group) * 6
    start_m = (tl.program_id(0) % blocks_per_group) * BLOCK_M
    out_off = _slot_offset(group)
    tokens = tl.load(group + 1).to(tl.int32)
    accumulate = tl.load(group + 2)
    member_begin = tl.load(group + 3)
    member_end = tl.load(group + 4)
    if start_m < tokens:
        rows = start_m + tl.arange(0, BLOCK_M)
        row_valid = rows < tokens
        dims = tl.arange(0, BLOCK_D)
        dim_valid = dims < HEAD_DIM
        kv_head = head // (heads // kv_heads)
        scale_log2 = scale * _LOG2E
        q = tl.zeros([BLOCK_M, BLOCK_D], STORAGE)
        if member_begin < member_end:  # all members share the q value
            q_off = _slot_offset(entries + tl.load(members + member_begin) * 8)
            q_slot = _typed(arena, q_off, STORAGE)
            q = tl.load(q_slot + (rows[:, None] * heads + head) * HEAD_DIM + dims[None, :],
                        mask=row_valid[:, None] & dim_valid[None, :], other=0.0)
        m_i = tl.full([BLOCK_M], float("-inf"), tl.float32)
        l_i = tl.zeros([BLOCK_M], tl.float32)
        acc = tl.zeros([BLOCK_M, BLOCK_D], tl.float32)
        for member in range(member_begin, member_end):
            entry = entries + tl.load(members + member) * 8
            kv_tokens = tl.load(entry + 3).to(tl.int32)
            mask_start = tl.load(entry + 4)
            k_slot = _typed(arena, _slot_offset(entry + 1), STORAGE)
            v_slot = k_slot + kv_tokens * kv_heads * HEAD_DIM
            first, count = _row_intervals(mask_rows, mask_start, rows, tokens)
            max_count = tl.max(count)
            lo, hi = _key_range(mask_intervals, first, count, mask_start, kv_tokens)
            for n0 in range(lo, hi, BLOCK_N):
                kind = _block_kind(mask_intervals, first, count, max_count, mask_start, row_valid,
                                   n0, kv_tokens, BLOCK_N)
                if kind != 0:
                    cols = n0 + tl.arange(0, BLOCK_N)
                    kv_at = (cols[:, None] * kv_heads + kv_head) * HEAD_DIM + dims[None, :]
                    kv_inside = (cols < kv_tokens)[:, None] & dim_valid[None, :]
                    k = tl.load(k_slot + kv_at, mask=kv_inside, other=0.0)
                    s = _dot(q, tl.trans(k), PRECISION, INTERPRET) * scale_log2
                    if kind == 2:
                        allowed = _element_mask(mask_intervals, first, count, max_count,
                                                mask_start, cols, kv_tokens)
                        s = tl.where(allowed, s, float("-inf"))
                    m_new = tl.maximum(m_i, tl.max(s, axis=1))
                    m_safe = tl.where(m_new == float("-inf"), 0.0, m_new)
                    p = tl.exp2(s - m_safe[:, None])
                    alpha = tl.exp2(m_i - m_safe)
                    l_i = l_i * alpha + tl.sum(p, axis=1)
                    v = tl.load(v_slot + kv_at, mask=kv_inside, other=0.0)
                    acc = acc * alpha[:, None] + _dot(_round(p, STORAGE, INTERPRET), v, PRECISION,
                                                      INTERPRET)
                    m_i = m_new
        has = l_i > 0
        o = acc / tl.where(has, l_i, 1.0)[:, None]
        lse = tl.where(has, (m_i + tl.log2(tl.where(has, l_i, 1.0))) * _LN2,
                       float("-inf"))
        out = _typed(arena, out_off, tl.float32)
        o_at = (rows[:, None] * heads + head) * HEAD_DIM + dims[None, :]
        o_inside = row_valid[:, None] & dim_valid[None, :]
        lse_at = tokens * heads * HEAD_DIM + head * tokens + rows
        if accumulate != 0:
            o, lse = _merge_partials(tl.load(out + o_at, mask=o_inside, other=0.0),
                                     tl.load(out + lse_at, mask=row_valid, other=float("-inf")),
                                     o, lse)
        tl.store(out + o_at, o, mask=o_inside)
        tl.store(out + lse_at, lse, mask=row_valid)


@triton.jit(do_not_specialize=_ATTENTION_COUNTS)
def _attention_dq_kernel(arena, entries, groups, members, mask_rows, mask_intervals, scale, heads,
                         kv_heads, blocks_per_group, STORAGE: tl.constexpr,
                         HEAD_DIM: tl.constexpr, BLOCK_D: tl.constexpr, BLOCK_M: tl.constexpr,
                         BLOCK_N: tl.constexpr, PRECISION: tl.constexpr,
                         INTERPRET: tl.constexpr):
    """One (q group, q sub-block, q head): dq = scale * sum over the group's entries and their
    keys of ds.k, written to (or added to) the group's kDQ slot."""
    head = tl.program_id(1)
    group = groups + (tl.program_id(0) // blocks_per_group) * 6
    start_m = (tl.program_id(0) % blocks_per_group) * BLOCK_M
    out_off = _slot_offset(group)
    tokens = tl.load(group + 1).to(tl.int32)
    accumulate = tl.load(group + 2)
    member_begin = tl.load(group + 3)
    member_end = tl.load(group + 4)
    if start_m < tokens:
        rows = start_m + tl.arange(0, BLOCK_M)
        row_valid = rows < tokens
        dims = tl.arange(0, BLOCK_D)
        dim_valid = dims < HEAD_DIM
        kv_head = head // (heads // kv_heads)
        scale_log2 = scale * _LOG2E
        q_at = (rows[:, None] * heads + head) * HEAD_DIM + dims[None, :]
        q_inside = row_valid[:, None] & dim_valid[None, :]
        q = tl.zeros([BLOCK_M, BLOCK_D], STORAGE)
        do = tl.zeros([BLOCK_M, BLOCK_D], STORAGE)
        lse_log2 = tl.full([BLOCK_M], float("inf"), tl.float32)
        delta = tl.zeros([BLOCK_M], tl.float32)
        if member_begin < member_end:  # all members share the kQGrad value
            q_slot = _typed(arena, _slot_offset(entries + tl.load(members + member_begin) * 8),
                            STORAGE)
            value = tokens * heads * HEAD_DIM
            stats = _grad_stats(q_slot, value)
            q = tl.load(q_slot + q_at, mask=q_inside, other=0.0)
            do = tl.load(q_slot + value + q_at, mask=q_inside, other=0.0)
            lse = tl.load(stats + head * tokens + rows, mask=row_valid, other=float("-inf"))
            lse_log2 = tl.where(lse == float("-inf"), float("inf"), lse * _LOG2E)
            delta = tl.load(stats + (heads + head) * tokens + rows, mask=row_valid, other=0.0)
        dq = tl.zeros([BLOCK_M, BLOCK_D], tl.float32)
        for member in range(member_begin, member_end):
            entry = entries + tl.load(members + member) * 8
            kv_tokens = tl.load(entry + 3).to(tl.int32)
            mask_start = tl.load(entry + 4)
            k_slot = _typed(arena, _slot_offset(entry + 1), STORAGE)
            v_slot = k_slot + kv_tokens * kv_heads * HEAD_DIM
            first, count = _row_intervals(mask_rows, mask_start, rows, tokens)
            max_count = tl.max(count)
            lo, hi = _key_range(mask_intervals, first, count, mask_start, kv_tokens)
            for n0 in range(lo, hi, BLOCK_N):
                kind = _block_kind(mask_intervals, first, count, max_count, mask_start, row_valid,
                                   n0, kv_tokens, BLOCK_N)
                if kind != 0:
                    cols = n0 + tl.arange(0, BLOCK_N)
                    kv_at = (cols[:, None] * kv_heads + kv_head) * HEAD_DIM + dims[None, :]
                    kv_inside = (cols < kv_tokens)[:, None] & dim_valid[None, :]
                    k = tl.load(k_slot + kv_at, mask=kv_inside, other=0.0)
                    v = tl.load(v_slot + kv_at, mask=kv_inside, other=0.0)
                    s = _dot(q, tl.trans(k), PRECISION, INTERPRET) * scale_log2
                    if kind == 2:
                        allowed = _element_mask(mask_intervals, first, count, max_count,
                                                mask_start, cols, kv_tokens)
                        s = tl.where(allowed, s, float("-inf"))
                    p = tl.exp2(s - lse_log2[:, None])
                    dp = _dot(do, tl.trans(v), PRECISION, INTERPRET)
                    ds = p * (dp - delta[:, None])
                    dq += _dot(_round(ds, STORAGE, INTERPRET), k, PRECISION, INTERPRET)
        dq *= scale
        out = _typed(arena, out_off, tl.float32) + q_at
        out_inside = row_valid[:, None] & dim_valid[None, :]
        if accumulate != 0:
            dq += tl.load(out, mask=out_inside, other=0.0)
        tl.store(out, dq, mask=out_inside)


@triton.jit(do_not_specialize=_ATTENTION_COUNTS)
def _attention_dkv_kernel(arena, entries, groups, members, mask_rows, mask_intervals, scale, heads,
                          kv_heads, blocks_per_group, STORAGE: tl.constexpr,
                          HEAD_DIM: tl.constexpr, BLOCK_D: tl.constexpr, BLOCK_M: tl.constexpr,
                          BLOCK_N: tl.constexpr, PRECISION: tl.constexpr,
                          INTERPRET: tl.constexpr):
    """One (kv group, kv sub-block, kv head): dk = scale * sum of ds^T.q and dv = sum of p^T.do
    over the group's entries, their q sub-blocks and the q heads reading this kv head, written to
    (or added to) the group's kDKV slot."""
    kv_head = tl.program_id(1)
    group = groups + (tl.program_id(0) // blocks_per_group) * 6
    start_n = (tl.program_id(0) % blocks_per_group) * BLOCK_N
    out_off = _slot_offset(group)
    kv_tokens = tl.load(group + 1).to(tl.int32)
    accumulate = tl.load(group + 2)
    member_begin = tl.load(group + 3)
    member_end = tl.load(group + 4)
    if start_n < kv_tokens:
        cols = start_n + tl.arange(0, BLOCK_N)
        dims = tl.arange(0, BLOCK_D)
        dim_valid = dims < HEAD_DIM
        kv_inside = (cols < kv_tokens)[:, None] & dim_valid[None, :]
        group_size = heads // kv_heads
        scale_log2 = scale * _LOG2E
        kv_at = (cols[:, None] * kv_heads + kv_head) * HEAD_DIM + dims[None, :]
        k = tl.zeros([BLOCK_N, BLOCK_D], STORAGE)
        v = tl.zeros([BLOCK_N, BLOCK_D], STORAGE)
        if member_begin < member_end:  # all members share the kKV value
            k_slot = _typed(arena, _slot_offset(entries + tl.load(members + member_begin) * 8 + 1),
                            STORAGE)
            k = tl.load(k_slot + kv_at, mask=kv_inside, other=0.0)
            v = tl.load(k_slot + kv_tokens * kv_heads * HEAD_DIM + kv_at, mask=kv_inside,
                        other=0.0)
        dk = tl.zeros([BLOCK_N, BLOCK_D], tl.float32)
        dv = tl.zeros([BLOCK_N, BLOCK_D], tl.float32)
        for member in range(member_begin, member_end):
            entry = entries + tl.load(members + member) * 8
            q_slot = _typed(arena, _slot_offset(entry), STORAGE)
            q_tokens = tl.load(entry + 2).to(tl.int32)
            mask_start = tl.load(entry + 4)
            value = q_tokens * heads * HEAD_DIM
            stats = _grad_stats(q_slot, value)
            for start_m in range(0, q_tokens, BLOCK_M):
                rows = start_m + tl.arange(0, BLOCK_M)
                row_valid = rows < q_tokens
                first, count = _row_intervals(mask_rows, mask_start, rows, q_tokens)
                max_count = tl.max(count)
                kind = _block_kind(mask_intervals, first, count, max_count, mask_start, row_valid,
                                   start_n, kv_tokens, BLOCK_N)
                if kind != 0:
                    allowed = (rows[:, None] >= 0) & (cols[None, :] >= 0)
                    if kind == 2:
                        allowed = _element_mask(mask_intervals, first, count, max_count,
                                                mask_start, cols, kv_tokens)
                    q_inside = row_valid[:, None] & dim_valid[None, :]
                    for j in range(0, group_size):
                        head = kv_head * group_size + j
                        q_at = (rows[:, None] * heads + head) * HEAD_DIM + dims[None, :]
                        q = tl.load(q_slot + q_at, mask=q_inside, other=0.0)
                        do = tl.load(q_slot + value + q_at, mask=q_inside, other=0.0)
                        lse = tl.load(stats + head * q_tokens + rows, mask=row_valid,
                                      other=float("-inf"))
                        lse_log2 = tl.where(lse == float("-inf"), float("inf"),
                                            lse * _LOG2E)
                        delta = tl.load(stats + (heads + head) * q_tokens + rows, mask=row_valid,
                                        other=0.0)
                        s = _dot(q, tl.trans(k), PRECISION, INTERPRET) * scale_log2
                        if kind == 2:
                            s = tl.where(allowed, s, float("-inf"))
                        p = tl.exp2(s - lse_log2[:, None])
                        dv += _dot(tl.trans(_round(p, STORAGE, INTERPRET)), do, PRECISION,
                                   INTERPRET)
                        dp = _dot(do, tl.trans(v), PRECISION, INTERPRET)
                        ds = p * (dp - delta[:, None])
                        dk += _dot(tl.trans(_round(ds, STORAGE, INTERPRET)), q, PRECISION,
                                   INTERPRET)
        dk *= scale
        out = _typed(arena, out_off, tl.float32) + kv_at
        dv_out = out + kv_tokens * kv_heads * HEAD_DIM
        if accumulate != 0:
            dk += tl.load(out, mask=kv_inside, other=0.0)
            dv += tl.load(dv_out, mask=kv_inside, other=0.0)
        tl.store(out, dk, mask=kv_inside)
        tl.store(dv_out, dv, mask=kv_inside)


# --- launch configuration ---------------------------------------------------------------------

def _copy_constexprs(head_dim: int) -> dict:
    """BLOCK_T tokens x BLOCK_D dims per program of the copy, merge and store kernels."""
    block_d = triton.next_power_of_2(head_dim)
    return {"HEAD_DIM": head_dim, "BLOCK_T": max(1, min(64, 4096 // block_d)), "BLOCK_D": block_d}


def _attention_constexprs(head_dim: int, dtype: torch.dtype, allow_tf32: bool) -> dict:
    """Constexprs of the three attention kernels: 16 x 16 blocks under the interpreter (its cost is
    per block iteration); on the GPU 64 x 64, or 32 x 32 where fp32 tiles of d > 64 (or any tile
    of d > 128) would not fit the registers and shared memory."""
    if dtype not in _TL_DTYPE:
        raise ValueError(f"storage dtype {dtype} is not fp32, bf16 or fp16")
    block_d = triton.next_power_of_2(head_dim)
    if INTERPRET:
        block = 16
    elif block_d <= 64 or (block_d <= 128 and dtype != torch.float32):
        block = 64
    else:
        block = 32
    precision = "tf32" if allow_tf32 and dtype == torch.float32 else "ieee"
    return {"STORAGE": _TL_DTYPE[dtype], "HEAD_DIM": head_dim, "BLOCK_D": block_d,
            "BLOCK_M": block, "BLOCK_N": block, "PRECISION": precision, "INTERPRET": INTERPRET}


def _attention_options(head_dim: int) -> dict:
    """Warps and pipeline stages of the attention kernels."""
    if INTERPRET:
        return {}
    return {"num_warps": 4 if head_dim <= 64 else 8, "num_stages": 2}


def _check_arena(arena: torch.Tensor) -> None:
    if arena.dtype != torch.uint8 or arena.dim() != 1:
        raise ValueError(f"the arena is a 1-D uint8 tensor; got {arena.dim()}-D {arena.dtype}")


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


def _check_tables(entries, groups, members, mask_rows, mask_intervals) -> None:
    for name, table, columns, dtype in (("entries", entries, _ENTRY_COLUMNS, torch.int64),
                                        ("groups", groups, _GROUP_COLUMNS, torch.int64)):
        if table.dtype != dtype or table.dim() != 2 or table.shape[1] != columns \
                or not table.is_contiguous():
            raise ValueError(f"{name} must be a contiguous int64 [n, {columns}] tensor")
    for name, table, dtype in (("members", members, torch.int64), ("mask_rows", mask_rows,
                               torch.int32), ("mask_intervals", mask_intervals, torch.int32)):
        if table.dtype != dtype or table.dim() != 1 or not table.is_contiguous():
            raise ValueError(f"{name} must be a contiguous 1-D {dtype} tensor")


# --- launches ---------------------------------------------------------------------------------

def load_q(arena, slot_off, q, token, tokens, head, heads):
    """kQ slot at slot_off = q[token:token+tokens, head:head+heads, :] as dense [t][h][d]."""
    _check_arena(arena)
    _check_local(q)
    if tokens == 0 or heads == 0:
        return
    c = _copy_constexprs(q.shape[2])
    _load_q_kernel[(triton.cdiv(tokens, c["BLOCK_T"]), heads)](
        arena, slot_off, q, q.stride(0), q.stride(1), token, tokens, head, heads, **c)


def load_kv(arena, slot_off, k, v, token, tokens, head, heads):
    """kKV slot at slot_off = k then v [token:token+tokens, head:head+heads, :]."""
    _check_arena(arena)
    _check_local(k, v)
    if k.stride() != v.stride() or k.dtype != v.dtype:
        raise ValueError("k and v must have the same dtype and strides")
    if tokens == 0 or heads == 0:
        return
    c = _copy_constexprs(k.shape[2])
    _load_kv_kernel[(triton.cdiv(tokens, c["BLOCK_T"]), heads)](
        arena, slot_off, k, v, k.stride(0), k.stride(1), token, tokens, head, heads, **c)


def load_qgrad(arena, slot_off, q, do, o, lse, token, tokens, head, heads):
    """kQGrad slot at slot_off: q, do, lse[head:head+heads, token:token+tokens] and
    delta = sum over d of o * do (fp32)."""
    _check_arena(arena)
    _check_local(q, do, o)
    _check_lse(lse)
    if not q.stride() == do.stride() == o.stride() or not q.dtype == do.dtype == o.dtype:
        raise ValueError("q, do and o must have the same dtype and strides")
    if tokens == 0 or heads == 0:
        return
    c = _copy_constexprs(q.shape[2])
    _load_qgrad_kernel[(triton.cdiv(tokens, c["BLOCK_T"]), heads)](
        arena, slot_off, q, do, o, lse, q.stride(0), q.stride(1), lse.stride(0), token, tokens,
        head, heads, **c)


def store_q(arena, slot_off, out, token, tokens, head, heads, lse=None):
    """out[token:token+tokens, head:head+heads, :] = the slot's fp32 [t][h][d] in out's dtype;
    with lse (kOut) also lse[head:head+heads, token:token+tokens] = the slot's lse."""
    _check_arena(arena)
    _check_local(out)
    if lse is not None:
        _check_lse(lse)
    if tokens == 0 or heads == 0:
        return
    c = _copy_constexprs(out.shape[2])
    _store_q_kernel[(triton.cdiv(tokens, c["BLOCK_T"]), heads)](
        arena, slot_off, out, out if lse is None else lse, out.stride(0), out.stride(1),
        0 if lse is None else lse.stride(0), token, tokens, head, heads, HAS_LSE=lse is not None,
        INTERPRET=INTERPRET, **c)


def store_kv(arena, slot_off, dk, dv, token, tokens, head, heads):
    """dk, dv[token:token+tokens, head:head+heads, :] = the kDKV slot's fp32 dk, dv."""
    _check_arena(arena)
    _check_local(dk, dv)
    if dk.stride() != dv.stride() or dk.dtype != dv.dtype:
        raise ValueError("dk and dv must have the same dtype and strides")
    if tokens == 0 or heads == 0:
        return
    c = _copy_constexprs(dk.shape[2])
    _store_kv_kernel[(triton.cdiv(tokens, c["BLOCK_T"]), heads)](
        arena, slot_off, dk, dv, dk.stride(0), dk.stride(1), token, tokens, head, heads,
        INTERPRET=INTERPRET, **c)


def merge(arena, dst_off, src_off, tokens, heads, head_dim):
    """kOut at dst_off = log-sum-exp merge of the kOut values at dst_off and src_off."""
    _check_arena(arena)
    if tokens == 0 or heads == 0:
        return
    c = _copy_constexprs(head_dim)
    _merge_kernel[(triton.cdiv(tokens, c["BLOCK_T"]), heads)](
        arena, dst_off, src_off, tokens, heads, **c)


def add(arena, dst_off, src_off, elements):
    """fp32 arena values: dst[i] += src[i] for i < elements."""
    _check_arena(arena)
    if elements == 0:
        return
    _add_kernel[(triton.cdiv(elements, _ADD_BLOCK),)](arena, dst_off, src_off, elements,
                                                       BLOCK=_ADD_BLOCK)


def _check_heads(heads: int, kv_heads: int) -> None:
    if heads <= 0 or kv_heads <= 0 or heads % kv_heads:
        raise ValueError(f"heads {heads} must be a positive multiple of kv_heads {kv_heads}")


def attention_forward(arena, entries, groups, members, mask_rows, mask_intervals, *, heads,
                      kv_heads, head_dim, dtype, scale, max_tokens, allow_tf32=False):
    """Partial o, lse of every group (kOut slots) over its member entries; one launch over
    (groups x q sub-blocks of max_tokens, heads)."""
    _check_arena(arena)
    _check_tables(entries, groups, members, mask_rows, mask_intervals)
    _check_heads(heads, kv_heads)
    if groups.shape[0] == 0 or max_tokens == 0:
        return
    c = _attention_constexprs(head_dim, dtype, allow_tf32)
    blocks = triton.cdiv(max_tokens, c["BLOCK_M"])
    _attention_forward_kernel[(groups.shape[0] * blocks, heads)](
        arena, entries, groups, members, mask_rows, mask_intervals, float(scale), heads,
        kv_heads, blocks, **c, **_attention_options(head_dim))


def attention_backward(arena, entries, q_groups, kv_groups, members, mask_rows, mask_intervals, *,
                       heads, kv_heads, head_dim, dtype, scale, max_q_tokens, max_kv_tokens,
                       allow_tf32=False):
    """dq of every q group (kDQ slots) and dk, dv of every kv group (kDKV slots) from kQGrad and
    kKV inputs: two launches, the dq kernel over (q groups x q sub-blocks, heads) and the dk/dv
    kernel over (kv groups x kv sub-blocks, kv heads)."""
    _check_arena(arena)
    _check_tables(entries, q_groups, members, mask_rows, mask_intervals)
    _check_tables(entries, kv_groups, members, mask_rows, mask_intervals)
    _check_heads(heads, kv_heads)
    c = _attention_constexprs(head_dim, dtype, allow_tf32)
    options = _attention_options(head_dim)
    if q_groups.shape[0] and max_q_tokens:
        blocks = triton.cdiv(max_q_tokens, c["BLOCK_M"])
        _attention_dq_kernel[(q_groups.shape[0] * blocks, heads)](
            arena, entries, q_groups, members, mask_rows, mask_intervals, float(scale), heads,
            kv_heads, blocks, **c, **options)
    if kv_groups.shape[0] and max_kv_tokens:
        blocks = triton.cdiv(max_kv_tokens, c["BLOCK_N"])
        _attention_dkv_kernel[(kv_groups.shape[0] * blocks, kv_heads)](
            arena, entries, kv_groups, members, mask_rows, mask_intervals, float(scale), heads,
            kv_heads, blocks, **c, **options)


# --- ahead-of-time compilation ----------------------------------------------------------------

# Types of each kernel's runtime arguments, in order ("{s}": the storage dtype; "{lse}": fp32, or
# the storage dtype where store_q passes `out` in place of an absent lse). Integers are i32: the
# launcher specializes any integer below 2**31 that way.
_RUNTIME_TYPES = {
    "_load_q_kernel": "*u8 i32 *{s} i32 i32 i32 i32 i32 i32",
    "_load_kv_kernel": "*u8 i32 *{s} *{s} i32 i32 i32 i32 i32 i32",
    "_load_qgrad_kernel": "*u8 i32 *{s} *{s} *{s} *fp32 i32 i32 i32 i32 i32 i32 i32",
    "_store_q_kernel": "*u8 i32 *{s} *{lse} i32 i32 i32 i32 i32 i32 i32",
    "_store_kv_kernel": "*u8 i32 *{s} *{s} i32 i32 i32 i32 i32 i32",
    "_merge_kernel": "*u8 i32 i32 i32 i32",
    "_add_kernel": "*u8 i32 i32 i32",
    "_attention_forward_kernel": "*u8 *i64 *i64 *i64 *i32 *i32 fp32 i32 i32 i32",
    "_attention_dq_kernel": "*u8 *i64 *i64 *i64 *i32 *i32 fp32 i32 i32 i32",
    "_attention_dkv_kernel": "*u8 *i64 *i64 *i64 *i32 *i32 fp32 i32 i32 i32",
}

# Integer arguments the launcher sees as multiples of 16 (it then specializes them as such, which
# lets the copies vectorize): slot offsets (multiples of 64) and the token and head strides of
# local tensors (multiples of the head dim).
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
                attention = _attention_constexprs(head_dim, dtype, allow_tf32)
                for kernel in ("_attention_forward_kernel", "_attention_dq_kernel",
                               "_attention_dkv_kernel"):
                    add_variant(kernel, dtype, attention, _attention_options(head_dim))
        add_variant("_merge_kernel", torch.float32, copy)
    add_variant("_add_kernel", torch.float32, {"BLOCK": _ADD_BLOCK})
    return variants


def compile_variant(variant: KernelVariant, arch: int):
    """Compiles `variant` for NVIDIA sm_`arch` (80 or 90) without a GPU; returns triton's
    CompiledKernel (asm["ptx"], asm["cubin"], metadata.shared). Needs TRITON_INTERPRET unset when
    this module was imported."""
    if INTERPRET:
        raise RuntimeError("compile_variant needs a process without TRITON_INTERPRET=1")
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource

    kernel = globals()[variant.kernel]
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
