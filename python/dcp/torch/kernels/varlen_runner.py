# SPDX-License-Identifier: Apache-2.0
"""Running one attention instruction on the flash route: the gathers of its packed q, k, v (and
do, lse, delta), one varlen kernel call per class of its tiles (dcp.torch.kernels.varlen_route),
and the scatters of the results into the pass's slots, with the Triton kernels' accumulate rules.
Every operation is a torch op on the arena's device; no host synchronization.

Rows are addressed in *chunks* of gcd(64, row bytes) bytes: slot offsets are multiples of 64,
so every row starts on a chunk, and a gather or scatter of r rows indexes r x (row bytes /
chunk) chunks, a small fraction of the bytes moved.

Forward. The parts (segments) of a q group's rows merge by log-sum-exp in fp32, with what the
kOut slot holds if the group accumulates: m = the largest lse of a row (0 where it has none),
each part weighted by exp(lse - m), o = sum w o / sum w, lse = m + log sum w; a row with no part
and nothing held gets o = 0, lse = -inf, never NaN. The kernel's values for a row whose window is
empty are never read: no segment has such a row. One call whose segments hold every row of the
instruction once, with nothing held, writes its results straight to the slots.

Backward. dq, dk and dv come back in the storage dtype (the kernels round their fp32 sums once)
and are added in fp32 to the kDQ and kDKV rows, after zeroing those of groups that overwrite.
The adds are atomics on CUDA, so the order of a row's sums, and its last bits, may vary from run
to run, as in FlashAttention's own dq.

The backward's D. The kernels compute D = rowsum(dout * out) from the `out` they are given;
the kQGrad slot holds delta = rowsum(o * do) in fp32 but not o (o may live on another rank).
The route passes out = delta * do / |do|^2 per row and head (out_for_delta), computed in fp32 as
(delta / s) * (u / |u|^2) with s = max |do| and u = do / s, so nothing overflows or underflows
(|out| <= |delta| / |do| <= |o|), then rounded to the storage dtype. Every term do_i * out_i
has the sign of delta and they sum to delta, so the rounding of out moves D by at most
u_s |delta| (u_s: the storage's unit roundoff, 2^-8 for bf16, 2^-11 for fp16) plus the fp32
sum's error. delta itself, computed from o already rounded to the storage dtype, is off by up to
u_s sum |o_i do_i| >= u_s |delta|: the route at most doubles that error bound. A row with
do = 0 has delta = 0 and gets out = 0.
"""
from __future__ import annotations

import math

import torch


def _chunks(buffer: torch.Tensor, chunk: int) -> torch.Tensor:
    """A 1-D uint8 buffer as (n, chunk) bytes."""
    n = buffer.numel() // chunk
    return buffer[:n * chunk].view(n, chunk)


