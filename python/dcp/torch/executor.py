# SPDX-License-Identifier: Apache-2.0
"""DCPExecutor: runs one rank's Programs of a plan on local-layout tensors over a process group."""
from __future__ import annotations

import contextlib
import datetime
import os

import torch
import torch.distributed as dist

import dcp
from dcp import _core
from dcp.torch import ops
from dcp.torch.group import resolve_group
from dcp.torch.transport import LocalTransport, TorchTransport, pass_buffers

_STORAGE = {"bf16": torch.bfloat16, "fp16": torch.float16, "fp32": torch.float32}


class NotPreparedError(RuntimeError, ValueError):
    """Attention on an executor that has no plan yet (prepare(plan) first)."""


def _describe(t) -> str:
    if isinstance(t, torch.Tensor):
        return f"a {t.dtype} tensor of shape {tuple(t.shape)}"
    return f"a {type(t).__name__}"


def _group_timeout(group) -> datetime.timedelta:
    try:
        return group._get_backend(torch.device("cpu")).options._timeout
    except (AttributeError, RuntimeError):
        return datetime.timedelta(minutes=30)  # torch.distributed's default


def _default_device(group) -> torch.device:
    if group is not None and torch.cuda.is_available():
        try:
            if dist.get_backend(group) == "nccl":
                return torch.device("cuda", torch.cuda.current_device())
        except (RuntimeError, ValueError):
            pass
    return torch.device("cpu")


def _triton_device(kernels: str, device: torch.device, allow_tf32: bool,
                   attention_kernels: str = "triton", varlen_kernel=None):
    """The Triton device for kernels == "triton" (with the flash route attention_kernels asks
    for), None for the C++ cpu kernels."""
    if attention_kernels not in ("triton", "flash", "auto"):
        raise ValueError(f"attention_kernels {attention_kernels!r} is not one of 'triton', "
                         "'flash', 'auto'")
    if kernels == "cpu":
        if device.type != "cpu":
            raise ValueError(f"the cpu kernels run on the CPU, not on {device}")
        if attention_kernels != "triton":
            raise ValueError(f"attention_kernels={attention_kernels!r} chooses among the Triton "
                             "device's attention kernels; kernels='cpu' has none")
        return None
    if kernels != "triton":
        raise ValueError(f"kernels {kernels!r} is neither 'cpu' nor 'triton'")
    if device.type == "cpu" and os.environ.get("TRITON_INTERPRET") != "1":
        raise ValueError("the triton kernels run on the CPU only under Triton's interpreter "
                         "(TRITON_INTERPRET=1 before triton is imported); use kernels='cpu'")
    if device.type not in ("cpu", "cuda"):
        raise ValueError(f"the triton kernels run on CUDA devices, not on {device}")
    from dcp.torch._device import TritonDevice  # imports triton only when asked for
    route = None
    if attention_kernels != "triton":
        from dcp.torch.kernels.varlen_route import route_for
        route = route_for(attention_kernels, device, varlen_kernel)
    return TritonDevice(device, allow_tf32=allow_tf32, route=route)


class _KindRun:
    """One attention kind of the prepared plan: its C++ executor (every kind's shares the
    transport and kernel threads), its Triton device (None on the cpu kernels), the buffer
    tables of both passes and the bytes of kv its forward pass keeps."""

    def __init__(self, core, device):
        self.core = core
        self.device = device
        self.arenas: list[torch.Tensor] = []
        self.kept_bytes = 0


