# SPDX-License-Identifier: Apache-2.0
"""The flash route (dcp.torch.kernels.varlen_route) on the CPU, with an fp64 emulation of
FlashAttention's varlen contract (dcp.torch.kernels.varlen_kernels) as its kernel: the translation
of every mask kind against dense fp64 attention, the Triton remainder, the executor end to end on 1
and 2 ranks, and the kernel selection from timing tables. On CUDA the same translation runs
torch's kernels."""
from __future__ import annotations

import functools
import math
import types

import numpy as np
import pytest
import torch

import dist_cases
import reference
from dcp.torch.kernels import kernel_selection as ks
from dcp.torch.kernels import triton_kernels as tk
from dcp.torch.kernels import varlen_kernels as vk
from dcp.torch.kernels import varlen_route as vr
from dcp.torch.kernels import varlen_runner
from dcp.torch.kernels import varlen_windows as vw
from worlds import run_world

TORCH = {"bf16": torch.bfloat16, "fp16": torch.float16}


@pytest.fixture(autouse=True, scope="module")
def _one_thread():
    """Tiny tensors: torch's thread pool only costs here (and on a shared machine, a lot)."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)
TOLERANCE = {"bf16": 1e-2, "fp16": 2e-3}  # of max |fp64|: one rounding per partial and merge


# --- a pass's tables and arena, built as the lowering lays them out -------------------------

class Arena:
    """Values at 64-byte aligned offsets; unwritten bytes are 0xFF (NaN), so a read of what
    should have been written first shows up."""

    def __init__(self):
        self.size, self.values = 0, []

    def reserve(self, nbytes: int) -> int:
        offset = self.size
        self.size += -(-max(nbytes, 1) // 64) * 64
        return offset

    def place(self, *parts: torch.Tensor) -> int:
        flat = torch.cat([p.contiguous().reshape(-1).view(torch.uint8) for p in parts])
        offset = self.reserve(flat.numel())
        self.values.append((offset, flat))
        return offset

    def build(self, device="cpu") -> torch.Tensor:
        arena = torch.full((self.size + 64,), 0xFF, dtype=torch.uint8)
        for offset, data in self.values:
            arena[offset:offset + data.numel()] = data
        return arena.to(device)


def read(buffer: torch.Tensor, offset: int, dtype: torch.dtype, *shape: int) -> torch.Tensor:
    nbytes = math.prod(shape) * torch.empty((), dtype=dtype).element_size()
    return buffer[offset:offset + nbytes].clone().view(dtype).reshape(shape)


class Scenario:
    """A batch cut into q blocks and kv blocks per sequence; an entry per tile with a key; a q
    group per q block, a kv group per kv block (backward); launches of whole sequences, or
    (split) each q block's tiles over two launches, the second accumulating. Every other kv
    value may live in the kept tensor; members are listed in a shuffled order."""

    def __init__(self, seqlens, masks, *, q_block=16, kv_block=12, heads=4, kv_heads=2,
                 head_dim=16, dtype="bf16", seed=0, kept=False, split=False, device="cpu"):
        self.seqlens, self.dtype, self.torch_dtype = seqlens, dtype, TORCH[dtype]
        self.h, self.hk, self.d, self.device = heads, kv_heads, head_dim, device
        self.scale = head_dim ** -0.5
        total = sum(seqlens)
        self.allowed = reference.dense_mask(seqlens, masks)
        self.q, self.k, self.v, self.do = reference.inputs(total, heads, kv_heads, head_dim,
                                                           dtype, seed)
        self.ref = reference.dense_attention(self.q, self.k, self.v, self.do, self.allowed,
                                             self.scale)
        rng = np.random.default_rng(seed)
        self.q_blocks, self.kv_blocks, self.tiles = [], [], []  # tiles: (q block, kv block)
        start = 0
        for length in seqlens:
            qs = [(a, min(a + q_block, start + length)) for a in range(start, start + length,
                                                                      q_block)]
            ks_ = [(a, min(a + kv_block, start + length)) for a in range(start, start + length,
                                                                        kv_block)]
            first_q, first_kv = len(self.q_blocks), len(self.kv_blocks)
            self.q_blocks += qs
            self.kv_blocks += ks_
            for i in range(first_q, len(self.q_blocks)):
                mine = [j for j in range(first_kv, len(self.kv_blocks)) if self._tile(i, j).any()]
                self.tiles += [(i, j) for j in rng.permutation(mine).tolist()]
            start += length
        self.kept = kept
        self.split = split

    def _tile(self, i, j):
        (a, b), (c, d) = self.q_blocks[i], self.kv_blocks[j]
        return self.allowed[a:b, c:d]

    def pass_tables(self, backward: bool):
        """(tables as numpy, arena, kept tensor, launches, output offsets)."""
        arena, kept = Arena(), Arena()
        q_off, out_off, kv_off, kv_buffer, dkv_off = {}, {}, {}, {}, {}
        for i, (a, b) in enumerate(self.q_blocks):
            t = b - a
            q = self.q[a:b].to(self.torch_dtype)
            if backward:
                do = self.do[a:b].to(self.torch_dtype)
                o = self.ref[0][a:b].to(self.torch_dtype).double()
                lse = self.ref[1][:, a:b].float()
                delta = (o * do.double()).sum(-1).T.float()
                q_off[i] = arena.place(q, do, lse.contiguous(), delta.contiguous())
                out_off[i] = arena.reserve(t * self.h * self.d * 4)
            else:
                q_off[i] = arena.place(q)
                out_off[i] = arena.reserve(t * self.h * (self.d + 1) * 4)
        for j, (c, d) in enumerate(self.kv_blocks):
            k, v = (x[c:d].to(self.torch_dtype) for x in (self.k, self.v))
            in_kept = self.kept and j % 2 == 1
            kv_buffer[j] = tk.BUFFERS["kept" if in_kept else "arena"]
            kv_off[j] = (kept if in_kept else arena).place(k, v)
            if backward:
                dkv_off[j] = arena.reserve(2 * (d - c) * self.hk * self.d * 4)
        mask_rows, intervals = [], []

        def mask(i, j):
            tile = self._tile(i, j)
            if tile.all():
                return -1
            start = len(mask_rows)
            for row in tile:
                mask_rows.append(len(intervals) // 2)
                previous = None
                for key in torch.nonzero(row).flatten().tolist():
                    if previous is not None and key == previous + 1:
                        intervals[-1] = key + 1
                    else:
                        intervals.extend([key, key + 1])
                    previous = key
            mask_rows.append(len(intervals) // 2)
            return start

        # Launches: per sequence (or per half of its tiles); entries, groups and members in
        # launch order, as the lowering emits them.
        entries, q_groups, kv_groups, members, launches = [], [], [], [], []
        by_sequence: dict[int, list] = {}
        for i, j in self.tiles:
            by_sequence.setdefault(self._sequence(i), []).append((i, j))
        written_q, written_kv = set(), set()
        for s in range(len(self.seqlens)):
            tiles = by_sequence.get(s, [])
            halves = [tiles[:len(tiles) // 2], tiles[len(tiles) // 2:]] if self.split else [tiles]
            for part in halves:
                # Every q and kv block of the sequence has a group in its first instruction
                # (one that overwrites, possibly with no member), later ones only where they add.
                everything = part is halves[0]
                q_ids = sorted({i for i, _ in part} | {i for i in range(len(self.q_blocks))
                                                       if everything and self._sequence(i) == s})
                kv_ids = sorted({j for _, j in part} | {j for j in range(len(self.kv_blocks))
                                                        if everything
                                                        and self._kv_sequence(j) == s})
                qg0, kg0, e0 = len(q_groups), len(kv_groups), len(entries)
                for i, j in part:
                    entries.append(dict(
                        q_off=q_off[i], kv_off=kv_off[j], q_tokens=self._len(self.q_blocks[i]),
                        kv_tokens=self._len(self.kv_blocks[j]), mask=mask(i, j),
                        q_group=qg0 + q_ids.index(i),
                        kv_group=kg0 + kv_ids.index(j) if backward else -1,
                        kv_buffer=kv_buffer[j]))
                for i in q_ids:
                    mine = [e for e in range(e0, len(entries))
                            if entries[e]["q_group"] == qg0 + q_ids.index(i)]
                    q_groups.append(dict(out_off=out_off[i], tokens=self._len(self.q_blocks[i]),
                                         accumulate=int(i in written_q),
                                         member_begin=len(members),
                                         member_end=len(members) + len(mine), input_off=q_off[i]))
                    members += mine
                    written_q.add(i)
                if backward:
                    for j in kv_ids:
                        mine = [e for e in range(e0, len(entries))
                                if entries[e]["kv_group"] == kg0 + kv_ids.index(j)]
                        kv_groups.append(dict(out_off=dkv_off[j],
                                              tokens=self._len(self.kv_blocks[j]),
                                              accumulate=int(j in written_kv),
                                              member_begin=len(members),
                                              member_end=len(members) + len(mine),
                                              input_off=kv_off[j]))
                        members += mine
                        written_kv.add(j)
                launches.append((qg0, len(q_groups), kg0, len(kv_groups),
                                 max([self._len(self.q_blocks[i]) for i in q_ids] or [0]),
                                 max([self._len(self.kv_blocks[j]) for j in kv_ids] or [0])))
        tables = {"entries": tk.table("entries", entries).numpy(),
                  "q_groups": tk.table("q_groups", q_groups).numpy(),
                  "kv_groups": tk.table("kv_groups", kv_groups).numpy(),
                  "members": np.array(members, dtype=np.int64),
                  "mask_rows": np.array(mask_rows, dtype=np.int32),
                  "mask_intervals": np.array(intervals, dtype=np.int32)}
        return (tables, arena.build(self.device), kept.build(self.device), launches,
                (out_off, dkv_off))

    def _len(self, block):
        return block[1] - block[0]

    def _sequence(self, i):
        return self._sequence_of(self.q_blocks[i][0])

    def _kv_sequence(self, j):
        return self._sequence_of(self.kv_blocks[j][0])

    def _sequence_of(self, token):
        return int(np.searchsorted(np.cumsum(self.seqlens), token, side="right"))


# --- the Triton remainder, in fp64 with the Triton kernels' table semantics ----------------

def _dense_tile(mask_rows, mask_intervals, mask, q_tokens, kv_tokens):
    if mask < 0:
        return torch.ones(q_tokens, kv_tokens, dtype=torch.bool)
    tile = torch.zeros(q_tokens, kv_tokens, dtype=torch.bool)
    for r in range(q_tokens):
        for i in range(int(mask_rows[mask + r]), int(mask_rows[mask + r + 1])):
            tile[r, int(mask_intervals[2 * i]):int(mask_intervals[2 * i + 1])] = True
    return tile


def _fields(row, table: str, *names: str) -> list[int]:
    """A table row's values of the columns `names`, by the lowering's schema."""
    columns = tk.TABLES[table]
    return [int(row[columns[name]]) for name in names]


_GROUP_FIELDS = ("out_off", "tokens", "accumulate", "member_begin", "member_end")


class TritonStandIn:
    """triton_kernels.attention_forward / attention_backward in fp64 over the same tables."""

    def __init__(self):
        self.entries_run = 0

    def _entry(self, arena, kept, entries, e, mask_rows, mask_intervals, h, hk, d, dtype):
        q_off, kv_off, t, kt, mask, buffer = _fields(entries[e], "entries", "q_off", "kv_off",
                                                     "q_tokens", "kv_tokens", "mask", "kv_buffer")
        is_kept = buffer == tk.BUFFERS["kept"]
        q = read(arena, q_off, dtype, t, h, d).double()
        source = kept if is_kept and kept is not None and kept.numel() else arena
        k = read(source, kv_off, dtype, kt, hk, d).double().repeat_interleave(h // hk, dim=1)
        v = read(source, kv_off + kt * hk * d * torch.finfo(dtype).bits // 8, dtype, kt, hk,
                 d).double().repeat_interleave(h // hk, dim=1)
        tile = _dense_tile(mask_rows, mask_intervals, mask, t, kt)
        self.entries_run += 1
        return q, k, v, tile, t, kt

    def attention_forward(self, arena, entries, groups, members, mask_rows, mask_intervals, *,
                          heads, kv_heads, head_dim, dtype, scale, max_tokens, allow_tf32=False,
                          kept=None):
        h, d = heads, head_dim
        for row in groups.tolist():
            out_off, t, accumulate, begin, end = _fields(row, "q_groups", *_GROUP_FIELDS)
            o_acc = torch.zeros(t, h, d, dtype=torch.float64)
            lse_acc = torch.full((h, t), -math.inf, dtype=torch.float64)
            if accumulate:
                o_acc = read(arena, out_off, torch.float32, t, h, d).double()
                lse_acc = read(arena, out_off + t * h * d * 4, torch.float32, h, t).double()
            for e in members[begin:end].tolist():
                q, k, v, tile, _, _ = self._entry(arena, kept, entries, e, mask_rows,
                                                  mask_intervals, h, kv_heads, d, dtype)
                s = torch.einsum("thd,khd->htk", q, k) * scale
                s = s.masked_fill(~tile, -math.inf)
                lse = torch.logsumexp(s, -1)
                o = torch.einsum("htk,khd->thd", torch.exp(s - lse[..., None]).nan_to_num(0.0), v)
                new = torch.logaddexp(lse_acc, lse)
                w_old = torch.exp(lse_acc - new).nan_to_num(0.0).T[..., None]
                w_new = torch.exp(lse - new).nan_to_num(0.0).T[..., None]
                o_acc, lse_acc = w_old * o_acc + w_new * o, new
            arena[out_off:out_off + t * h * d * 4] = o_acc.float().reshape(-1).view(torch.uint8)
            at = out_off + t * h * d * 4
            arena[at:at + h * t * 4] = lse_acc.float().reshape(-1).view(torch.uint8)

    def attention_backward(self, arena, entries, q_groups, kv_groups, members, mask_rows,
                           mask_intervals, *, heads, kv_heads, head_dim, dtype, scale,
                           max_q_tokens, max_kv_tokens, allow_tf32=False, kept=None):
        h, hk, d = heads, kv_heads, head_dim
        element = torch.empty((), dtype=dtype).element_size()

        def grads(e):
            q, k, v, tile, t, kt = self._entry(arena, kept, entries, e, mask_rows, mask_intervals,
                                               h, hk, d, dtype)
            q_off, = _fields(entries[e], "entries", "q_off")
            do = read(arena, q_off + t * h * d * element, dtype, t, h, d).double()
            stats = read(arena, q_off + 2 * t * h * d * element, torch.float32, 2, h, t).double()
            s = (torch.einsum("thd,khd->htk", q, k) * scale).masked_fill(~tile, -math.inf)
            p = torch.exp(s - stats[0][..., None]).nan_to_num(0.0).masked_fill(~tile, 0.0)
            ds = p * (torch.einsum("thd,khd->htk", do, v) - stats[1][..., None])
            fold = lambda x: x.reshape(x.shape[0], hk, h // hk, d).sum(2)  # noqa: E731
            return (torch.einsum("htk,khd->thd", ds, k) * scale,
                    fold(torch.einsum("htk,thd->khd", ds, q) * scale),
                    fold(torch.einsum("htk,thd->khd", p, do)))

        for row in q_groups.tolist():
            out_off, t, accumulate, begin, end = _fields(row, "q_groups", *_GROUP_FIELDS)
            dq = read(arena, out_off, torch.float32, t, h, d).double() if accumulate else \
                torch.zeros(t, h, d, dtype=torch.float64)
            for e in members[begin:end].tolist():
                dq += grads(e)[0]
            arena[out_off:out_off + t * h * d * 4] = dq.float().reshape(-1).view(torch.uint8)
        for row in kv_groups.tolist():
            out_off, t, accumulate, begin, end = _fields(row, "kv_groups", *_GROUP_FIELDS)
            dkv = read(arena, out_off, torch.float32, 2, t, hk, d).double() if accumulate else \
                torch.zeros(2, t, hk, d, dtype=torch.float64)
            for e in members[begin:end].tolist():
                _, dk, dv = grads(e)
                dkv[0] += dk
                dkv[1] += dv
            arena[out_off:out_off + 2 * t * hk * d * 4] = dkv.float().reshape(-1).view(torch.uint8)


# --- running a scenario through the Triton device's hook ------------------------------------

def run_scenario(scenario: Scenario, kernel, monkeypatch, wants=None, max_segments=None,
                 stand_in=True):
    """o, lse, dq, dk, dv of the whole batch through TritonDevice.attention with the route (its
    Triton remainder on the fp64 stand-in, or with stand_in False on the Triton kernels), and
    the route and stand-in."""
    from dcp.torch import _device
    stand_in = TritonStandIn() if stand_in else None
    if stand_in is not None:
        monkeypatch.setattr(_device.tk, "attention_forward", stand_in.attention_forward)
        monkeypatch.setattr(_device.tk, "attention_backward", stand_in.attention_backward)
    options = {} if max_segments is None else {"max_segments": max_segments}
    route = vr.VarlenRoute(kernel, wants=wants, **options)
    device = _device.TritonDevice(torch.device(scenario.device), route=route)
    forward, arena_f, kept_f, launches_f, (out_off, _) = scenario.pass_tables(False)
    backward, arena_b, kept_b, launches_b, (dq_off, dkv_off) = scenario.pass_tables(True)
    device.prepare(forward, backward)
    plan = types.SimpleNamespace(partial_dtype="fp32", head_block_size=scenario.h,
                                 kv_heads_per_block=scenario.hk, head_dim=scenario.d,
                                 dtype=scenario.dtype)
    device.configure(plan, [arena_f, arena_b])
    dummy = torch.zeros(1, 1, 1, dtype=scenario.torch_dtype, device=scenario.device)
    for index, (launches, kept) in enumerate(((launches_f, kept_f), (launches_b, kept_b))):
        device.set_tensors(q=dummy, o=dummy.clone(), lse=torch.zeros(1, 1), dq=dummy.clone(),
                           dk=dummy.clone(), dv=dummy.clone(), kept=kept)
        device.begin(index, scenario.scale)
        for launch in launches:
            device.attention(*launch)
        device.end()
    total = sum(scenario.seqlens)
    h, hk, d = scenario.h, scenario.hk, scenario.d
    o = torch.zeros(total, h, d, dtype=torch.float64)
    lse = torch.zeros(h, total, dtype=torch.float64)
    dq = torch.zeros(total, h, d, dtype=torch.float64)
    dk = torch.zeros(total, hk, d, dtype=torch.float64)
    dv = torch.zeros(total, hk, d, dtype=torch.float64)
    arena_f, arena_b = arena_f.cpu(), arena_b.cpu()
    for i, (a, b) in enumerate(scenario.q_blocks):
        t = b - a
        o[a:b] = read(arena_f, out_off[i], torch.float32, t, h, d).double()
        lse[:, a:b] = read(arena_f, out_off[i] + t * h * d * 4, torch.float32, h, t).double()
        dq[a:b] = read(arena_b, dq_off[i], torch.float32, t, h, d).double()
    for j, (c, e) in enumerate(scenario.kv_blocks):
        grads = read(arena_b, dkv_off[j], torch.float32, 2, e - c, hk, d).double()
        dk[c:e], dv[c:e] = grads[0], grads[1]
    return (o, lse, dq, dk, dv), route, stand_in


def assert_matches_fp64(scenario: Scenario, results, what="", tolerance=None, lse_tolerance=1e-5):
    o_ref, lse_ref, dq_ref, dk_ref, dv_ref = scenario.ref
    tolerance = tolerance or TOLERANCE[scenario.dtype]
    for name, got, want, tol in (("o", results[0], o_ref, tolerance),
                                 ("lse", results[1], lse_ref, lse_tolerance),
                                 ("dq", results[2], dq_ref, tolerance),
                                 ("dk", results[3], dk_ref, tolerance),
                                 ("dv", results[4], dv_ref, tolerance)):
        error = reference.worst_relative(got, want)
        assert error <= tol, (what, name, error)


SEQLENS = [37, 1, 29]
MASKS = {
    "causal": "causal",
    "full": "full",
    "sliding_window": "sliding_window:window=9",
    "lambda": "lambda:sink=3,window=8",
    "causal_blockwise": "causal_blockwise:block=6,local=2",
    "shared_question": "shared_question:question=0.3,answers=3",
    "chunked": "chunked:chunk=10",
}


def _masks(kind: str):
    if kind == "random":
        return [reference.random_interval_mask(n, seed=n + 5) for n in SEQLENS]
    return [MASKS[kind]] * len(SEQLENS)


@pytest.mark.parametrize("kind", [*MASKS, "random"])
def test_route_matches_fp64_attention_for_every_mask_kind(kind, monkeypatch):
    scenario = Scenario(SEQLENS, _masks(kind), seed=len(kind))
    kernel = vk.EmulatedVarlenKernel()
    results, route, stand_in = run_scenario(scenario, kernel, monkeypatch)
    assert_matches_fp64(scenario, results, kind)
    summary = route.summary()
    for name in vr.PASSES:
        assert summary[name]["routed_entries"] > 0, (kind, summary)
        if kind == "random":  # arbitrary multi-interval tiles stay on the Triton kernels
            assert summary[name]["triton_entries"] > 0, summary
        else:
            assert summary[name]["triton_entries"] == 0, (kind, summary)
    assert (stand_in.entries_run > 0) == (kind == "random")
    assert all(call[3] == 0 for call in kernel.calls), "a routed row had an empty window"


def test_a_causal_q_block_and_its_full_predecessors_are_one_causal_sequence(monkeypatch):
    scenario = Scenario([64], ["causal"], q_block=16, kv_block=16)
    kernel = vk.EmulatedVarlenKernel()
    results, route, _ = run_scenario(scenario, kernel, monkeypatch)
    assert_matches_fp64(scenario, results)
    # one class, (-1, 0), one segment per q block: one call per pass
    summary = route.summary()
    assert summary["forward"]["classes"] == [(-1, 0, False, 4)], summary
    assert [c[:3] for c in kernel.calls] == [("forward", 4, (-1, 0)), ("backward", 4, (-1, 0))]


@pytest.mark.parametrize("empty_row", vk.EMPTY_ROW_CONVENTIONS)
@pytest.mark.parametrize("lse_layout", vk.LSE_LAYOUTS)
def test_the_route_never_reads_empty_rows_and_reads_both_lse_layouts(empty_row, lse_layout,
                                                                     monkeypatch):
    """Rows without keys (random masks have some, and q blocks with none) give the same bits
    whatever the kernel returns for an empty row, and in either lse layout."""
    scenario = Scenario(SEQLENS, _masks("random"), seed=3, kept=True)
    baseline, _, _ = run_scenario(scenario, vk.EmulatedVarlenKernel(), monkeypatch)
    kernel = vk.EmulatedVarlenKernel(empty_row=empty_row, lse_layout=lse_layout)
    results, _, _ = run_scenario(scenario, kernel, monkeypatch)
    for got, want in zip(results, baseline):
        assert torch.equal(got, want)
    assert any(torch.isneginf(baseline[1]).flatten()), "the batch has rows without keys"


@pytest.mark.parametrize("heads,kv_heads,dtype", [(4, 1, "bf16"), (2, 2, "fp16"), (6, 3, "bf16")])
def test_gqa_kept_values_split_instructions_and_trimmed_tiles(heads, kv_heads, dtype,
                                                             monkeypatch):
    """GQA, kv values in the kept tensor, q blocks' tiles over two instructions (the second
    accumulating), tiles of 16 x 12 tokens whose windows need their key range trimmed, and a
    sequence of one token."""
    for kind in ("lambda", "sliding_window", "shared_question"):
        scenario = Scenario(SEQLENS, _masks(kind), heads=heads, kv_heads=kv_heads, dtype=dtype,
                            seed=heads, kept=True, split=True)
        results, route, _ = run_scenario(scenario, vk.EmulatedVarlenKernel(), monkeypatch)
        assert_matches_fp64(scenario, results, kind)
        assert any(c[2] for c in route.summary()["forward"]["classes"]), "a kept class"


def test_a_mixed_group_runs_its_triton_members_first_then_accumulates(monkeypatch):
    """wants() keeps causal tiles on Triton and routes the full ones: every q block's group has
    members on both sides."""
    scenario = Scenario([48, 20], ["causal", "causal"], q_block=8, kv_block=8, split=True)

    def wants(pass_, shape, q_tokens, kv_tokens):
        return shape == vw.FULL
    results, route, stand_in = run_scenario(scenario, vk.EmulatedVarlenKernel(), monkeypatch,
                                            wants=wants)
    assert_matches_fp64(scenario, results)
    assert stand_in.entries_run > 0 and route.summary()["backward"]["routed_entries"] > 0


def test_fp32_plans_and_tiles_beyond_the_segment_limit_stay_on_triton(monkeypatch):
    scenario = Scenario([30], ["lambda:sink=3,window=8"], q_block=30, kv_block=30)
    results, route, stand_in = run_scenario(scenario, vk.EmulatedVarlenKernel(), monkeypatch,
                                            max_segments=1)
    assert_matches_fp64(scenario, results)
    assert route.summary()["forward"]["routed_entries"] == 0 and stand_in.entries_run > 0
    route = vr.VarlenRoute(vk.EmulatedVarlenKernel())
    empty = {"entries": np.zeros((0, 8), np.int64), "q_groups": np.zeros((0, 6), np.int64),
             "kv_groups": np.zeros((0, 6), np.int64), "members": np.zeros(0, np.int64),
             "mask_rows": np.zeros(0, np.int32), "mask_intervals": np.zeros(0, np.int32)}
    route.prepare(empty, empty, heads=2, kv_heads=1, head_dim=16, dtype=torch.float32,
                  device=torch.device("cpu"))
    assert route.launch(0, 0, 0, 0, 0) is None


# --- the translation's pieces --------------------------------------------------------------

def _segments_of(rows_intervals, max_segments=8):
    rows, begins, ends = [], [], []
    for r, intervals in enumerate(rows_intervals):
        for b, e in intervals:
            rows.append(r), begins.append(b), ends.append(e)
    return vw.find_segments(np.array(rows, np.int64), np.array(begins, np.int64),
                            np.array(ends, np.int64), max_segments)


def test_windows_of_typical_tiles():
    causal = _segments_of([[(0, r + 1)] for r in range(5)])
    assert causal.tolist() == [[0, 5, 0, 5, -1, 0]]
    # rows 0..1 have no key: the segment starts at row 2 (sq 3 > sk 2 would else not fit)
    late = _segments_of([[], [], [(0, 1)], [(0, 2)], [(0, 2)]])
    assert late.tolist() == [[2, 5, 0, 2, -1, 1]]
    # a window's far edge: row r attends [r + 1, 6): left = 0, right unbounded
    edge = _segments_of([[(r + 1, 6)] for r in range(5)])
    assert edge.tolist() == [[0, 5, 1, 6, 0, -1]] and vw.window_rank(edge) == 0
    # a sink of 2 keys for rows that also see a window: two key ranges
    sink = _segments_of([[(0, 2), (r + 4, r + 7)] for r in range(6)])
    assert sink.tolist() == [[0, 6, 0, 2, -1, -1], [0, 6, 4, 12, 2, 0]]
    assert vw.shape_of(sink) == vw.SPLIT
    assert _segments_of([[(0, 1), (2, 3), (4, 5)], [(1, 2), (3, 4)]], max_segments=3) is None


def test_windows_that_reach_their_whole_key_range_are_split():
    """A causal tile of 6 rows over 2 keys: right would be 5 >= sk, which FlashAttention turns
    into -1 (unbounded) for the whole call; the segments avoid it."""
    tall = _segments_of([[(0, min(2, r + 1))] for r in range(6)])
    sk = tall[:, vw.KEY_END] - tall[:, vw.KEY_BEGIN]
    assert np.all(tall[:, vw.LEFT] < sk) and np.all(tall[:, vw.RIGHT] < sk)
    assert tall.tolist() == [[0, 1, 0, 1, -1, -1], [1, 6, 0, 2, -1, -1]]


def test_out_for_delta_gives_delta_within_one_rounding():
    g = torch.Generator().manual_seed(0)
    do = torch.randn(64, 4, 128, generator=g).to(torch.bfloat16)
    do[0] = 0.0  # a row without gradient
    do[1] = do[1] * 1e-30  # tiny, and
    do[2] = do[2] * 1e30  # huge gradients
    o = torch.randn(64, 4, 128, generator=g).to(torch.bfloat16)
    delta = (o.double() * do.double()).sum(-1)
    delta[0] = 0.0
    out = varlen_runner.out_for_delta(do, delta.float())
    got = (out.double() * do.double()).sum(-1)
    bound = 2.0 ** -8 * delta.abs() + 1e-6 * delta.abs()
    assert torch.all((got - delta).abs() <= bound + 1e-300)
    assert torch.isfinite(out.float()).all() and (out[0] == 0).all()


# --- the emulated kernel -------------------------------------------------------------------

def test_the_emulation_keeps_the_documented_causal_masks():
    """flash_attn_varlen_func's docstring: causal aligns to the bottom-right corner; (sq, sk) =
    (2, 5) keeps 11110 / 11111, (5, 2) keeps 00 / 00 / 00 / 10 / 11. Equal scores and one-hot
    values make o the rows' kept keys, divided by their count."""
    kernel = vk.EmulatedVarlenKernel()
    for sq, sk, kept in ((2, 5, [[1, 1, 1, 1, 0], [1, 1, 1, 1, 1]]),
                         (5, 2, [[0, 0], [0, 0], [0, 0], [1, 0], [1, 1]])):
        q = torch.zeros(sq, 1, 8, dtype=torch.bfloat16)
        v = torch.eye(8, dtype=torch.bfloat16)[:sk, None, :]
        cu_q = torch.tensor([0, sq], dtype=torch.int32)
        cu_k = torch.tensor([0, sk], dtype=torch.int32)
        o, _ = kernel.forward(q, v, v, cu_q, cu_k, sq, sk, 1.0, -1, 0)
        assert torch.equal(o[:, 0, :sk] > 0, torch.tensor(kept, dtype=torch.bool)), (sq, sk)


