# SPDX-License-Identifier: Apache-2.0
"""The device code of the GPU path: Triton kernels and their helpers.

The launches, checks, block sizes and the list of compiled variants are in triton_kernels.py,
whose docstring is the contract (arena and slot layouts, attention tables, numerics). The
tables' row widths and column indices, the slot alignment and the kept buffer's number are
compile-time constants taken from the lowering's schema (dcp._core.LOWERING_SCHEMA)."""
from __future__ import annotations

import triton
import triton.language as tl

from dcp import _core

_LOG2E = tl.constexpr(1.4426950408889634)
_LN2 = tl.constexpr(0.6931471805599453)

# --- the lowering's schema, as constants of the kernels ---------------------------------------

_SCHEMA = _core.LOWERING_SCHEMA
_TABLES = _SCHEMA["tables"]


def _width(table: str) -> tl.constexpr:
    return tl.constexpr(len(_TABLES[table]))


def _column(table: str, column: str) -> tl.constexpr:
    return tl.constexpr(_TABLES[table][column])


_SLOT_ALIGNMENT = tl.constexpr(_SCHEMA["slot_alignment"])
_KEPT_BUFFER = tl.constexpr(_SCHEMA["buffers"]["kept"])
_ENTRY_WIDTH = _width("entries")
_ENTRY_Q = _column("entries", "q_off")
_ENTRY_KV = _column("entries", "kv_off")
_ENTRY_Q_TOKENS = _column("entries", "q_tokens")
_ENTRY_KV_TOKENS = _column("entries", "kv_tokens")
_ENTRY_MASK = _column("entries", "mask")
_ENTRY_KV_BUFFER = _column("entries", "kv_buffer")
# One group reader serves q groups and kv groups: the schema gives both the same columns.
assert _TABLES["q_groups"] == _TABLES["kv_groups"]
_GROUP_WIDTH = _width("q_groups")
_GROUP_OUT = _column("q_groups", "out_off")
_GROUP_TOKENS = _column("q_groups", "tokens")
_GROUP_ACCUMULATE = _column("q_groups", "accumulate")
_GROUP_BEGIN = _column("q_groups", "member_begin")
_GROUP_END = _column("q_groups", "member_end")
_COPY_WIDTH = _width("copy_rows")
_COPY_SLOT = _column("copy_rows", "slot_off")
_COPY_TOKEN = _column("copy_rows", "token")
_COPY_TOKENS = _column("copy_rows", "tokens")
_COPY_HEAD_BLOCK = _column("copy_rows", "head_block")
_MEMORY_WIDTH = _width("memory_rows")
_MEMORY_DST = _column("memory_rows", "dst_off")
_MEMORY_SRC = _column("memory_rows", "src_off")
_MEMORY_COUNT = _column("memory_rows", "count")
_WIRE_WIDTH = _width("wire_rows")
_WIRE_SLOT = _column("wire_rows", "slot_off")
_WIRE_OFFSET = _column("wire_rows", "wire_off")
_WIRE_ELEMENTS = _column("wire_rows", "elements")
_WIRE_TAIL_BYTES = _column("wire_rows", "tail_bytes")

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
    """A slot offset read from a table: a multiple of the slot alignment, which lets loads
    vectorize."""
    return tl.multiple_of(tl.load(table_ptr), _SLOT_ALIGNMENT)


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