class DCPExecutor:
    """Executes the plan's Programs for this rank of `group` (default: the default group).

    prepare(plan) once per batch; then any number of attention calls (dcp.torch.attention,
    DCPAttn) forward and backward, in any order: a call keeps nothing for the next one (what a
    backward needs from its forward, the kv values the plan keeps included, is returned by the
    forward and handed back). A plan of several attention kinds (dcp.plan with a dict of masks)
    is prepared whole, every kind's Programs on the same local tokens; each call names its kind
    (kind=...). Tensors
    are in the plan's local layout: this rank's tokens in the order the plan placed them
    (DCPDataloader yields that order), shape (local tokens, heads, head dim), the plan's dtype,
    on `device`, contiguous. Every wait for a peer is bounded by `timeout` (default: the
    group's; on CUDA, NCCL's watchdog enforces the group's).

    device: where the tensors live (default: the current CUDA device if the group's backend is
    NCCL, else the CPU). kernels: "cpu" (dcp's C++ kernels, CPU tensors; `threads` of them,
    default torch.get_num_threads()) or "triton" (the GPU kernels; on the CPU only under
    TRITON_INTERPRET=1, for testing); default "triton" on CUDA, "cpu" on the CPU. allow_tf32:
    fp32 inputs' dots in TF32 on the GPU (default IEEE fp32). attention_kernels (with the
    Triton kernels): "triton" (default), "flash" (every tile whose mask fits on FlashAttention's
    varlen kernels through torch, the others on Triton; ValueError on a device without them) or
    "auto" (the tile classes that the timing table named by DCP_ATTENTION_TIMINGS gives to
    flash); docs/gpu.md, "The flash route"."""

    def __init__(self, group=None, *, device: torch.device | str | None = None,
                 kernels: str | None = None, threads: int | None = None,
                 timeout: datetime.timedelta | float | None = None, allow_tf32: bool = False,
                 attention_kernels: str = "triton", _varlen_kernel=None):
        self.group, self.rank, self.world_size = resolve_group(group, "DCPExecutor")
        self.device = _default_device(self.group) if device is None else torch.device(device)
        if self.device.type == "cuda" and self.device.index is None:
            self.device = torch.device("cuda", torch.cuda.current_device())
        self.kernels = kernels or ("triton" if self.device.type == "cuda" else "cpu")
        # _varlen_kernel replaces torch's FlashAttention kernels on the flash route (the tests
        # run it with an fp64 emulation of their contract on the CPU). Each attention kind gets
        # a device of its own: it holds the kind's tables.
        self._new_device = lambda: _triton_device(self.kernels, self.device, allow_tf32,
                                                  attention_kernels, _varlen_kernel)
        self._triton = self._new_device()
        if timeout is None:
            timeout = _group_timeout(self.group) if self.group is not None else datetime.timedelta(
                minutes=30)
        elif not isinstance(timeout, datetime.timedelta):
            timeout = datetime.timedelta(seconds=float(timeout))
        if timeout.total_seconds() <= 0:
            raise ValueError(f"timeout {timeout} is not positive")
        self.timeout = timeout
        self._transport = (TorchTransport(self.group, self.rank, self.world_size, timeout)
                           if self.group is not None else LocalTransport(timeout))
        threads = torch.get_num_threads() if threads is None else int(threads)
        if threads < 1:
            raise ValueError(f"threads {threads} is not positive")
        self._core = _core.Executor(self._transport, self.rank, self.world_size, threads,
                                    self._triton)
        self._runs = [_KindRun(self._core, self._triton)]  # by kind, in the plan's order
        self.plan: dcp.Plan | None = None
        self.kinds: list[str] = []  # the prepared plan's attention kinds
        self.kept_bytes = 0  # the first kind's (the kept tensor its forward pass returns)
        self._failed: str | None = None
        self._kept_after_failure: list[torch.Tensor] = []
        self.generation = 0  # counts prepare() calls; the backward op checks it
        self.local_tokens = 0
        # Names this executor in dcp's custom ops (compiled graphs hold the key, not the object).
        self.key = ops.register_executor(self)

    def prepare(self, plan: dcp.Plan) -> None:
        """Takes this rank's Programs of every attention kind of `plan`. Raises ValueError if
        the plan is for another world size than the group's, or is malformed."""
        if not isinstance(plan, dcp.Plan):
            raise TypeError(f"prepare() takes a dcp.Plan, not {type(plan).__name__}")
        if plan.world_size != self.world_size:
            raise ValueError(f"the plan is for {plan.world_size} devices ({plan.nodes} x "
                             f"{plan.devices_per_node}) but the group has {self.world_size} ranks")
        self._expect_usable()
        if self._triton is not None:
            self._triton.check(plan)
        kinds = plan.kinds
        self.plan = None
        self.kinds = []
        with self._on_device():
            # The old tables go first (no peak of two): the passes waited for all their
            # transfers, so nothing reads them any more.
            for run in self._runs:
                run.arenas = []
                if run.device is not None:
                    run.device.arenas = []
            del self._runs[len(kinds):]
            while len(self._runs) < len(kinds):
                device = self._new_device()
                self._runs.append(_KindRun(self._core.sibling(device), device))
            for index, run in enumerate(self._runs):
                run.core.prepare(plan, index)
                if run.core.local_tokens != self._core.local_tokens:
                    raise ValueError(f"attention kind {kinds[index]!r} gives this rank "
                                     f"{run.core.local_tokens} tokens, kind {kinds[0]!r} "
                                     f"{self._core.local_tokens}: the kinds of a plan share "
                                     "its token placement")
            # The buffer tables of both passes come from PyTorch's allocator; transfers are
            # slices. On CUDA they are allocated on the current stream, which every transfer is
            # ordered against.
            for index, run in enumerate(self._runs):
                run.arenas = [torch.empty(run.core.arena_bytes(i), dtype=torch.uint8,
                                          device=self.device) for i in (0, 1)]
                for i, arena in enumerate(run.arenas):
                    run.core.use_arena(i, arena)
                run.kept_bytes = run.core.kept_bytes
                if run.device is not None:
                    run.device.configure(plan.kind(kinds[index]) if len(kinds) > 1 else plan,
                                         run.arenas)
            self._transport.prepare(self.device)
        self.plan = plan
        self.kinds = kinds
        self.generation += 1
        self.local_tokens = self._core.local_tokens
        self.kept_bytes = self._runs[0].kept_bytes
        self.dtype = _STORAGE[plan.dtype]

    # --- checks -------------------------------------------------------------------------------

    def _on_device(self):
        """Kernels, streams and events go to this executor's CUDA device, whichever is current."""
        if self.device.type == "cuda":
            return torch.cuda.device(self.device)
        return contextlib.nullcontext()

    def _expect_usable(self) -> None:
        if self._failed is not None:
            raise RuntimeError(f"DCPExecutor: an earlier pass failed on this rank ({self._failed});"
                               " its transfers may still be in flight, so this executor is not "
                               "reused: destroy the process group and start again")

    def _run(self, run: _KindRun, pass_index: int, kept: torch.Tensor, call, *args) -> None:
        """Runs one pass (0 forward, 1 backward) of a kind whose kept tensor is `kept`: its
        transfers are slices of its buffer table and of `kept`. On CUDA a pass that fails midway
        may leave NCCL transfers in flight into its buffer tables and kept tensor: they are kept
        alive and the executor refuses further work."""
        self._expect_usable()
        self._transport.set_buffers(pass_buffers(run.arenas[pass_index], kept))
        try:
            with self._on_device(), torch.no_grad():
                call(*args)
        except Exception as error:
            if self.device.type == "cuda":
                self._failed = f"{type(error).__name__}: {str(error).splitlines()[0]}"
                self._kept_after_failure = [*run.arenas, kept]
            raise
        finally:
            self._transport.set_buffers([])

    def _expect_prepared(self) -> None:
        if self.plan is None:
            raise NotPreparedError("DCPExecutor: call prepare(plan) before attention")

    def _kind(self, kind: str | None) -> _KindRun:
        """The prepared kind called `kind`; None names the plan's only kind."""
        self._expect_prepared()
        if kind is None:
            if len(self.kinds) == 1:
                return self._runs[0]
            raise ValueError(f"the plan has attention kinds {', '.join(self.kinds)}: name the "
                             "kind of this attention (kind=...)")
        if not isinstance(kind, str):
            raise TypeError(f"kind is a {type(kind).__name__}, not an attention kind's name")
        if kind not in self.kinds:
            raise ValueError(f"no attention kind {kind!r} in the plan (it has "
                             f"{', '.join(self.kinds)})")
        return self._runs[self.kinds.index(kind)]

    def _stand_in(self, q) -> bool:
        """Whether a rank the plan gives no tokens passes one stand-in row (a layer that cannot
        run on no tokens): its Programs run on no tokens, and the row attends to nothing (o 0,
        lse -inf, gradients 0)."""
        return self.local_tokens == 0 and isinstance(q, torch.Tensor) and q.dim() == 3 \
            and q.shape[0] == 1

    def _check(self, name: str, t: torch.Tensor, heads: int, dtype: torch.dtype | None = None):
        if not isinstance(t, torch.Tensor):
            raise TypeError(f"{name} is a {type(t).__name__}, not a torch.Tensor")
        want = (self.local_tokens, heads, self.plan.head_dim)
        if tuple(t.shape) != want:
            raise ValueError(f"{name} has shape {tuple(t.shape)}; this rank's local layout of the "
                             f"plan needs {want} (local tokens, heads, head dim)")
        dtype = dtype or self.dtype
        if t.dtype != dtype:
            raise TypeError(f"{name} is {t.dtype}; the plan is for {dtype}")
        if t.device != self.device:
            raise ValueError(f"{name} is on {t.device}; this executor runs on {self.device}")
        return t.contiguous()

    def _scale(self, softmax_scale: float | None) -> float:
        if softmax_scale is None:
            return 0.0
        if not (softmax_scale > 0) or softmax_scale == float("inf"):
            raise ValueError(f"softmax_scale {softmax_scale} is not a positive finite number")
        return float(softmax_scale)

    # --- passes -------------------------------------------------------------------------------

    def forward(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
                softmax_scale: float | None = None, kind: str | None = None
                ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """o (like q), lse (float32, (q heads, local tokens)) and kept (uint8: the kv values
        received from other ranks that the kind's plan keeps for the backward pass, so that it
        need not receive them again; empty when the plan keeps none); no autograd. `kind`: the
        attention kind (None: the plan's only one). On a rank the plan gives no tokens, one row
        of q, k and v is a stand-in that attends to nothing (o 0, lse -inf; backward: 0)."""
        run = self._kind(kind)
        p = self.plan
        if self._stand_in(q):
            _, _, kept = self.forward(q[:0], k[:0], v[:0], softmax_scale, kind)
            lse = torch.full((p.q_heads, 1), float("-inf"), device=self.device)
            return torch.zeros_like(q), lse, kept
        q = self._check("q", q, p.q_heads)
        k = self._check("k", k, p.kv_heads)
        v = self._check("v", v, p.kv_heads)
        o = torch.empty_like(q)
        lse = torch.empty((p.q_heads, self.local_tokens), dtype=torch.float32, device=self.device)
        kept = torch.empty(run.kept_bytes, dtype=torch.uint8, device=self.device)
        if run.device is not None:
            run.device.set_tensors(q=q, k=k, v=v, o=o, lse=lse, kept=kept)
        self._run(run, 0, kept, run.core.forward, q.detach(), k.detach(), v.detach(), o, lse,
                  kept, self._scale(softmax_scale))
        return o, lse, kept

    def backward(self, q, k, v, o, lse, do, kept, softmax_scale: float | None = None,
                 kind: str | None = None):
        """dq, dk, dv from a forward call's inputs and outputs (kept included) and the output
        gradient do, with the Programs of the forward call's attention kind."""
        run = self._kind(kind)
        p = self.plan
        if self._stand_in(q):
            self.backward(q[:0], k[:0], v[:0], o[:0], lse[:, :0], do[:0], kept, softmax_scale,
                          kind)
            return torch.zeros_like(q), torch.zeros_like(k), torch.zeros_like(v)
        q = self._check("q", q, p.q_heads)
        k = self._check("k", k, p.kv_heads)
        v = self._check("v", v, p.kv_heads)
        o = self._check("o", o, p.q_heads)
        do = self._check("do", do, p.q_heads)
        if tuple(lse.shape) != (p.q_heads, self.local_tokens) or lse.dtype != torch.float32:
            raise ValueError(f"lse has shape {tuple(lse.shape)} and dtype {lse.dtype}; the plan "
                             f"needs ({p.q_heads}, {self.local_tokens}) float32")
        if lse.device != self.device:
            raise ValueError(f"lse is on {lse.device}; this executor runs on {self.device}")
        lse = lse.contiguous()
        if (not isinstance(kept, torch.Tensor) or kept.dtype != torch.uint8
                or tuple(kept.shape) != (run.kept_bytes,)):
            raise ValueError(f"kept is {_describe(kept)}; the plan needs the uint8 tensor of "
                             f"({run.kept_bytes},) that this rank's forward returned")
        if kept.device != self.device:
            raise ValueError(f"kept is on {kept.device}; this executor runs on {self.device}")
        kept = kept.contiguous()
        dq, dk, dv = torch.empty_like(q), torch.empty_like(k), torch.empty_like(v)
        if run.device is not None:
            run.device.set_tensors(q=q, k=k, v=v, o=o, lse=lse, do=do, dq=dq, dk=dk, dv=dv,
                                   kept=kept)
        self._run(run, 1, kept, run.core.backward, q.detach(), k.detach(), v.detach(),
                  o.detach(), lse.detach(), do.detach(), dq, dk, dv, kept.detach(),
                  self._scale(softmax_scale))
        return dq, dk, dv

    def profile(self, backward: bool = False, kind: str | None = None) -> dict:
        """Where the kind's last pass's time went on this rank (seconds, kernel, wait, copy,
        bytes). Host time: on CUDA it counts enqueueing the kernels and transfers, not running
        them."""
        return self._kind(kind).core.profile(1 if backward else 0)