def _fp32(buffer: torch.Tensor) -> torch.Tensor:
    return buffer[:buffer.numel() // 4 * 4].view(torch.float32)


def _chunk_index(geometry, kind: str, starts: torch.Tensor) -> torch.Tensor:
    per_row = geometry.per_row(kind)
    return (starts[:, None] + torch.arange(per_row, device=starts.device)[None, :]).reshape(-1)


def gather(geometry, buffer: torch.Tensor, kind: str, starts: torch.Tensor) -> torch.Tensor:
    """Rows of `kind` (q, kv: storage dtype; o, dkv: fp32) whose first chunks are `starts`, as
    (rows, heads, head dim)."""
    values = _chunks(buffer, geometry.chunk(kind)).index_select(
        0, _chunk_index(geometry, kind, starts))
    dtype = geometry.dtype if kind in ("q", "kv") else torch.float32
    return values.view(dtype).view(starts.numel(), geometry.heads_of(kind), geometry.head_dim)


def scatter(geometry, buffer: torch.Tensor, kind: str, starts: torch.Tensor,
            values: torch.Tensor, add: bool) -> None:
    """fp32 rows of `kind` (o, dkv) at `starts` = values (or += values, add)."""
    chunk = geometry.chunk(kind)
    target = _chunks(buffer, chunk).view(torch.float32)
    index = _chunk_index(geometry, kind, starts)
    values = values.float().reshape(-1, chunk // 4)
    if not add:
        target.index_copy_(0, index, values)
    else:
        _add_rows(target, index, values)


def _add_rows(target: torch.Tensor, index: torch.Tensor, values: torch.Tensor) -> None:
    """target[index[i]] += values[i], repeated indices summed: index_add_ (atomics) on CUDA;
    index_put_ on the CPU, whose index_add_ costs time in the target's size."""
    if target.is_cuda:
        target.index_add_(0, index, values)
    else:
        target.index_put_((index,), values, accumulate=True)


def out_for_delta(do: torch.Tensor, delta: torch.Tensor) -> torch.Tensor:
    """An `out` (like do, in its dtype) with rowsum(do * out) = delta per row and head, to within
    one rounding of out to do's dtype (module docstring). do: (rows, heads, d); delta: (rows,
    heads) fp32."""
    d = do.float()
    s = d.abs().amax(dim=-1, keepdim=True)
    s = torch.where(s > 0, s, 1.0)
    u = d / s
    norm = (u * u).sum(dim=-1, keepdim=True)
    norm = torch.where(norm > 0, norm, 1.0)
    return ((delta[..., None] / s) * (u / norm)).to(do.dtype)


def _inputs(geometry, call, arena, kept):
    source = kept if call["kept"] else arena
    return (gather(geometry, arena, "q", call["q"]["q"]),
            gather(geometry, source, "kv", call["kv"]["k"]),
            gather(geometry, source, "kv", call["kv"]["v"]))


def _lse_rows(lse: torch.Tensor, call) -> torch.Tensor:
    """A kernel's lse as fp32 (rows, heads)."""
    if lse.dim() == 3:  # padded per sequence
        return lse[call["q"]["sequence"], :, call["q"]["position"]].float()
    return lse.transpose(0, 1).float()


def _kernel_lse(kernel, rows: torch.Tensor, call) -> torch.Tensor:
    """(rows, heads) lse in the kernel's layout."""
    if kernel.lse_layout == "padded":
        padded = torch.zeros((call["sequences"], rows.shape[1], call["max_q"]),
                             dtype=torch.float32, device=rows.device)
        padded[call["q"]["sequence"], :, call["q"]["position"]] = rows
        return padded
    return rows.transpose(0, 1).contiguous()


def _kernel_args(call, scale):
    return (call["cu_q"], call["cu_k"], call["max_q"], call["max_k"], scale, call["left"],
            call["right"])


def run_forward(launch, geometry, kernel, arena: torch.Tensor, kept, scale: float) -> None:
    """o and lse of the instruction's q groups into their kOut slots."""
    g = geometry
    fp32 = _fp32(arena)
    parts = []
    for call in launch.calls:
        o, lse = kernel.forward(*_inputs(g, call, arena, kept), *_kernel_args(call, scale))
        parts.append((call["dest"], o, _lse_rows(lse, call)))
    if launch.direct:
        _, o, lse = parts[0]
        scatter(g, arena, "o", launch.direct_rows, o, add=False)
        fp32.index_copy_(0, launch.direct_lse.reshape(-1), lse.reshape(-1))
        return
    rows = launch.end - launch.base
    device = arena.device
    m = torch.full((rows, g.heads), -math.inf, device=device)
    if launch.accumulates:
        held = launch.out_accumulate[:, None]
        lse_old = fp32.index_select(0, launch.out_lse.reshape(-1)).view(rows, g.heads)
        o_old = gather(g, arena, "o", launch.out_rows)
        m = torch.where(held, lse_old, -math.inf)
    for dest, _, lse in parts:
        m.scatter_reduce_(0, dest[:, None].expand(-1, g.heads), lse, "amax")
    m = torch.where(torch.isneginf(m), 0.0, m)
    total = torch.zeros((rows, g.heads), device=device)
    acc = torch.zeros((rows, g.heads, g.head_dim), device=device)
    if launch.accumulates:  # rows that hold nothing may hold NaN bytes: never multiplied
        w = torch.where(held, torch.exp(lse_old - m), 0.0)
        total += w
        acc += w[..., None] * torch.where(held[..., None], o_old, 0.0)
    for dest, o, lse in parts:
        w = torch.exp(lse - m[dest])
        _add_rows(total, dest, w)
        _add_rows(acc, dest, w[..., None] * o.float())
    some = total > 0
    safe = torch.where(some, total, 1.0)
    lse = torch.where(some, m + torch.log(safe), -math.inf)
    o = torch.where(some[..., None], acc / safe[..., None], 0.0)
    scatter(g, arena, "o", launch.out_rows, o, add=False)
    fp32.index_copy_(0, launch.out_lse.reshape(-1), lse.reshape(-1))


def run_backward(launch, geometry, kernel, arena: torch.Tensor, kept, scale: float) -> None:
    """dq of the instruction's q groups and dk, dv of its kv groups into their slots."""
    g = geometry
    fp32 = _fp32(arena)
    for kind, starts in (("o", launch.zero_dq), ("dkv", launch.zero_dk),
                         ("dkv", launch.zero_dv)):
        if starts.numel():
            _chunks(arena, g.chunk(kind)).view(torch.float32).index_fill_(
                0, _chunk_index(g, kind, starts), 0.0)
    for call in launch.calls:
        q, k, v = _inputs(g, call, arena, kept)
        do = gather(g, arena, "q", call["q"]["do"])
        lse = fp32[call["stat"]]  # (rows, heads)
        delta = fp32[call["stat"] + g.heads * call["q"]["stat_stride"][:, None]]
        dq, dk, dv = kernel.backward(do, q, k, v, out_for_delta(do, delta),
                                     _kernel_lse(kernel, lse, call), *_kernel_args(call, scale))
        scatter(g, arena, "o", call["q"]["dq"], dq, add=True)
        scatter(g, arena, "dkv", call["kv"]["dk"], dk, add=True)
        scatter(g, arena, "dkv", call["kv"]["dv"], dv, add=True)