def test_the_emulation_matches_sdpa_with_windows_and_gqa():
    g = torch.Generator().manual_seed(1)
    lengths_q, lengths_k = [5, 9, 1], [7, 9, 3]
    q = torch.randn(sum(lengths_q), 4, 8, generator=g).to(torch.bfloat16)
    k = torch.randn(sum(lengths_k), 2, 8, generator=g).to(torch.bfloat16)
    v = torch.randn(sum(lengths_k), 2, 8, generator=g).to(torch.bfloat16)
    do = torch.randn(sum(lengths_q), 4, 8, generator=g).to(torch.bfloat16)
    cu_q = torch.tensor(np.concatenate(([0], np.cumsum(lengths_q))), dtype=torch.int32)
    cu_k = torch.tensor(np.concatenate(([0], np.cumsum(lengths_k))), dtype=torch.int32)
    kernel = vk.EmulatedVarlenKernel()
    for left, right in ((-1, -1), (-1, 0), (2, 0), (0, -1), (1, 1)):
        o, lse = kernel.forward(q, k, v, cu_q, cu_k, 9, 9, 0.3, left, right)
        dq, dk, dv = kernel.backward(do, q, k, v, o, lse, cu_q, cu_k, 9, 9, 0.3, left, right)
        for b in range(3):
            qs, ks_ = slice(cu_q[b], cu_q[b + 1]), slice(cu_k[b], cu_k[b + 1])
            sq, sk = lengths_q[b], lengths_k[b]
            i, j = torch.arange(sq)[:, None], torch.arange(sk)[None, :]
            allowed = torch.ones(sq, sk, dtype=torch.bool)
            if left >= 0:
                allowed &= j >= i + sk - sq - left
            if right >= 0:
                allowed &= j <= i + sk - sq + right
            if not allowed.any(dim=1).all():
                continue
            leaves = [x[s].double().transpose(0, 1).requires_grad_() for x, s in
                      ((q, qs), (k, ks_), (v, ks_))]
            ref = torch.nn.functional.scaled_dot_product_attention(
                *leaves, attn_mask=allowed, scale=0.3, enable_gqa=True)
            ref.backward(do[qs].double().transpose(0, 1))
            assert reference.worst_relative(o[qs].transpose(0, 1), ref) < 1e-2
            for got, leaf in zip((dq[qs], dk[ks_], dv[ks_]), leaves):
                assert reference.worst_relative(got.transpose(0, 1), leaf.grad) < 2e-2


