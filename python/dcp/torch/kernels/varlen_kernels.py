# SPDX-License-Identifier: Apache-2.0
"""The varlen attention kernels the flash route calls: FlashAttention's through torch
(aten._flash_attention_forward / _flash_attention_backward) on CUDA, and an fp64 emulation of
their contract that runs anywhere, so that the route is verified on the CPU.

The contract (FlashAttention-2's flash_attn_varlen_func; torch's aten ops take the same):
  * q (Tq, Hq, d), k and v (Tk, Hkv, d), fp16 or bf16, contiguous in d; Hq a multiple of Hkv
    (q head h reads kv head h // (Hq / Hkv)); d a multiple of 8, at most 256.
  * cu_q, cu_k: int32 (B + 1) offsets of B sequences into the packed rows; max_q, max_k at
    least every sequence's length.
  * One (left, right) window per call: query i of a sequence of (sq, sk) tokens attends to keys
    j in [i + sk - sq - left, i + sk - sq + right] and [0, sk); -1 is unbounded. A window end of
    max_k or more becomes -1 (the kernels' own normalization, emulated here too).
  * forward -> o (Tq, Hq, d) in the input dtype, lse fp32: (Hq, Tq) (lse_layout "packed"), or
    (B, Hq, max_q) per sequence on versions that pad it ("padded").
  * backward(dout, q, k, v, out, lse, ...) -> dq, dk, dv in the input dtype, dk and dv summed
    over the q heads sharing a kv head: D = rowsum(dout * out) (fp32), P = exp(scale s - lse),
    dP = dout v^T, dS = P (dP - D), dq = scale dS k, dk = scale dS^T q, dv = P^T dout.
  * A row whose window is empty: no contract. FlashAttention-2 returns o = 0, lse = +inf there;
    the emulation takes the value as a parameter so that the tests prove the route never reads it.
"""
from __future__ import annotations

import math

import torch

_DTYPES = (torch.float16, torch.bfloat16)
MAX_HEAD_DIM = 256
EMPTY_ROW_CONVENTIONS = ("+inf", "-inf", "nan")
LSE_LAYOUTS = ("packed", "padded")


def supports(dtype: torch.dtype, head_dim: int) -> bool:
    """Whether the varlen kernels take this storage dtype and head dim."""
    return dtype in _DTYPES and 1 <= head_dim <= MAX_HEAD_DIM and head_dim % 8 == 0


def _check(q, k, v, cu_q, cu_k, max_q, max_k, where: str) -> None:
    if q.dtype not in _DTYPES or k.dtype != q.dtype or v.dtype != q.dtype:
        raise ValueError(f"{where}: q, k, v must be fp16 or bf16 alike; got {q.dtype}, {k.dtype}, "
                         f"{v.dtype}")
    if q.dim() != 3 or k.dim() != 3 or v.shape != k.shape or q.shape[2] != k.shape[2]:
        raise ValueError(f"{where}: q (Tq, Hq, d), k and v (Tk, Hkv, d); got {tuple(q.shape)}, "
                         f"{tuple(k.shape)}, {tuple(v.shape)}")
    if not supports(q.dtype, q.shape[2]) or q.shape[1] % k.shape[1]:
        raise ValueError(f"{where}: head dim {q.shape[2]} (a multiple of 8 up to 256) and heads "
                         f"{q.shape[1]} / {k.shape[1]} (a multiple) not supported")
    if any(x.stride(-1) != 1 for x in (q, k, v)):
        raise ValueError(f"{where}: q, k, v must be contiguous in the head dim")
    for name, cu, total, most in (("cu_q", cu_q, q.shape[0], max_q), ("cu_k", cu_k, k.shape[0],
                                                                       max_k)):
        if cu.dtype != torch.int32 or cu.dim() != 1 or cu.numel() < 2:
            raise ValueError(f"{where}: {name} must be int32 (B + 1); got {cu.dtype} "
                             f"{tuple(cu.shape)}")
        lengths = cu[1:] - cu[:-1]
        if int(cu[0]) != 0 or bool((lengths < 0).any()) or int(cu[-1]) > total:
            raise ValueError(f"{where}: {name} = {cu.tolist()} are not offsets into {total} rows")
        if int(lengths.max()) > most:
            raise ValueError(f"{where}: a sequence of {int(lengths.max())} rows is longer than "
                             f"max {most}")
    if cu_q.numel() != cu_k.numel():
        raise ValueError(f"{where}: cu_q and cu_k have {cu_q.numel()} and {cu_k.numel()} entries")


def _normalized(left: int, right: int, max_k: int) -> tuple[int, int]:
    return (-1 if left >= max_k else left), (-1 if right >= max_k else right)


