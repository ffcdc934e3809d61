# SPDX-License-Identifier: Apache-2.0
"""The flash route: an attention instruction's tiles as FlashAttention varlen calls where their
masks fit its windows (dcp.torch.kernels.varlen_windows), on the Triton kernels where not. This
module translates the lowering's tables (layouts in triton_kernels.py) once per prepare, on the
host; dcp.torch.kernels.varlen_runner runs an instruction from the translation.

Translation:
  1. every entry (tile) whose mask fits in at most max_segments segments, and whose class the
     selection gives to flash in "auto" (wants), is routed; the others stay on the Triton
     kernels, entry by entry;
  2. a q group's routed entries on one kv buffer (arena or kept tensor) are laid side by side
     on one key axis (varlen_windows.window_rank orders them) and cut into segments: a causal q
     block with its full predecessors becomes one causal sequence, a sliding window's band one
     window; where that gives no fewer segments than the entries' own, each keeps its own;
  3. segments are grouped by (window, kv buffer) into *classes*, ordered by q group. Per class
     and pass the route keeps, for every packed row of its sequences, where the row lies (q, do,
     lse and delta in kQ / kQGrad slots; k and v in kKV slots or the kept tensor) and where its
     results go (kOut, kDQ, kDKV rows); per group, whether the route overwrites or accumulates
     (it accumulates where the group accumulates or has Triton members, which run first) and
     the rows it must clear or write;
  4. an instruction owns a contiguous range of q groups (and kv groups), so its segments of a
     class are a contiguous range: its calls are slices of the pass's tables, made on its first
     run and kept; nothing is built or copied to the device while a pass runs;
  5. the Triton remainder: the same group tables with only the Triton members (a group without
     any becomes a row that accumulates nothing, leaving its slot as it is).
"""
from __future__ import annotations

import dataclasses
import math

import numpy as np
import torch

from dcp.torch.kernels import triton_kernels as tk
from dcp.torch.kernels import varlen_kernels, varlen_runner
from dcp.torch.kernels import varlen_windows as vw

# The tables' columns by name, from the lowering's schema (dcp._core.LOWERING_SCHEMA).
_ENTRY_COLUMNS = tk.TABLES["entries"]
_GROUP_COLUMNS = tk.TABLES["q_groups"]
_KEPT = tk.BUFFERS["kept"]

PASSES = ("forward", "backward")
MAX_SEGMENTS = 8  # per tile; a mask needing more stays on the Triton kernels


def _columns(table: np.ndarray, columns: dict[str, int]) -> dict[str, np.ndarray]:
    table = np.asarray(table, dtype=np.int64).reshape(-1, len(columns))
    return {name: table[:, i] for name, i in columns.items()}


@dataclasses.dataclass(frozen=True)
class _Geometry:
    """Bytes per row of each value and the chunk each is addressed in."""
    heads: int
    kv_heads: int
    head_dim: int
    dtype: torch.dtype

    @property
    def element(self) -> int:
        return torch.finfo(self.dtype).bits // 8

    def heads_of(self, kind: str) -> int:
        """q and o (dq) rows hold the q heads, kv and dkv rows the kv heads."""
        return self.heads if kind in ("q", "o") else self.kv_heads

    def row(self, kind: str) -> int:
        return self.heads_of(kind) * self.head_dim * (self.element if kind in ("q", "kv") else 4)

    def chunk(self, kind: str) -> int:
        return math.gcd(64, self.row(kind))

    def per_row(self, kind: str) -> int:
        return self.row(kind) // self.chunk(kind)


class _Rows:
    """Accumulates numpy arrays per name, concatenated once."""

    def __init__(self):
        self.parts: dict[str, list[np.ndarray]] = {}

    def add(self, **arrays):
        for name, array in arrays.items():
            self.parts.setdefault(name, []).append(np.asarray(array, dtype=np.int64))

    def arrays(self) -> dict[str, np.ndarray]:
        return {name: np.concatenate(parts) for name, parts in self.parts.items()}