def test_the_emulation_applies_its_empty_row_convention_and_checks_its_inputs():
    q = torch.ones(3, 2, 8, dtype=torch.bfloat16)
    k = torch.ones(2, 1, 8, dtype=torch.bfloat16)
    cu_q = torch.tensor([0, 3], dtype=torch.int32)
    cu_k = torch.tensor([0, 2], dtype=torch.int32)
    for convention, lse_value in (("+inf", math.inf), ("-inf", -math.inf), ("nan", math.nan)):
        kernel = vk.EmulatedVarlenKernel(empty_row=convention)
        o, lse = kernel.forward(q, k, k, cu_q, cu_k, 3, 2, 1.0, -1, 0)  # row 0: no key
        assert torch.equal(lse[:, 0].isnan(), torch.full((2,), math.isnan(lse_value)))
        if not math.isnan(lse_value):
            assert (lse[:, 0] == lse_value).all() and (o[0] == 0).all()
        assert kernel.calls[-1][3] == 1
    kernel = vk.EmulatedVarlenKernel()
    with pytest.raises(ValueError, match="longer than max"):
        kernel.forward(q, k, k, cu_q, cu_k, 2, 2, 1.0, -1, -1)
    with pytest.raises(ValueError, match="fp16 or bf16"):
        kernel.forward(q.float(), k.float(), k.float(), cu_q, cu_k, 3, 2, 1.0, -1, -1)
    # a window end at max_k or beyond is unbounded, as in FlashAttention
    assert kernel.forward(q, k, k, cu_q, cu_k, 3, 2, 1.0, 2, -1)[1].isfinite().all()
    assert kernel.calls[-1][2] == (-1, -1)


