# SPDX-License-Identifier: Apache-2.0
"""The Triton device: the C++ executor's calls that touch tensors, as Triton kernel launches.

The C++ executor interprets the Program and calls this object (with the GIL) once per run of
copies (copy_run: consecutive Loads of one kind, or Stores), once per run of Merges or Sums
(memory_run), once per launch's partials to convert (convert_partials) and once per
attention instruction; prepare() once per plan with both passes' tables (named as in
dcp._core.LOWERING_SCHEMA), begin() and end() around a pass. Every call is one kernel launch on
the current stream (an attention backward: two, the dq and the dk/dv kernels). Runs on CUDA, or
on the CPU under TRITON_INTERPRET=1 (how the tests check it without a GPU). Keeps and Restores
launch nothing: a kept kv value is received into the kept tensor, and the attention kernels read
it there. With a route (dcp.torch.kernels.varlen_route: DCPExecutor(attention_kernels="flash" or
"auto")) an attention runs the tiles the route takes as FlashAttention varlen calls and the rest
on the Triton kernels."""
from __future__ import annotations

import torch

from dcp import _core
from dcp.torch.kernels import triton_kernels as tk

_TORCH_DTYPES = {"fp32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16}

# The names of the kinds the executor passes as numbers (dcp::SlotKind, the memory run kinds).
_SLOT_KIND_NAMES = {value: name for name, value in _core.LOWERING_SCHEMA["slot_kinds"].items()}
_MEMORY_RUN_NAMES = {value: name for name, value in _core.LOWERING_SCHEMA["memory_runs"].items()}


class TritonDevice:
    def __init__(self, device: torch.device, *, allow_tf32: bool = False, route=None):
        self.device = device
        self.allow_tf32 = allow_tf32
        self.route = route  # a VarlenRoute, or None: every tile on the Triton kernels
        self._host_tables: tuple[dict, dict] | None = None
        self.arenas: list[torch.Tensor] = []
        self._tables: list[dict[str, torch.Tensor]] = []
        self._pass = 0
        self._shape: dict = {}
        self._tensors: dict[str, torch.Tensor] = {}

    @staticmethod
    def check(plan) -> None:
        """Raises ValueError if the kernels cannot run `plan` (before anything is prepared)."""
        if not 1 <= plan.head_dim <= tk.MAX_HEAD_DIM:
            raise ValueError(f"the plan's head dim {plan.head_dim} is outside the Triton "
                             f"kernels' 1..{tk.MAX_HEAD_DIM}")

    def configure(self, plan, arenas: list[torch.Tensor]) -> None:
        """The plan's shape (from DCPExecutor.prepare) and the buffer tables of both passes."""
        self.partial_dtype = _TORCH_DTYPES[plan.partial_dtype]
        self.heads = plan.head_block_size
        self.kv_heads = plan.kv_heads_per_block
        self.head_dim = plan.head_dim
        self.arenas = arenas
        if self.route is not None:  # the tables came with prepare(), just before
            self.route.prepare(*self._host_tables, heads=self.heads, kv_heads=self.kv_heads,
                               head_dim=self.head_dim, dtype=_TORCH_DTYPES[plan.dtype],
                               device=self.device)
            self._host_tables = None

    def set_tensors(self, **tensors: torch.Tensor) -> None:
        """The local tensors of the pass about to run: q, k, v, o, lse, kept (forward: outputs
        o, lse, kept; backward: also do, dq, dk, dv)."""
        self._tensors = tensors

    # --- the calls the C++ executor makes -------------------------------------------------------

    def prepare(self, forward: dict, backward: dict) -> None:
        self._tables = [{name: torch.from_numpy(array).to(self.device)
                         for name, array in tables.items()} for tables in (forward, backward)]
        if self.route is not None:
            self._host_tables = (forward, backward)

    def begin(self, pass_index: int, scale: float) -> None:
        self._pass = pass_index
        t = self._tensors
        # What every attention launch of this pass shares: built once, not per instruction.
        self._shape = dict(heads=self.heads, kv_heads=self.kv_heads, head_dim=self.head_dim,
                           dtype=t["q"].dtype, scale=scale, allow_tf32=self.allow_tf32,
                           kept=t["kept"])  # where entries whose kv_buffer is "kept" read kv
        if pass_index == 0:
            t["o"].zero_()
            t["lse"].fill_(float("-inf"))
        else:
            t["dq"].zero_()
            t["dk"].zero_()
            t["dv"].zero_()

    def end(self) -> None:
        self._tensors = {}

    def copy_run(self, store: bool, kind: int, row_begin: int, row_end: int,
                 max_tokens: int) -> None:
        """A run of Loads of one slot kind or of Stores (rows [row_begin, row_end) of the pass's
        copy_rows: slot offset, local token, tokens, head block): one launch."""
        t = self._tensors
        arena = self.arenas[self._pass]
        rows = self._tables[self._pass]["copy_rows"][row_begin:row_end]
        h, hk = self.heads, self.kv_heads
        slot = _SLOT_KIND_NAMES.get(kind)
        if not store and slot == "q":
            tk.load_q_copies(arena, rows, t["q"], h, max_tokens, head_scale=h)
        elif not store and slot == "kv":
            tk.load_kv_copies(arena, rows, t["k"], t["v"], hk, max_tokens, head_scale=hk)
        elif not store and slot == "qgrad":
            tk.load_qgrad_copies(arena, rows, t["q"], t["do"], t["o"], t["lse"], h, max_tokens,
                                 head_scale=h)
        elif store and slot == "out":
            tk.store_q_copies(arena, rows, t["o"], h, max_tokens, head_scale=h, lse=t["lse"])
        elif store and slot == "dq":
            tk.store_q_copies(arena, rows, t["dq"], h, max_tokens, head_scale=h)
        elif store and slot == "dkv":
            tk.store_kv_copies(arena, rows, t["dk"], t["dv"], hk, max_tokens, head_scale=hk)
        else:
            raise ValueError(f"cannot {'store' if store else 'load'} slot kind {slot or kind}")

    def attention(self, q_begin: int, q_end: int, kv_begin: int, kv_end: int, max_q_tokens: int,
                  max_kv_tokens: int) -> None:
        tables = self._tables[self._pass]
        arena = self.arenas[self._pass]
        shape = self._shape
        routed = None if self.route is None else self.route.launch(self._pass, q_begin, q_end,
                                                                    kv_begin, kv_end)
        if routed is not None:  # the Triton kernels run what the route leaves, first
            tables = None if routed.triton_tables is None else {**tables,
                                                                **routed.triton_tables}
        if tables is not None and self._pass == 0:
            tk.attention_forward(arena, tables["entries"], tables["q_groups"][q_begin:q_end],
                                 tables["members"], tables["mask_rows"],
                                 tables["mask_intervals"], max_tokens=max_q_tokens, **shape)
        elif tables is not None:
            tk.attention_backward(arena, tables["entries"], tables["q_groups"][q_begin:q_end],
                                  tables["kv_groups"][kv_begin:kv_end], tables["members"],
                                  tables["mask_rows"], tables["mask_intervals"],
                                  max_q_tokens=max_q_tokens, max_kv_tokens=max_kv_tokens,
                                  **shape)
        if routed is not None:
            self.route.run(routed, arena, shape["kept"], shape["scale"])

    def memory_run(self, kind: int, row_begin: int, row_end: int, max_count: int) -> None:
        """A run of Merges or Sums (kind: a memory run kind of the schema): rows [row_begin,
        row_end) of the pass's memory_rows, one launch."""
        arena = self.arenas[self._pass]
        rows = self._tables[self._pass]["memory_rows"][row_begin:row_end]
        run = _MEMORY_RUN_NAMES.get(kind)
        if run == "merge":
            tk.merge_rows(arena, rows, self.heads, self.head_dim, max_count)
        elif run == "sum":
            tk.add_rows(arena, rows, max_count)
        else:
            raise ValueError(f"memory run kind {kind} is none of {sorted(_MEMORY_RUN_NAMES)}")

    def convert_partials(self, narrow: bool, row_begin: int, row_end: int,
                         max_values: int) -> None:
        """A launch's partials to narrow (before its sends) or widen (once it completed): rows
        [row_begin, row_end) of the pass's wire_rows, one launch."""
        rows = self._tables[self._pass]["wire_rows"][row_begin:row_end]
        tk.convert_partials(self.arenas[self._pass], rows, narrow, self.partial_dtype, max_values)