@dataclasses.dataclass
class _Class:
    """The segments of one (left, right, kv buffer) class of a pass, ordered by q group."""
    left: int
    right: int
    kept: bool
    group: np.ndarray  # q group per segment (host)
    sq: np.ndarray
    sk: np.ndarray
    cq: np.ndarray  # prefix sums (host)
    ck: np.ndarray
    rows: dict  # device tensors per packed row (q side) or packed key (kv side)
    host_dest: np.ndarray | None  # forward: each packed row's row in its pass's group rows


def _prefix(values) -> np.ndarray:
    return np.concatenate(([0], np.cumsum(np.asarray(values, dtype=np.int64))))


def _has_triton(groups: dict, members: np.ndarray, routed: np.ndarray) -> np.ndarray:
    """Per group: whether any of its members stays on the Triton kernels."""
    return np.array([bool(np.any(~routed[members[b:e]]))
                     for b, e in zip(groups["member_begin"], groups["member_end"])], dtype=bool)


def _group_rows(groups: dict) -> tuple[np.ndarray, np.ndarray]:
    """(group, row within it) of every row of the groups' outputs, in order."""
    tokens = groups["tokens"]
    owner = np.repeat(np.arange(tokens.size), tokens)
    base = _prefix(tokens)
    return owner, np.arange(base[-1]) - base[:-1][owner]