def test_flash_on_a_device_without_the_kernels_is_refused_naming_it(monkeypatch):
    import dcp.torch as dcpt
    with pytest.raises(ValueError, match="cpu is not a CUDA device"):
        vr.route_for("flash", torch.device("cpu"))
    with pytest.raises(ValueError, match="attention_kernels 'fast'"):
        dcpt.DCPExecutor(attention_kernels="fast")
    with pytest.raises(ValueError, match="kernels='cpu' has none"):
        dcpt.DCPExecutor(kernels="cpu", attention_kernels="flash")
    monkeypatch.delenv(ks.TIMINGS_ENVIRONMENT, raising=False)
    assert vr.route_for("auto", torch.device("cpu")) is None  # no table: all on Triton
    assert vr.route_for("triton", torch.device("cpu")) is None


# --- the kernel selection ------------------------------------------------------------------

def _record(pass_="forward", shape="causal", tokens=4096, kernel="flash", seconds=1e-3):
    return {"pass": pass_, "shape": shape, "tokens": tokens, "kernel": kernel,
            "seconds": seconds}


def test_selection_picks_the_faster_kernel_per_class_and_triton_on_ties_or_gaps():
    records = [_record(kernel="flash", seconds=1e-3), _record(kernel="triton", seconds=2e-3),
               _record(kernel="sdpa_flash", seconds=5e-4),
               _record(shape="full", kernel="flash", seconds=2e-3),
               _record(shape="full", kernel="triton", seconds=2e-3),
               _record(pass_="backward", kernel="flash", seconds=1e-3),
               _record(shape="split", tokens=1024, kernel="flash", seconds=1e-4),
               _record(shape="split", tokens=1024, kernel="triton", seconds=1e-3)]
    choices = ks.choose_kernels({"records": records})
    assert choices == {("forward", "causal", 4096): "flash", ("forward", "full", 4096): "triton",
                       ("backward", "causal", 4096): "triton",
                       ("forward", "split", 1024): "flash"}
    assert ks.kernel_for(choices, "forward", "causal", 3000, 4096) == "flash"
    assert ks.kernel_for(choices, "forward", "causal", 4097, 10) == "triton"  # bucket 8192
    assert ks.kernel_for(choices, "forward", "window", 4096, 4096) == "triton"
    assert ks.bucket(1) == 1 and ks.bucket(1024) == 1024 and ks.bucket(1025) == 2048