@triton.jit
def _group_row(groups, blocks_per_group, BLOCK: tl.constexpr):
    """The group row of this program (program_id(0) = group * blocks_per_group + sub-block): its
    output slot, token count, accumulate flag, members [begin, end) and the sub-block's first
    token."""
    group = groups + (tl.program_id(0) // blocks_per_group) * _GROUP_WIDTH
    start = (tl.program_id(0) % blocks_per_group) * BLOCK
    return (_slot_offset(group + _GROUP_OUT), tl.load(group + _GROUP_TOKENS).to(tl.int32),
            tl.load(group + _GROUP_ACCUMULATE), tl.load(group + _GROUP_BEGIN),
            tl.load(group + _GROUP_END), start)


@triton.jit
def _member_entry(entries, members, member):
    """The row of `entries` that members[member] names."""
    return entries + tl.load(members + member) * _ENTRY_WIDTH


@triton.jit
def _kv_slot(arena, kept, entry, STORAGE: tl.constexpr):
    """The k pointer of an attention entry's kv value: its kKV slot in the arena or, where its
    kv_buffer is the kept buffer, its place in the kept tensor (as aligned as a slot)."""
    if tl.load(entry + _ENTRY_KV_BUFFER) == _KEPT_BUFFER:
        k_slot = _typed(kept, _slot_offset(entry + _ENTRY_KV), STORAGE)
    else:
        k_slot = _typed(arena, _slot_offset(entry + _ENTRY_KV), STORAGE)
    return k_slot


@triton.jit
def _kv_entry(arena, kept, entries, members, member, mask_rows, mask_intervals, rows, tokens,
              kv_heads, STORAGE: tl.constexpr, HEAD_DIM: tl.constexpr):
    """A q group member's kv value (k and v pointers, tokens), its mask start, the rows' first
    interval and interval counts, the largest count and the keys [lo, hi) any row attends to."""
    entry = _member_entry(entries, members, member)
    kv_tokens = tl.load(entry + _ENTRY_KV_TOKENS).to(tl.int32)
    mask_start = tl.load(entry + _ENTRY_MASK)
    k_slot = _kv_slot(arena, kept, entry, STORAGE)
    v_slot = k_slot + kv_tokens * kv_heads * HEAD_DIM
    first, count = _row_intervals(mask_rows, mask_start, rows, tokens)
    lo, hi = _key_range(mask_intervals, first, count, mask_start, kv_tokens)
    return k_slot, v_slot, kv_tokens, mask_start, first, count, tl.max(count), lo, hi


@triton.jit
def _scores(q, k_slot, v_slot, n0, kind, kv_head, kv_heads, kv_tokens, dims, dim_valid, first,
            count, max_count, mask_start, mask_intervals, scale_log2, HEAD_DIM: tl.constexpr,
            BLOCK_N: tl.constexpr, PRECISION: tl.constexpr, INTERPRET: tl.constexpr):
    """Scores s = scale * q.k^T in log2 units over keys [n0, n0 + BLOCK_N) of a kv value, -inf
    where a cut sub-block's mask (kind 2) hides a key; with the sub-block's k and v tiles."""
    cols = n0 + tl.arange(0, BLOCK_N)
    kv_at = (cols[:, None] * kv_heads + kv_head) * HEAD_DIM + dims[None, :]
    kv_inside = (cols < kv_tokens)[:, None] & dim_valid[None, :]
    k = tl.load(k_slot + kv_at, mask=kv_inside, other=0.0)
    v = tl.load(v_slot + kv_at, mask=kv_inside, other=0.0)
    s = _dot(q, tl.trans(k), PRECISION, INTERPRET) * scale_log2
    if kind == 2:
        allowed = _element_mask(mask_intervals, first, count, max_count, mask_start, cols,
                                kv_tokens)
        s = tl.where(allowed, s, float("-inf"))
    return s, k, v


@triton.jit
def _dkv_tile(q_slot, value, stats, rows, row_valid, head, heads, q_tokens, k, v, dk, dv, allowed,
              scale_log2, dims, dim_valid, MASKED: tl.constexpr, STORAGE: tl.constexpr,
              HEAD_DIM: tl.constexpr, PRECISION: tl.constexpr, INTERPRET: tl.constexpr):
    """dk, dv plus one q sub-block's and q head's share: ds^T.q (unscaled) and p^T.do; `allowed`
    masks the scores where MASKED."""
    q_at = (rows[:, None] * heads + head) * HEAD_DIM + dims[None, :]
    q_inside = row_valid[:, None] & dim_valid[None, :]
    q = tl.load(q_slot + q_at, mask=q_inside, other=0.0)
    do = tl.load(q_slot + value + q_at, mask=q_inside, other=0.0)
    lse = tl.load(stats + head * q_tokens + rows, mask=row_valid, other=float("-inf"))
    lse_log2 = tl.where(lse == float("-inf"), float("inf"), lse * _LOG2E)
    delta = tl.load(stats + (heads + head) * q_tokens + rows, mask=row_valid, other=0.0)
    s = _dot(q, tl.trans(k), PRECISION, INTERPRET) * scale_log2
    if MASKED:
        s = tl.where(allowed, s, float("-inf"))
    p = tl.exp2(s - lse_log2[:, None])
    dv += _dot(tl.trans(_round(p, STORAGE, INTERPRET)), do, PRECISION, INTERPRET)
    dp = _dot(do, tl.trans(v), PRECISION, INTERPRET)
    ds = p * (dp - delta[:, None])
    dk += _dot(tl.trans(_round(ds, STORAGE, INTERPRET)), q, PRECISION, INTERPRET)
    return dk, dv


# --- copies, merges and sums ------------------------------------------------------------------

# Counts that may be 1 are not specialized (triton would compile a variant per count equal to 1):
# every launch then uses one of kernel_variants().
_COPY_COUNTS = ["head_scale", "heads"]
_ATTENTION_COUNTS = ["heads", "kv_heads", "blocks_per_group"]


@triton.jit
def _copy_row(copies, head_scale, BLOCK_T: tl.constexpr):
    """This program's copy (program_id(2): a row of the copy table `copies`: its slot offset,
    first local token, tokens and first head, head_block x head_scale), its tokens t of the copy
    (program_id(0)) and its head h among the copy's (program_id(1))."""
    row = copies + tl.program_id(2) * _COPY_WIDTH
    t = tl.program_id(0) * BLOCK_T + tl.arange(0, BLOCK_T)
    return (_slot_offset(row + _COPY_SLOT), tl.load(row + _COPY_TOKEN),
            tl.load(row + _COPY_TOKENS).to(tl.int32), tl.load(row + _COPY_HEAD_BLOCK) * head_scale,
            tl.program_id(1), t)


@triton.jit(do_not_specialize=_COPY_COUNTS)
def _load_q_kernel(arena, copies, src, src_token_stride, src_head_stride, head_scale, heads,
                   HEAD_DIM: tl.constexpr, BLOCK_T: tl.constexpr, BLOCK_D: tl.constexpr):
    """kQ slot [tokens][heads][d] = src[token + t, head + h, :] (storage dtype, no conversion)."""
    slot_off, token, tokens, head, h, t = _copy_row(copies, head_scale, BLOCK_T)
    c = tl.arange(0, BLOCK_D)
    inside = (t < tokens)[:, None] & (c < HEAD_DIM)[None, :]
    rows = (token + t).to(tl.int64)
    x = tl.load(src + rows[:, None] * src_token_stride + (head + h) * src_head_stride + c[None, :],
                mask=inside)
    dst = _typed(arena, slot_off, src.dtype.element_ty)
    tl.store(dst + (t[:, None] * heads + h) * HEAD_DIM + c[None, :], x, mask=inside)


@triton.jit(do_not_specialize=_COPY_COUNTS)
def _load_kv_kernel(arena, copies, k, v, token_stride, head_stride, head_scale, heads,
                    HEAD_DIM: tl.constexpr, BLOCK_T: tl.constexpr, BLOCK_D: tl.constexpr):
    """kKV slot: k then v [tokens][heads][d] from k, v[token + t, head + h, :]."""
    slot_off, token, tokens, head, h, t = _copy_row(copies, head_scale, BLOCK_T)
    c = tl.arange(0, BLOCK_D)
    inside = (t < tokens)[:, None] & (c < HEAD_DIM)[None, :]
    src = (token + t).to(tl.int64)[:, None] * token_stride + (head + h) * head_stride + c[None, :]
    dst = (_typed(arena, slot_off, k.dtype.element_ty) + (t[:, None] * heads + h) * HEAD_DIM
           + c[None, :])
    tl.store(dst, tl.load(k + src, mask=inside), mask=inside)
    tl.store(dst + tokens * heads * HEAD_DIM, tl.load(v + src, mask=inside), mask=inside)


@triton.jit(do_not_specialize=_COPY_COUNTS + ["lse_stride"])
def _load_qgrad_kernel(arena, copies, q, do, o, lse, token_stride, head_stride, lse_stride,
                       head_scale, heads, HEAD_DIM: tl.constexpr, BLOCK_T: tl.constexpr,
                       BLOCK_D: tl.constexpr):
    """kQGrad slot: q, do copied; lse gathered; delta[h][t] = sum_d o * do in fp32."""
    slot_off, token, tokens, head, h, t = _copy_row(copies, head_scale, BLOCK_T)
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
    row_lse = tl.load(lse + (head + h).to(tl.int64) * lse_stride + token + t, mask=valid)
    tl.store(stats, row_lse, mask=valid)
    delta = tl.sum(o_tile.to(tl.float32) * do_tile.to(tl.float32), axis=1)
    tl.store(stats + heads * tokens, delta, mask=valid)


@triton.jit(do_not_specialize=_COPY_COUNTS + ["lse_stride"])
def _store_q_kernel(arena, copies, out, lse, token_stride, head_stride, lse_stride, head_scale,
                    heads, HAS_LSE: tl.constexpr, HEAD_DIM: tl.constexpr, BLOCK_T: tl.constexpr,
                    BLOCK_D: tl.constexpr, INTERPRET: tl.constexpr):
    """out[token + t, head + h, :] = slot fp32 [t][h][d] rounded to out's dtype; with HAS_LSE
    also lse[head + h, token + t] = the kOut slot's lse."""
    slot_off, token, tokens, head, h, t = _copy_row(copies, head_scale, BLOCK_T)
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
        tl.store(lse + (head + h).to(tl.int64) * lse_stride + token + t, row_lse, mask=valid)


@triton.jit(do_not_specialize=_COPY_COUNTS)
def _store_kv_kernel(arena, copies, dk, dv, token_stride, head_stride, head_scale, heads,
                     HEAD_DIM: tl.constexpr, BLOCK_T: tl.constexpr, BLOCK_D: tl.constexpr,
                     INTERPRET: tl.constexpr):
    """dk, dv[token + t, head + h, :] = the kDKV slot's fp32 dk, dv rounded to storage."""
    slot_off, token, tokens, head, h, t = _copy_row(copies, head_scale, BLOCK_T)
    c = tl.arange(0, BLOCK_D)
    inside = (t < tokens)[:, None] & (c < HEAD_DIM)[None, :]
    src = _typed(arena, slot_off, tl.float32) + (t[:, None] * heads + h) * HEAD_DIM + c[None, :]
    dst = (token + t).to(tl.int64)[:, None] * token_stride + (head + h) * head_stride + c[None, :]
    dtype = dk.dtype.element_ty
    tl.store(dk + dst, _round(tl.load(src, mask=inside), dtype, INTERPRET), mask=inside)
    dv_src = src + tokens * heads * HEAD_DIM
    tl.store(dv + dst, _round(tl.load(dv_src, mask=inside), dtype, INTERPRET), mask=inside)


@triton.jit(do_not_specialize=["heads"])
def _merge_kernel(arena, rows, heads, HEAD_DIM: tl.constexpr, BLOCK_T: tl.constexpr,
                  BLOCK_D: tl.constexpr):
    """Per row (program_id(2)) of a memory table (count: tokens): kOut dst = log-sum-exp merge of
    kOut dst and kOut src, in place; program_id(0): BLOCK_T tokens, program_id(1): a head."""
    row = rows + tl.program_id(2) * _MEMORY_WIDTH
    dst = _typed(arena, _slot_offset(row + _MEMORY_DST), tl.float32)
    src = _typed(arena, _slot_offset(row + _MEMORY_SRC), tl.float32)
    tokens = tl.load(row + _MEMORY_COUNT).to(tl.int32)
    h = tl.program_id(1)
    t = tl.program_id(0) * BLOCK_T + tl.arange(0, BLOCK_T)
    c = tl.arange(0, BLOCK_D)
    valid = t < tokens
    inside = valid[:, None] & (c < HEAD_DIM)[None, :]
    o_at = (t[:, None] * heads + h) * HEAD_DIM + c[None, :]
    lse_at = tokens * heads * HEAD_DIM + h * tokens + t
    o, lse = _merge_partials(tl.load(dst + o_at, mask=inside), tl.load(dst + lse_at, mask=valid),
                             tl.load(src + o_at, mask=inside), tl.load(src + lse_at, mask=valid))
    tl.store(dst + o_at, o, mask=inside)
    tl.store(dst + lse_at, lse, mask=valid)


@triton.jit
def _add_kernel(arena, rows, BLOCK: tl.constexpr):
    """Per row (program_id(1)) of a memory table (count: fp32 elements): dst[i] += src[i]."""
    row = rows + tl.program_id(1) * _MEMORY_WIDTH
    dst = _typed(arena, _slot_offset(row + _MEMORY_DST), tl.float32)
    src = _typed(arena, _slot_offset(row + _MEMORY_SRC), tl.float32)
    elements = tl.load(row + _MEMORY_COUNT)
    i = tl.program_id(0).to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
    inside = i < elements
    tl.store(dst + i, tl.load(dst + i, mask=inside) + tl.load(src + i, mask=inside), mask=inside)


@triton.jit
def _convert_kernel(arena, rows, NARROW: tl.constexpr, WIRE: tl.constexpr, WIDTH: tl.constexpr,
                    BLOCK: tl.constexpr, INTERPRET: tl.constexpr):
    """One row of a wire table per program_id(1): its slot, its wire buffer, elements, tail bytes.
    NARROW: the slot's first `elements` fp32 values rounded to WIRE (WIDTH bytes) into the wire
    buffer, then the tail's bytes (an o partial's lse, fp32) copied after them; else the other
    way, widening. The tail moves as 2-byte halves: after an odd number of 2-byte values it is
    not 4-byte aligned. program_id(0): BLOCK of the row's elements + tail bytes / 2 items."""
    row = rows + tl.program_id(1) * _WIRE_WIDTH
    slot_off = _slot_offset(row + _WIRE_SLOT)
    wire_off = _slot_offset(row + _WIRE_OFFSET)
    elements = tl.load(row + _WIRE_ELEMENTS)
    halves = tl.load(row + _WIRE_TAIL_BYTES) // 2
    slot = _typed(arena, slot_off, tl.float32)
    wire = _typed(arena, wire_off, WIRE)
    slot_tail = _typed(arena, slot_off + elements * 4, tl.int16)
    wire_tail = _typed(arena, wire_off + elements * WIDTH, tl.int16)
    i = tl.program_id(0).to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
    values = i < elements
    extra = (i >= elements) & (i < elements + halves)
    if NARROW:
        tl.store(wire + i, _round(tl.load(slot + i, mask=values), WIRE, INTERPRET), mask=values)
        tl.store(wire_tail + (i - elements), tl.load(slot_tail + (i - elements), mask=extra),
                 mask=extra)
    else:
        tl.store(slot + i, tl.load(wire + i, mask=values).to(tl.float32), mask=values)
        tl.store(slot_tail + (i - elements), tl.load(wire_tail + (i - elements), mask=extra),
                 mask=extra)


# --- attention --------------------------------------------------------------------------------

@triton.jit(do_not_specialize=_ATTENTION_COUNTS)
def _attention_forward_kernel(arena, kept, entries, groups, members, mask_rows, mask_intervals,
                              scale, heads, kv_heads, blocks_per_group, STORAGE: tl.constexpr,
                              HEAD_DIM: tl.constexpr, BLOCK_D: tl.constexpr,
                              BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
                              PRECISION: tl.constexpr, INTERPRET: tl.constexpr):
    """One (group, q sub-block, q head): online softmax over the keys of all the group's
    entries, then written to (or log-sum-exp merged into) the group's kOut slot."""
    head = tl.program_id(1)
    out_off, tokens, accumulate, member_begin, member_end, start_m = _group_row(
        groups, blocks_per_group, BLOCK_M)
    if start_m < tokens:
        rows = start_m + tl.arange(0, BLOCK_M)
        row_valid = rows < tokens
        dims = tl.arange(0, BLOCK_D)
        dim_valid = dims < HEAD_DIM
        kv_head = head // (heads // kv_heads)
        scale_log2 = scale * _LOG2E
        q = tl.zeros([BLOCK_M, BLOCK_D], STORAGE)
        if member_begin < member_end:  # all members share the q value
            q_off = _slot_offset(_member_entry(entries, members, member_begin) + _ENTRY_Q)
            q_slot = _typed(arena, q_off, STORAGE)
            q = tl.load(q_slot + (rows[:, None] * heads + head) * HEAD_DIM + dims[None, :],
                        mask=row_valid[:, None] & dim_valid[None, :], other=0.0)
        m_i = tl.full([BLOCK_M], float("-inf"), tl.float32)
        l_i = tl.zeros([BLOCK_M], tl.float32)
        acc = tl.zeros([BLOCK_M, BLOCK_D], tl.float32)
        for member in range(member_begin, member_end):
            k_slot, v_slot, kv_tokens, mask_start, first, count, max_count, lo, hi = _kv_entry(
                arena, kept, entries, members, member, mask_rows, mask_intervals, rows, tokens,
                kv_heads, STORAGE, HEAD_DIM)
            for n0 in range(lo, hi, BLOCK_N):
                kind = _block_kind(mask_intervals, first, count, max_count, mask_start, row_valid,
                                   n0, kv_tokens, BLOCK_N)
                if kind != 0:
                    s, _, v = _scores(q, k_slot, v_slot, n0, kind, kv_head, kv_heads, kv_tokens,
                                      dims, dim_valid, first, count, max_count, mask_start,
                                      mask_intervals, scale_log2, HEAD_DIM, BLOCK_N, PRECISION,
                                      INTERPRET)
                    m_new = tl.maximum(m_i, tl.max(s, axis=1))
                    m_safe = tl.where(m_new == float("-inf"), 0.0, m_new)
                    p = tl.exp2(s - m_safe[:, None])
                    alpha = tl.exp2(m_i - m_safe)
                    l_i = l_i * alpha + tl.sum(p, axis=1)
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
def _attention_dq_kernel(arena, kept, entries, groups, members, mask_rows, mask_intervals, scale,
                         heads, kv_heads, blocks_per_group, STORAGE: tl.constexpr,
                         HEAD_DIM: tl.constexpr, BLOCK_D: tl.constexpr, BLOCK_M: tl.constexpr,
                         BLOCK_N: tl.constexpr, PRECISION: tl.constexpr,
                         INTERPRET: tl.constexpr):
    """One (q group, q sub-block, q head): dq = scale * sum over the group's entries and their
    keys of ds.k, written to (or added to) the group's kDQ slot."""
    head = tl.program_id(1)
    out_off, tokens, accumulate, member_begin, member_end, start_m = _group_row(
        groups, blocks_per_group, BLOCK_M)
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
            q_slot = _typed(arena,
                            _slot_offset(_member_entry(entries, members, member_begin) + _ENTRY_Q),
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
            k_slot, v_slot, kv_tokens, mask_start, first, count, max_count, lo, hi = _kv_entry(
                arena, kept, entries, members, member, mask_rows, mask_intervals, rows, tokens,
                kv_heads, STORAGE, HEAD_DIM)
            for n0 in range(lo, hi, BLOCK_N):
                kind = _block_kind(mask_intervals, first, count, max_count, mask_start, row_valid,
                                   n0, kv_tokens, BLOCK_N)
                if kind != 0:
                    s, k, v = _scores(q, k_slot, v_slot, n0, kind, kv_head, kv_heads, kv_tokens,
                                      dims, dim_valid, first, count, max_count, mask_start,
                                      mask_intervals, scale_log2, HEAD_DIM, BLOCK_N, PRECISION,
                                      INTERPRET)
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
def _attention_dkv_kernel(arena, kept, entries, groups, members, mask_rows, mask_intervals, scale,
                          heads, kv_heads, blocks_per_group, STORAGE: tl.constexpr,
                          HEAD_DIM: tl.constexpr, BLOCK_D: tl.constexpr, BLOCK_M: tl.constexpr,
                          BLOCK_N: tl.constexpr, PRECISION: tl.constexpr,
                          INTERPRET: tl.constexpr):
    """One (kv group, kv sub-block, kv head): dk = scale * sum of ds^T.q and dv = sum of p^T.do
    over the group's entries, their q sub-blocks and the q heads reading this kv head, written to
    (or added to) the group's kDKV slot."""
    kv_head = tl.program_id(1)
    out_off, kv_tokens, accumulate, member_begin, member_end, start_n = _group_row(
        groups, blocks_per_group, BLOCK_N)
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
            k_slot = _kv_slot(arena, kept, _member_entry(entries, members, member_begin), STORAGE)
            k = tl.load(k_slot + kv_at, mask=kv_inside, other=0.0)
            v = tl.load(k_slot + kv_tokens * kv_heads * HEAD_DIM + kv_at, mask=kv_inside,
                        other=0.0)
        dk = tl.zeros([BLOCK_N, BLOCK_D], tl.float32)
        dv = tl.zeros([BLOCK_N, BLOCK_D], tl.float32)
        for member in range(member_begin, member_end):
            entry = _member_entry(entries, members, member)
            q_slot = _typed(arena, _slot_offset(entry + _ENTRY_Q), STORAGE)
            q_tokens = tl.load(entry + _ENTRY_Q_TOKENS).to(tl.int32)
            mask_start = tl.load(entry + _ENTRY_MASK)
            value = q_tokens * heads * HEAD_DIM
            stats = _grad_stats(q_slot, value)
            # The q sub-blocks [m_lo, m_hi) some row of which reads a key of this kv sub-block,
            # and the longest run [whole_lo, whole_hi) of sub-blocks every valid row of which
            # reads all of them (under a causal mask: all but the one or two the diagonal cuts).
            m_lo = q_tokens
            m_hi = q_tokens * 0
            run_lo = q_tokens * 0
            run_hi = q_tokens * 0
            whole_lo = q_tokens * 0
            whole_hi = q_tokens * 0
            for start_m in range(0, q_tokens, BLOCK_M):
                rows = start_m + tl.arange(0, BLOCK_M)
                first, count = _row_intervals(mask_rows, mask_start, rows, q_tokens)
                kind = _block_kind(mask_intervals, first, count, tl.max(count), mask_start,
                                   rows < q_tokens, start_n, kv_tokens, BLOCK_N)
                if kind != 0:
                    m_lo = tl.minimum(m_lo, start_m)
                    m_hi = start_m + BLOCK_M
                if kind == 1:
                    if run_hi != start_m:
                        run_lo = start_m
                    run_hi = start_m + BLOCK_M
                    if run_hi - run_lo > whole_hi - whole_lo:
                        whole_lo = run_lo
                        whole_hi = run_hi
            # The run: q heads outer, sub-blocks inner, no mask and no branch, so that the
            # compiler pipelines the sub-blocks' loads (a head block may hold one q head per kv
            # head, leaving the heads loop one iteration long).
            for j in range(0, group_size):
                for start_m in range(whole_lo, whole_hi, BLOCK_M):
                    rows = start_m + tl.arange(0, BLOCK_M)
                    dk, dv = _dkv_tile(q_slot, value, stats, rows, rows < q_tokens,
                                       kv_head * group_size + j, heads, q_tokens, k, v, dk, dv,
                                       None, scale_log2, dims, dim_valid, False, STORAGE,
                                       HEAD_DIM, PRECISION, INTERPRET)
            # The other sub-blocks of [m_lo, m_hi): skipped where no row reads a key, masked
            # where some rows read some keys.
            for start_m in range(m_lo, m_hi, BLOCK_M):
                if (start_m < whole_lo) | (start_m >= whole_hi):
                    rows = start_m + tl.arange(0, BLOCK_M)
                    row_valid = rows < q_tokens
                    first, count = _row_intervals(mask_rows, mask_start, rows, q_tokens)
                    max_count = tl.max(count)
                    kind = _block_kind(mask_intervals, first, count, max_count, mask_start,
                                       row_valid, start_n, kv_tokens, BLOCK_N)
                    if kind != 0:
                        allowed = (rows[:, None] >= 0) & (cols[None, :] >= 0)
                        if kind == 2:
                            allowed = _element_mask(mask_intervals, first, count, max_count,
                                                    mask_start, cols, kv_tokens)
                        for j in range(0, group_size):
                            dk, dv = _dkv_tile(q_slot, value, stats, rows, row_valid,
                                               kv_head * group_size + j, heads, q_tokens, k, v,
                                               dk, dv, allowed, scale_log2, dims, dim_valid,
                                               True, STORAGE, HEAD_DIM, PRECISION, INTERPRET)
        dk *= scale
        out = _typed(arena, out_off, tl.float32) + kv_at
        dv_out = out + kv_tokens * kv_heads * HEAD_DIM
        if accumulate != 0:
            dk += tl.load(out, mask=kv_inside, other=0.0)
            dv += tl.load(dv_out, mask=kv_inside, other=0.0)
        tl.store(out, dk, mask=kv_inside)
        tl.store(dv_out, dv, mask=kv_inside)