def _window_mask(sq: int, sk: int, left: int, right: int) -> torch.Tensor:
    i = torch.arange(sq)[:, None]
    j = torch.arange(sk)[None, :]
    allowed = torch.ones(sq, sk, dtype=torch.bool)
    if left >= 0:
        allowed &= j >= i + sk - sq - left
    if right >= 0:
        allowed &= j <= i + sk - sq + right
    return allowed


class EmulatedVarlenKernel:
    """The contract above in float64 on the CPU (one sequence at a time): what the CPU tests run
    the flash route with. empty_row: what a row with an empty window gets ("+inf": o = 0,
    lse = +inf as FlashAttention-2; "-inf": o = 0, lse = -inf; "nan": o, lse and dq NaN).
    lse_layout: "packed" (Hq, Tq) or "padded" (B, Hq, max_q). `calls` records (pass, sequences,
    window, rows whose window was empty) per call."""

    name = "emulated"

    def __init__(self, empty_row: str = "+inf", lse_layout: str = "packed"):
        if empty_row not in EMPTY_ROW_CONVENTIONS:
            raise ValueError(f"empty_row {empty_row!r} is not one of {EMPTY_ROW_CONVENTIONS}")
        if lse_layout not in LSE_LAYOUTS:
            raise ValueError(f"lse_layout {lse_layout!r} is not one of {LSE_LAYOUTS}")
        self.empty_row = empty_row
        self.lse_layout = lse_layout
        self.calls: list[tuple] = []

    def _sequences(self, q, k, cu_q, cu_k, max_k, left, right):
        left, right = _normalized(left, right, max_k)
        group = q.shape[1] // k.shape[1]
        for b, (q0, q1, k0, k1) in enumerate(zip(cu_q[:-1].tolist(), cu_q[1:].tolist(),
                                                 cu_k[:-1].tolist(), cu_k[1:].tolist())):
            yield b, q0, q1, k0, k1, _window_mask(q1 - q0, k1 - k0, left, right), group

    def forward(self, q, k, v, cu_q, cu_k, max_q, max_k, scale, left, right):
        _check(q, k, v, cu_q, cu_k, max_q, max_k, "varlen forward")
        batch = cu_q.numel() - 1
        o = torch.zeros(q.shape, dtype=torch.float64)
        lse = torch.full((q.shape[1], q.shape[0]), math.inf, dtype=torch.float64)
        empty_rows = 0
        for _b, q0, q1, k0, k1, allowed, group in self._sequences(q, k, cu_q, cu_k, max_k, left,
                                                                 right):
            qs = q[q0:q1].double()
            ks = k[k0:k1].double().repeat_interleave(group, dim=1)
            vs = v[k0:k1].double().repeat_interleave(group, dim=1)
            s = torch.einsum("ihd,jhd->hij", qs, ks) * scale
            s = s.masked_fill(~allowed, -math.inf)
            row_lse = torch.logsumexp(s, dim=-1)  # (h, sq); -inf where the window is empty
            p = torch.exp(s - row_lse[..., None]).nan_to_num(0.0)
            o[q0:q1] = torch.einsum("hij,jhd->ihd", p, vs)
            lse[:, q0:q1] = row_lse
            empty = ~allowed.any(dim=1)
            empty_rows += int(empty.sum())
            if empty.any():
                value = {"+inf": math.inf, "-inf": -math.inf, "nan": math.nan}[self.empty_row]
                lse[:, q0:q1][:, empty] = value
                if self.empty_row == "nan":
                    o[q0:q1][empty] = math.nan
        self.calls.append(("forward", batch, _normalized(left, right, max_k), empty_rows))
        o = o.to(q.dtype)
        if self.lse_layout == "padded":
            padded = torch.full((batch, q.shape[1], max_q), math.inf, dtype=torch.float32)
            for b, (q0, q1) in enumerate(zip(cu_q[:-1].tolist(), cu_q[1:].tolist())):
                padded[b, :, :q1 - q0] = lse[:, q0:q1]
            return o, padded
        return o, lse.float()

    def backward(self, dout, q, k, v, out, lse, cu_q, cu_k, max_q, max_k, scale, left, right):
        _check(q, k, v, cu_q, cu_k, max_q, max_k, "varlen backward")
        if dout.shape != q.shape or out.shape != q.shape or dout.dtype != q.dtype \
                or out.dtype != q.dtype:
            raise ValueError("varlen backward: dout and out must be like q")
        batch = cu_q.numel() - 1
        want = (batch, q.shape[1], max_q) if self.lse_layout == "padded" else (q.shape[1],
                                                                              q.shape[0])
        if lse.dtype != torch.float32 or tuple(lse.shape) != want:
            raise ValueError(f"varlen backward: lse must be fp32 {want}; got {lse.dtype} "
                             f"{tuple(lse.shape)}")
        dq = torch.zeros(q.shape, dtype=torch.float64)
        dk = torch.zeros(k.shape, dtype=torch.float64)
        dv = torch.zeros(v.shape, dtype=torch.float64)
        heads, kv_heads = q.shape[1], k.shape[1]
        empty_rows = 0
        for b, q0, q1, k0, k1, allowed, group in self._sequences(q, k, cu_q, cu_k, max_k, left,
                                                                right):
            qs, dos, os_ = q[q0:q1].double(), dout[q0:q1].double(), out[q0:q1].double()
            ks = k[k0:k1].double().repeat_interleave(group, dim=1)
            vs = v[k0:k1].double().repeat_interleave(group, dim=1)
            row_lse = (lse[b, :, :q1 - q0] if self.lse_layout == "padded"
                       else lse[:, q0:q1]).double()
            d = (dos * os_).sum(-1).T  # (h, sq)
            s = torch.einsum("ihd,jhd->hij", qs, ks) * scale
            p = torch.exp(s - row_lse[..., None]).masked_fill(~allowed, 0.0)
            dp = torch.einsum("ihd,jhd->hij", dos, vs)
            ds = p * (dp - d[..., None])
            dq[q0:q1] = torch.einsum("hij,jhd->ihd", ds, ks) * scale
            fold = lambda x: x.reshape(x.shape[0], kv_heads, heads // kv_heads, -1).sum(2)  # noqa
            dk[k0:k1] = fold(torch.einsum("hij,ihd->jhd", ds, qs) * scale)
            dv[k0:k1] = fold(torch.einsum("hij,ihd->jhd", p, dos))
            empty = ~allowed.any(dim=1)
            empty_rows += int(empty.sum())
            if empty.any() and self.empty_row == "nan":
                dq[q0:q1][empty] = math.nan
        self.calls.append(("backward", batch, _normalized(left, right, max_k), empty_rows))
        return dq.to(q.dtype), dk.to(q.dtype), dv.to(q.dtype)


def flash_unavailable(device: torch.device) -> str | None:
    """Why torch's FlashAttention kernels cannot run on `device`, or None if they can."""
    if device.type != "cuda":
        return f"{device} is not a CUDA device"
    if torch.version.hip is not None:
        return f"{device} is a ROCm device (the route is written for CUDA's FlashAttention-2)"
    if not torch.cuda.is_available():
        return "torch sees no CUDA device"
    if not torch.backends.cuda.is_flash_attention_available():
        return f"this torch ({torch.__version__}) was built without FlashAttention"
    major, minor = torch.cuda.get_device_capability(device)
    if major < 8:
        return f"{device} has compute capability {major}.{minor}; FlashAttention needs 8.0"
    return None


def _lse_layout_of_aten() -> str:
    """The lse layout of this torch's varlen forward, from its meta kernel (no GPU needed)."""
    q = torch.empty(5, 2, 8, dtype=torch.bfloat16, device="meta")
    cu = torch.empty(3, dtype=torch.int32, device="meta")
    lse = torch.ops.aten._flash_attention_forward(q, q, q, cu, cu, 4, 4, 0.0, False, False)[1]
    return "padded" if lse.dim() == 3 else "packed"


class AtenFlashKernel:
    """FlashAttention's varlen kernels as torch ships them on CUDA. Raises ValueError naming the
    device where they cannot run."""

    name = "flash"

    def __init__(self, device: torch.device):
        reason = flash_unavailable(device)
        if reason is not None:
            raise ValueError(f"attention_kernels='flash' needs torch's FlashAttention kernels "
                             f"(aten._flash_attention_forward on a CUDA GPU of compute capability "
                             f"8.0 or newer): {reason}")
        self.device = device
        self.lse_layout = _lse_layout_of_aten()

    def forward(self, q, k, v, cu_q, cu_k, max_q, max_k, scale, left, right):
        o, lse = torch.ops.aten._flash_attention_forward(
            q, k, v, cu_q, cu_k, max_q, max_k, 0.0, False, False, scale=scale,
            window_size_left=left, window_size_right=right)[:2]
        return o, lse

    def backward(self, dout, q, k, v, out, lse, cu_q, cu_k, max_q, max_k, scale, left, right):
        # Without dropout the philox state is not read; these are what torch's own varlen_attn
        # passes.
        rng_state = torch.zeros(2, dtype=torch.uint64, device=q.device)
        unused = torch.empty(0, device=q.device)
        return torch.ops.aten._flash_attention_backward(
            dout, q, k, v, out, lse, cu_q, cu_k, max_q, max_k, 0.0, False, rng_state, unused,
            scale=scale, window_size_left=left, window_size_right=right)