@pytest.mark.parametrize("bad,words", [
    (_record(pass_="sideways"), "pass 'sideways'"),
    (_record(shape="other"), "shape 'other'"),
    (_record(tokens=0), "tokens 0"),
    (_record(tokens=True), "tokens True"),
    (_record(kernel="cudnn"), "kernel 'cudnn'"),
    (_record(seconds=-1.0), "seconds -1.0"),
    (_record(seconds=float("nan")), "seconds nan"),
    ({"pass": "forward"}, "has the fields"),
    ("forward causal", "has the fields"),
])
def test_selection_refuses_bad_tables_naming_the_entry(bad, words):
    with pytest.raises(ValueError, match=f"timings entry 1 .*{words}"):
        ks.choose_kernels([_record(kernel="triton"), bad])
    with pytest.raises(ValueError, match="measured again"):
        ks.choose_kernels([_record(), _record(tokens=3000)])
    with pytest.raises(ValueError, match="a table is"):
        ks.choose_kernels({"rows": []})


def test_the_timing_table_file_is_read_and_refused_naming_it(tmp_path, monkeypatch):
    import json
    path = tmp_path / "timings.json"
    path.write_text(json.dumps({"records": [_record(kernel="flash", seconds=1e-3),
                                            _record(kernel="triton", seconds=2e-3)]}))
    monkeypatch.setenv(ks.TIMINGS_ENVIRONMENT, str(path))
    assert ks.choices_from_environment() == {("forward", "causal", 4096): "flash"}
    route = vr.route_for("auto", torch.device("cpu"), vk.EmulatedVarlenKernel())
    assert route.wants("forward", "causal", 4096, 4096)
    assert not route.wants("backward", "causal", 4096, 4096)
    path.write_text("{not json")
    with pytest.raises(ValueError, match="timings.json: cannot read"):
        ks.choices_from_environment()