class _Pass:
    """One pass's translation: classes, the groups' output rows and the Triton remainder."""

    def __init__(self, route: "VarlenRoute", index: int, tables: dict, device: torch.device):
        self.index = index
        self.backward = index == 1
        self._put = lambda a: torch.from_numpy(np.ascontiguousarray(a)).to(device)  # noqa
        entries = _columns(tables["entries"], _ENTRY_COLUMNS)
        q_groups = _columns(tables["q_groups"], _GROUP_COLUMNS)
        kv_groups = _columns(tables["kv_groups"], _GROUP_COLUMNS) if self.backward else None
        members = np.asarray(tables["members"], dtype=np.int64)
        own, routed = self._route_entries(route, entries, tables)
        self.routed_entries = int(routed.sum())
        self.triton_entries = routed.size - self.routed_entries
        self.row_base = _prefix(q_groups["tokens"])  # each q group's first row in the pass
        per_class = self._segments(route, entries, q_groups, members, own, routed)
        self.segments = sum(len(found) for found in per_class.values())
        self.classes = [self._class(key, found, entries, q_groups, kv_groups, route.geometry)
                        for key, found in sorted(per_class.items())]
        self.triton_prefix = _prefix([np.count_nonzero(~routed[members[b:e]]) for b, e in
                                      zip(q_groups["member_begin"], q_groups["member_end"])])
        q_accumulate = (q_groups["accumulate"] != 0) | _has_triton(q_groups, members, routed)
        if self.backward:
            kv_accumulate = ((kv_groups["accumulate"] != 0)
                             | _has_triton(kv_groups, members, routed))
            self._backward_outputs(route.geometry, q_groups, q_accumulate, kv_groups,
                                   kv_accumulate)
        else:
            self._forward_outputs(route.geometry, q_groups, q_accumulate)
        self.triton_tables = None
        if self.triton_entries and self.routed_entries:
            self.triton_tables = self._triton_remainder(q_groups, kv_groups, members, routed)

    def _route_entries(self, route, entries, tables):
        """Step 1: each entry's own segments (None: it does not fit) and whether it is routed."""
        mask_rows = np.asarray(tables["mask_rows"])
        mask_intervals = np.asarray(tables["mask_intervals"])
        own, routed, found = [], [], {}
        for mask, q_tokens, kv_tokens in zip(entries["mask"].tolist(),
                                             entries["q_tokens"].tolist(),
                                             entries["kv_tokens"].tolist()):
            key = (mask, q_tokens, kv_tokens)
            if key not in found:  # tiles share masks (the Program lists each mask once)
                segments = vw.find_segments(*vw.tile_intervals(mask_rows, mask_intervals, *key),
                                            route.max_segments)
                found[key] = segments, vw.shape_of(segments)
            segments, shape = found[key]
            own.append(segments)
            routed.append(segments is not None
                          and route.wants(PASSES[self.index], shape, q_tokens, kv_tokens))
        return own, np.array(routed, dtype=bool)

    def _segments(self, route, entries, q_groups, members, own, routed) -> dict:
        """Step 2: {(left, right, kept): [(q group, segment, axis entry, axis row)]}."""
        per_class: dict[tuple, list] = {}
        found: dict = {}
        for group, (begin, end) in enumerate(zip(q_groups["member_begin"],
                                                 q_groups["member_end"])):
            mine = members[begin:end]
            for kept in (False, True):
                units = [int(e) for e in mine
                         if routed[e] and (entries["kv_buffer"][e] == _KEPT) == kept]
                if not units:
                    continue
                for segment, axis_entry, axis_row in _group_segments(units, own, entries,
                                                                     found):
                    key = (int(segment[vw.LEFT]), int(segment[vw.RIGHT]), kept)
                    per_class.setdefault(key, []).append((group, segment, axis_entry, axis_row))
        return per_class

    def _forward_outputs(self, g: _Geometry, q_groups, accumulate) -> None:
        """Every q group row's kOut o chunk and lse element, and whether the route merges."""
        owner, rows = _group_rows(q_groups)
        out_off, tokens = q_groups["out_off"][owner], q_groups["tokens"][owner]
        self.accumulate_prefix = _prefix(accumulate.astype(np.int64))
        self.out = {"o": self._put((out_off + rows * g.row("o")) // g.chunk("o")),
                    "lse": self._put((out_off + tokens * g.row("o")) // 4 + rows),
                    "lse_stride": self._put(tokens),
                    "accumulate": self._put(accumulate[owner])}

    def _backward_outputs(self, g: _Geometry, q_groups, q_accumulate, kv_groups,
                          kv_accumulate) -> None:
        """The kDQ and kDKV rows the route clears first (groups it overwrites), in group order,
        with each group's first place in them."""
        owner, rows = _group_rows(q_groups)
        dq = (q_groups["out_off"][owner] + rows * g.row("o")) // g.chunk("o")
        kv_owner, kv_rows = _group_rows(kv_groups)
        dk = (kv_groups["out_off"][kv_owner] + kv_rows * g.row("dkv")) // g.chunk("dkv")
        dv = dk + kv_groups["tokens"][kv_owner] * g.per_row("dkv")
        self.dq_zero_prefix = _prefix(np.where(q_accumulate, 0, q_groups["tokens"]))
        self.dkv_zero_prefix = _prefix(np.where(kv_accumulate, 0, kv_groups["tokens"]))
        clear_q, clear_kv = ~q_accumulate[owner], ~kv_accumulate[kv_owner]
        self.zero = {"dq": self._put(dq[clear_q]), "dk": self._put(dk[clear_kv]),
                     "dv": self._put(dv[clear_kv])}

    def _triton_remainder(self, q_groups, kv_groups, members, routed) -> dict:
        """Step 5: group tables listing only the Triton members."""
        remainder, kept = {}, []
        for name, groups in [("q_groups", q_groups)] + ([("kv_groups", kv_groups)]
                                                        if self.backward else []):
            column = _GROUP_COLUMNS
            table = np.stack([groups[c] for c in sorted(column, key=column.get)], axis=1)
            for row in table:
                mine = [int(e) for e in members[row[column["member_begin"]]:
                                                row[column["member_end"]]] if not routed[e]]
                # A group without Triton members: accumulate nothing (its slot stays as is).
                if not mine:
                    row[column["accumulate"]] = 1
                row[column["member_begin"]] = len(kept)
                kept += mine
                row[column["member_end"]] = len(kept)
            remainder[name] = self._put(table.reshape(-1, len(_GROUP_COLUMNS)))
        remainder["members"] = self._put(np.array(kept, dtype=np.int64))
        return remainder

    def _class(self, key, found, entries, q_groups, kv_groups, g: _Geometry) -> _Class:
        """Step 3: one class's segments, their rows and keys."""
        left, right, kept = key
        rows = _Rows()
        keys = _Rows()
        groups, sq, sk = [], [], []
        for group, segment, axis_entry, axis_row in found:
            r = np.arange(segment[vw.ROW_BEGIN], segment[vw.ROW_END])
            e = axis_entry[segment[vw.KEY_BEGIN]:segment[vw.KEY_END]]
            c = axis_row[segment[vw.KEY_BEGIN]:segment[vw.KEY_END]]
            first = axis_entry[0]
            q_off, t_q = entries["q_off"][first], entries["q_tokens"][first]
            q_rows = (q_off + r * g.row("q")) // g.chunk("q")
            out_off = q_groups["out_off"][group]
            if not self.backward:
                rows.add(q=q_rows, dest=self.row_base[group] + r)
            else:
                rows.add(q=q_rows, do=q_rows + t_q * g.per_row("q"),
                         stat=(q_off + 2 * t_q * g.row("q")) // 4 + r,
                         stat_stride=np.full(r.size, t_q),
                         dq=(out_off + r * g.row("o")) // g.chunk("o"))
            k_rows = (entries["kv_off"][e] + c * g.row("kv")) // g.chunk("kv")
            keys.add(k=k_rows, v=k_rows + entries["kv_tokens"][e] * g.per_row("kv"))
            if self.backward:
                kv_group = entries["kv_group"][e]
                dk = (kv_groups["out_off"][kv_group] + c * g.row("dkv")) // g.chunk("dkv")
                keys.add(dk=dk, dv=dk + kv_groups["tokens"][kv_group] * g.per_row("dkv"))
            groups.append(group)
            sq.append(r.size)
            sk.append(e.size)
        sq, sk = np.array(sq, dtype=np.int64), np.array(sk, dtype=np.int64)
        cq, ck = _prefix(sq), _prefix(sk)
        put = self._put
        tensors = {name: put(a) for name, a in {**rows.arrays(), **keys.arrays()}.items()}
        # Each packed row's sequence (in the class) and place in it: a padded lse's index.
        tensors["sequence"] = put(np.repeat(np.arange(sq.size), sq))
        tensors["position"] = put(np.arange(cq[-1]) - np.repeat(cq[:-1], sq))
        tensors["cu_q"] = put(cq.astype(np.int32))
        tensors["cu_k"] = put(ck.astype(np.int32))
        host_dest = rows.arrays().get("dest")
        return _Class(left, right, bool(kept), np.array(groups, dtype=np.int64), sq, sk, cq, ck,
                      tensors, host_dest)


def _group_segments(units: list[int], own: list, entries: dict, found: dict):
    """(segment, axis entry, axis row) of a q group's routed entries on one kv buffer: laid side
    by side on one key axis if that gives fewer segments, else each entry's own (each on its
    own stretch of the axis). `found` caches the segments by the tiles' masks and sizes in axis
    order (the q groups of a long sequence mostly repeat one pattern)."""
    order = sorted(units, key=lambda e: vw.window_rank(own[e]))
    kv_tokens = [int(entries["kv_tokens"][e]) for e in order]
    offsets = _prefix(kv_tokens)
    axis_entry = np.repeat(np.array(order, dtype=np.int64), kv_tokens)
    axis_row = np.arange(offsets[-1]) - np.repeat(offsets[:-1], kv_tokens)
    key = tuple((int(entries["mask"][e]), int(entries["q_tokens"][e]), t)
                for e, t in zip(order, kv_tokens))
    if key not in found:
        found[key] = _side_by_side(order, own, offsets, int(entries["q_tokens"][order[0]]))
    segments = found[key]
    for segment in segments:
        yield segment, axis_entry, axis_row


def _side_by_side(order: list[int], own: list, offsets: np.ndarray, q_tokens: int) -> np.ndarray:
    """The segments of tiles laid side by side at `offsets`, or their own where that is no
    fewer."""
    separate = sum(own[e].shape[0] for e in order)
    last = own[order[-1]]
    fulls = all(own[e].shape[0] == 1 and np.array_equal(own[e][0], [0, q_tokens, 0, end - offset,
                                                                    -1, -1])
                for e, offset, end in zip(order[:-1], offsets[:-2], offsets[1:-1]))
    if len(order) > 1 and fulls and last.shape[0] == 1 and last[0, vw.ROW_BEGIN] == 0 \
            and last[0, vw.ROW_END] == q_tokens and last[0, vw.KEY_BEGIN] == 0 \
            and last[0, vw.LEFT] < 0:
        # Full tiles, then one whose rows all start at its first key (a causal diagonal, a
        # full tile): every row's keys run from the axis' start, and the last tile's right
        # edge keeps its window (right is relative to the bottom-right corner).
        return np.array([[0, q_tokens, 0, offsets[-2] + last[0, vw.KEY_END], -1,
                          last[0, vw.RIGHT]]], dtype=np.int64)
    segments = None
    if len(order) > 1 and separate > 1:
        parts, full = [], None  # consecutive whole full tiles: one interval per row
        for e, offset, end in zip(order, offsets[:-1], offsets[1:]):
            if own[e].shape[0] == 1 and np.array_equal(own[e][0],
                                                       [0, q_tokens, 0, end - offset, -1, -1]):
                full = (full[0] if full else offset, end)
                continue
            if full:
                parts.append(_full_rows(q_tokens, *full))
                full = None
            rows, lo, hi = vw.segment_intervals(own[e])
            parts.append((rows, lo + offset, hi + offset))
        if full:
            parts.append(_full_rows(q_tokens, *full))
        rows, lo, hi = (np.concatenate(x) for x in zip(*parts))
        by_row = np.lexsort((lo, rows))
        segments = vw.find_segments(rows[by_row], lo[by_row], hi[by_row], separate - 1)
    if segments is None:
        segments = np.concatenate([own[e] + np.array([0, 0, offset, offset, 0, 0])
                                   for e, offset in zip(order, offsets[:-1])])
    return segments


def _full_rows(q_tokens: int, begin: int, end: int):
    rows = np.arange(q_tokens, dtype=np.int64)
    return rows, np.full(q_tokens, begin, dtype=np.int64), np.full(q_tokens, end, dtype=np.int64)


_Q_SIDE = ("q", "do", "stat", "stat_stride", "dq", "dest", "position")  # per packed q row
_KV_SIDE = ("k", "v", "dk", "dv")  # per packed key


class _Launch:
    """One attention instruction on the route: its calls (slices of its pass's classes), the
    rows its results go to, and the Triton remainder's tables (None: nothing left for the
    Triton kernels)."""

    def __init__(self, geometry: _Geometry, pass_: _Pass, q_begin: int, q_end: int,
                 kv_begin: int, kv_end: int, device: torch.device):
        self.pass_ = pass_
        self.base, self.end = int(pass_.row_base[q_begin]), int(pass_.row_base[q_end])
        heads = torch.arange(geometry.heads, device=device)
        self.calls = []
        for cls in pass_.classes:
            lo, hi = (int(x) for x in np.searchsorted(cls.group, [q_begin, q_end]))
            if hi > lo:
                self.calls.append(self._call(cls, lo, hi, heads))
        has_triton = pass_.triton_prefix[q_end] > pass_.triton_prefix[q_begin]
        self.triton_tables = pass_.triton_tables if has_triton else None
        if pass_.backward:
            z, q_zero, kv_zero = pass_.zero, pass_.dq_zero_prefix, pass_.dkv_zero_prefix
            self.zero_dq = z["dq"][q_zero[q_begin]:q_zero[q_end]]
            self.zero_dk = z["dk"][kv_zero[kv_begin]:kv_zero[kv_end]]
            self.zero_dv = z["dv"][kv_zero[kv_begin]:kv_zero[kv_end]]
        else:
            self._outputs(pass_, q_begin, q_end, heads)

    def _call(self, cls: _Class, lo: int, hi: int, heads: torch.Tensor) -> dict:
        """Segments [lo, hi) of a class: one kernel call."""
        a, b = int(cls.cq[lo]), int(cls.cq[hi])
        ka, kb = int(cls.ck[lo]), int(cls.ck[hi])
        q_side = {n: t[a:b] for n, t in cls.rows.items() if n in _Q_SIDE}
        q_side["sequence"] = cls.rows["sequence"][a:b] - lo
        call = dict(left=cls.left, right=cls.right, kept=cls.kept,
                    cu_q=cls.rows["cu_q"][lo:hi + 1] - a, cu_k=cls.rows["cu_k"][lo:hi + 1] - ka,
                    max_q=int(cls.sq[lo:hi].max()), max_k=int(cls.sk[lo:hi].max()),
                    sequences=hi - lo, q=q_side,
                    kv={n: t[ka:kb] for n, t in cls.rows.items() if n in _KV_SIDE})
        if "stat" in q_side:  # lse[h][row] of each packed row and q head (delta after it)
            call["stat"] = q_side["stat"][:, None] + heads[None, :] * q_side["stat_stride"][:,
                                                                                           None]
        if "dest" in q_side:  # rows of the instruction's outputs
            call["dest"] = q_side["dest"] - self.base
        return call

    def _outputs(self, pass_: _Pass, q_begin: int, q_end: int, heads: torch.Tensor) -> None:
        out, rows = pass_.out, slice(self.base, self.end)
        self.accumulates = pass_.accumulate_prefix[q_end] > pass_.accumulate_prefix[q_begin]
        self.out_rows = out["o"][rows]
        self.out_lse = out["lse"][rows, None] + heads[None, :] * out["lse_stride"][rows, None]
        self.out_accumulate = out["accumulate"][rows]
        # One call whose segments hold every row of the instruction once, with nothing to merge
        # into: its results are the outputs, written straight to their rows.
        self.direct = not self.accumulates and len(self.calls) == 1 and \
            self._covers_once(pass_.classes, q_begin, q_end)
        if self.direct:
            dest = self.calls[0]["dest"]
            self.direct_rows, self.direct_lse = self.out_rows[dest], self.out_lse[dest]

    def _covers_once(self, classes, q_begin, q_end) -> bool:
        for cls in classes:
            lo, hi = np.searchsorted(cls.group, [q_begin, q_end])
            if hi > lo:
                dest = cls.host_dest[int(cls.cq[lo]):int(cls.cq[hi])]
                return np.array_equal(np.sort(dest), np.arange(self.base, self.end))
        return False


class VarlenRoute:
    """The flash route of a Triton device: prepare() translates both passes' tables; launch()
    gives the route's part of one attention instruction (None: all of it on Triton).

    kernel: a varlen kernel (varlen_kernels.AtenFlashKernel on CUDA, EmulatedVarlenKernel in
    tests). wants(pass, shape, q_tokens, kv_tokens): whether an expressible tile goes to the
    kernel (default: all); max_segments: the most segments a tile may need."""

    def __init__(self, kernel, *, wants=None, max_segments: int = MAX_SEGMENTS):
        self.kernel = kernel
        self.wants = wants or (lambda pass_, shape, q_tokens, kv_tokens: True)
        self.max_segments = max_segments
        self.geometry: _Geometry | None = None
        self._passes: list[_Pass | None] = [None, None]
        self._launches: dict = {}

    def prepare(self, forward: dict, backward: dict, *, heads: int, kv_heads: int,
                head_dim: int, dtype: torch.dtype, device: torch.device) -> None:
        """Both passes' tables (host numpy arrays, as the lowering exports them)."""
        self.geometry = _Geometry(heads, kv_heads, head_dim, dtype)
        self._launches = {}
        self.device = device
        if not varlen_kernels.supports(dtype, head_dim):
            self._passes = [None, None]
            return
        self._passes = [_Pass(self, i, tables, device) for i, tables in enumerate((forward,
                                                                                   backward))]

    def summary(self) -> dict:
        """Per pass: entries on the route and on Triton, segments, and calls per class."""
        out = {}
        for name, p in zip(PASSES, self._passes):
            if p is None:
                out[name] = {"routed_entries": 0, "triton_entries": None, "segments": 0,
                             "classes": []}
                continue
            out[name] = {"routed_entries": p.routed_entries, "triton_entries": p.triton_entries,
                         "segments": p.segments,
                         "classes": [(c.left, c.right, c.kept, int(c.sq.size)) for c in p.classes]}
        return out

    def launch(self, pass_index: int, q_begin: int, q_end: int, kv_begin: int,
               kv_end: int) -> _Launch | None:
        """The route's part of one attention instruction (cached per instruction), or None when
        the Triton kernels run all of it."""
        p = self._passes[pass_index]
        if p is None or p.routed_entries == 0:
            return None
        key = (pass_index, q_begin, q_end, kv_begin, kv_end)
        if key not in self._launches:
            launch = _Launch(self.geometry, p, q_begin, q_end, kv_begin, kv_end, self.device)
            # No segment in this instruction: the Triton kernels run it with the original tables.
            self._launches[key] = launch if launch.calls else None
        return self._launches[key]

    def run(self, launch: _Launch, arena: torch.Tensor, kept: torch.Tensor | None,
            scale: float) -> None:
        """Runs the route's part of an instruction on the pass's arena (and kept tensor)."""
        run = varlen_runner.run_backward if launch.pass_.backward else varlen_runner.run_forward
        run(launch, self.geometry, self.kernel, arena, kept, scale)


ATTENTION_KERNELS = ("triton", "flash", "auto")


def route_for(attention_kernels: str, device: torch.device, kernel=None) -> VarlenRoute | None:
    """The route of DCPExecutor(attention_kernels=...): None for "triton" (every tile on the
    Triton kernels); for "flash" every tile that fits (ValueError naming the device where
    torch's FlashAttention kernels cannot run); for "auto" the classes the timing table of
    DCP_ATTENTION_TIMINGS gives to flash (none without a table or without the kernels).
    kernel replaces torch's kernels (the tests' emulation)."""
    from dcp.torch.kernels import kernel_selection
    if attention_kernels == "triton":
        return None
    if attention_kernels == "flash":
        return VarlenRoute(kernel or varlen_kernels.AtenFlashKernel(device))
    if attention_kernels != "auto":
        raise ValueError(f"attention_kernels {attention_kernels!r} is not one of "
                         f"{', '.join(ATTENTION_KERNELS)}")
    choices = kernel_selection.choices_from_environment()
    if "flash" not in choices.values():
        return None
    if kernel is None:
        if varlen_kernels.flash_unavailable(device) is not None:
            return None
        kernel = varlen_kernels.AtenFlashKernel(device)

    def wants(pass_: str, shape: str, q_tokens: int, kv_tokens: int) -> bool:
        return kernel_selection.kernel_for(choices, pass_, shape, q_tokens, kv_tokens) == "flash"
    return VarlenRoute(kernel, wants=wants)