# --- the executor end to end ---------------------------------------------------------------

EXECUTOR_CASES = [
    dict(name="causal-gqa-bf16", seqlens=[15, 1, 19], masks="causal", heads=2, kv_heads=1,
         head_dim=16, dtype="bf16", block_size=8, strategy="dcp-pure", seed=1),
    dict(name="random-and-lambda-fp16", seqlens=[15, 1, 19],
         masks=[reference.random_interval_mask(15, seed=4), "lambda:sink=2,window=5",
                "lambda:sink=3,window=6"],
         heads=2, kv_heads=1, head_dim=16, dtype="fp16", block_size=16, strategy="dcp-pure",
         seed=2),  # tiles of 16 rows: the random ones need more than 8 segments
]
SIZES = {1: EXECUTOR_CASES[:1], 2: EXECUTOR_CASES}  # each interpreted case costs seconds


@functools.lru_cache(maxsize=None)
def _executor_results(size: int):
    return run_world(size, dist_cases.flash_route_cases, SIZES[size], timeout=600,
                     group_timeout=300, triton_interpreter=True)


@pytest.mark.parametrize("size", [1, 2])
def test_executor_with_the_flash_route_matches_fp64_and_the_cpu_kernels(size):
    """The whole executor (loads, attention, merges, transfers over gloo, stores) with the route;
    the cpu kernels stand for the Triton path here (test_triton_executor.py shows they agree)."""
    for index, case in enumerate(SIZES[size]):
        total = sum(case["seqlens"])
        masks = case["masks"] if isinstance(case["masks"], list) else [case["masks"]] * 3
        q, k, v, do = reference.inputs(total, case["heads"], case["kv_heads"], case["head_dim"],
                                       case["dtype"], case["seed"])
        ref = reference.dense_attention(q, k, v, do, reference.dense_mask(case["seqlens"], masks))
        for rank, per_rank in enumerate(_executor_results(size)):
            flash, cpu = per_rank[index]
            positions = flash["positions"].long()
            for name, want in zip(("o", "lse", "dq", "dk", "dv"), ref):
                local = want[:, positions] if name == "lse" else want[positions]
                error = reference.worst_relative(flash[name], local)
                assert error <= reference.TOLERANCE[case["dtype"]], (size, rank, name, error)
                error = reference.worst_relative(flash[name], cpu[name])
                assert error <= TOLERANCE[case["dtype"]], (size, rank, name, "cpu", error)
        routes = [r[index][0]["route"][p] for r in _executor_results(size) for p in vr.PASSES]
        assert sum(r["routed_entries"] for r in routes) > 0, routes
        if case["name"].startswith("random"):  # its arbitrary tiles ran on the Triton kernels
            assert sum(r["triton_entries"] for r in routes) > 0, routes


# --- on CUDA: torch's FlashAttention kernels -----------------------------------------------

@pytest.mark.skipif(not torch.cuda.is_available() or vk.flash_unavailable(torch.device("cuda"))
                    is not None, reason="needs a GPU with torch's FlashAttention kernels")
@pytest.mark.parametrize("kind", [*MASKS, "random"])
def test_route_on_cuda_matches_fp64_attention(kind, monkeypatch):
    scenario = Scenario([300, 1, 257], [_masks(kind)[0]] * 3 if kind != "random" else
                        [reference.random_interval_mask(n, seed=n) for n in (300, 1, 257)],
                        q_block=128, kv_block=96, heads=8, kv_heads=2, head_dim=128,
                        dtype="bf16", seed=7, kept=True, split=True, device="cuda")
    kernel = vk.AtenFlashKernel(torch.device("cuda"))
    results, route, _ = run_scenario(scenario, kernel, monkeypatch, stand_in=False)
    # the Triton remainder's bf16 dots on tensor cores: test_triton_kernels.py's tolerance
    assert_matches_fp64(scenario, results, kind, tolerance=reference.TOLERANCE["bf16"],
                        lse_tolerance=1e-4)
    assert route.summary()["forward"]["routed_entries"] > 0
