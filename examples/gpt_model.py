# SPDX-License-Identifier: Apache-2.0
"""A small GPT-style model over a flat packed token list, with pluggable attention.

The model has no batch dimension: a batch is the concatenation of its sequences (T tokens), and
`position_ids` restart at 0 for every sequence. Attention is a callable `attn(q, k, v) -> o` with
q (T, heads, head_dim) and k, v (T, kv_heads, head_dim), so the same model runs with dense
attention over the whole packed batch (`dense_attention`) or, on each rank, over its local tokens
with dcp (`lambda q, k, v: dcp.torch.attention(executor, q, k, v)`). A list of callables, one per
layer, gives layers that attend differently (each layer its attention kind:
`dcp.torch.attention(executor, q, k, v, kind=...)`).

Construction is deterministic: `init_seed(s)` (or `torch.manual_seed(s)`) before `GPT(config)`
gives the same weights in every process."""
from __future__ import annotations

import dataclasses
import math
from typing import Callable, Iterable, Optional, Sequence, Union

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils.checkpoint import checkpoint

IGNORE_INDEX = -100

Attention = Callable[[torch.Tensor, torch.Tensor, torch.Tensor], torch.Tensor]


@dataclasses.dataclass
class GPTConfig:
    vocab_size: int = 256          # byte-level tokens
    dim: int = 256
    layers: int = 4
    heads: int = 8
    kv_heads: int = 2              # grouped-query attention: heads // kv_heads q heads per kv head
    mlp_hidden: Optional[int] = None  # SwiGLU hidden width; None means 4 * dim
    rope_theta: float = 10000.0
    norm_eps: float = 1e-6
    tie_embeddings: bool = False

    def __post_init__(self) -> None:
        if self.dim % self.heads != 0:
            raise ValueError(f"dim {self.dim} is not a multiple of heads {self.heads}")
        if self.heads % self.kv_heads != 0:
            raise ValueError(f"heads {self.heads} is not a multiple of kv_heads {self.kv_heads}")
        if self.head_dim % 2 != 0:
            raise ValueError(f"head_dim {self.head_dim} is odd; RoPE rotates pairs of channels")
        if self.mlp_hidden is None:
            self.mlp_hidden = 4 * self.dim

    @property
    def head_dim(self) -> int:
        return self.dim // self.heads


def init_seed(seed: int) -> None:
    """Seeds torch's generator: GPT(config) built right after is the same in every process."""
    torch.manual_seed(seed)


class RMSNorm(nn.Module):
    """x / sqrt(mean(x^2) + eps) * weight, computed in float32."""

    def __init__(self, dim: int, eps: float = 1e-6):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(dim))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x32 = x.float()
        normed = x32 * torch.rsqrt(x32.pow(2).mean(dim=-1, keepdim=True) + self.eps)
        return (normed * self.weight.float()).to(x.dtype)


def rope_tables(position_ids: torch.Tensor, head_dim: int,
                theta: float) -> tuple[torch.Tensor, torch.Tensor]:
    """cos and sin (T, head_dim // 2), float32, for the given positions."""
    exponents = torch.arange(0, head_dim, 2, dtype=torch.float32,
                             device=position_ids.device) / head_dim
    inv_freq = 1.0 / (theta ** exponents)
    angles = position_ids.to(torch.float32)[:, None] * inv_freq[None, :]
    return torch.cos(angles), torch.sin(angles)


def apply_rope(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """Rotates channel pairs (i, i + d/2) of x (T, heads, d) by the angles of cos/sin (T, d/2)."""
    x32 = x.float()
    half = x32.shape[-1] // 2
    x1, x2 = x32[..., :half], x32[..., half:]
    c, s = cos[:, None, :], sin[:, None, :]
    return torch.cat((x1 * c - x2 * s, x2 * c + x1 * s), dim=-1).to(x.dtype)


class SelfAttention(nn.Module):
    def __init__(self, config: GPTConfig):
        super().__init__()
        self.heads, self.kv_heads, self.head_dim = config.heads, config.kv_heads, config.head_dim
        self.wq = nn.Linear(config.dim, config.heads * config.head_dim, bias=False)
        self.wk = nn.Linear(config.dim, config.kv_heads * config.head_dim, bias=False)
        self.wv = nn.Linear(config.dim, config.kv_heads * config.head_dim, bias=False)
        self.wo = nn.Linear(config.heads * config.head_dim, config.dim, bias=False)

    def forward(self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor,
                attn: Attention) -> torch.Tensor:
        tokens = x.shape[0]
        q = self.wq(x).view(tokens, self.heads, self.head_dim)
        k = self.wk(x).view(tokens, self.kv_heads, self.head_dim)
        v = self.wv(x).view(tokens, self.kv_heads, self.head_dim)
        q = apply_rope(q, cos, sin).contiguous()
        k = apply_rope(k, cos, sin).contiguous()
        o = attn(q, k, v.contiguous())
        return self.wo(o.reshape(tokens, self.heads * self.head_dim))


class SwiGLU(nn.Module):
    def __init__(self, dim: int, hidden: int):
        super().__init__()
        self.gate = nn.Linear(dim, hidden, bias=False)
        self.up = nn.Linear(dim, hidden, bias=False)
        self.down = nn.Linear(hidden, dim, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.down(F.silu(self.gate(x)) * self.up(x))


class Block(nn.Module):
    def __init__(self, config: GPTConfig):
        super().__init__()
        self.attn_norm = RMSNorm(config.dim, config.norm_eps)
        self.attn = SelfAttention(config)
        self.mlp_norm = RMSNorm(config.dim, config.norm_eps)
        self.mlp = SwiGLU(config.dim, config.mlp_hidden)

    def forward(self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor,
                attn: Attention) -> torch.Tensor:
        x = x + self.attn(self.attn_norm(x), cos, sin, attn)
        return x + self.mlp(self.mlp_norm(x))


class GPT(nn.Module):
    """forward(input_ids (T,), position_ids (T,), attn) -> logits (T, vocab_size); attn one
    attention callable for every layer, or a list of one per layer.

    `checkpoint_layers` (constructor, or per call in forward) names the blocks that run under
    activation checkpointing (torch.utils.checkpoint, non-reentrant): their activations are
    recomputed in backward, attention included, so `attn` must be callable again then."""

    def __init__(self, config: GPTConfig, checkpoint_layers: Iterable[int] = ()):
        super().__init__()
        self.config = config
        self.checkpoint_layers = set(checkpoint_layers)
        self.embed = nn.Embedding(config.vocab_size, config.dim)
        self.blocks = nn.ModuleList(Block(config) for _ in range(config.layers))
        self.norm = RMSNorm(config.dim, config.norm_eps)
        self.lm_head = nn.Linear(config.dim, config.vocab_size, bias=False)
        self._init_weights()
        if config.tie_embeddings:
            self.lm_head.weight = self.embed.weight

    def _init_weights(self) -> None:
        std = 0.02
        residual_std = std / math.sqrt(2 * self.config.layers)  # projections into the residual
        for name, param in self.named_parameters():
            if name.endswith("norm.weight"):
                nn.init.ones_(param)
            elif name.endswith(("wo.weight", "down.weight")):
                nn.init.normal_(param, mean=0.0, std=residual_std)
            else:
                nn.init.normal_(param, mean=0.0, std=std)

    def num_parameters(self) -> int:
        return sum(p.numel() for p in self.parameters())

    def forward(self, input_ids: torch.Tensor, position_ids: torch.Tensor,
                attn: Union[Attention, Sequence[Attention]],
                checkpoint_layers: Optional[Iterable[int]] = None) -> torch.Tensor:
        if input_ids.dim() != 1 or position_ids.shape != input_ids.shape:
            raise ValueError(f"input_ids {tuple(input_ids.shape)} and position_ids "
                             f"{tuple(position_ids.shape)} must be the same flat (T,) shape")
        per_layer = list(attn) if isinstance(attn, (list, tuple)) else [attn] * len(self.blocks)
        if len(per_layer) != len(self.blocks):
            raise ValueError(f"{len(per_layer)} attention callables for {len(self.blocks)} layers")
        layers = self.checkpoint_layers if checkpoint_layers is None else set(checkpoint_layers)
        cos, sin = rope_tables(position_ids, self.config.head_dim, self.config.rope_theta)
        x = self.embed(input_ids)
        for index, block in enumerate(self.blocks):
            if index in layers and torch.is_grad_enabled():
                x = checkpoint(block, x, cos, sin, per_layer[index], use_reentrant=False)
            else:
                x = block(x, cos, sin, per_layer[index])
        return self.lm_head(self.norm(x))


# ----------------------------------------------------------------------------------------------
# Dense reference path: exact attention over the whole packed batch.

MaskFn = Union[None, str, Callable[[int], torch.Tensor]]


def spec_mask(spec: str, length: int) -> torch.Tensor:
    """The (length, length) bool mask (True: row may attend to column) of any dcp mask spec
    ('causal', 'lambda:sink=64,window=4096', ...), from dcp's own per-row key intervals."""
    import dcp  # the dense baseline uses dcp only for its mask specs

    intervals = torch.from_numpy(dcp.mask_intervals(spec, length)).long()  # (length, K, 2)
    cols = torch.arange(length)[None, None, :]
    inside = (cols >= intervals[..., 0:1]) & (cols < intervals[..., 1:2])
    return inside.any(dim=1)


def packed_mask(seqlens: Sequence[int], mask_fn: MaskFn = None) -> torch.Tensor:
    """The (T, T) bool mask of a packed batch: block diagonal over the sequences, each block the
    sequence's own mask (causal by default; a spec string; or mask_fn(length) -> (L, L) bool)."""
    total = int(sum(seqlens))
    mask = torch.zeros(total, total, dtype=torch.bool)
    start = 0
    for length in seqlens:
        length = int(length)
        if mask_fn is None:
            block = spec_mask("causal", length)
        elif isinstance(mask_fn, str):
            block = spec_mask(mask_fn, length)
        else:
            block = torch.as_tensor(mask_fn(length), dtype=torch.bool)
        if block.shape != (length, length):
            raise ValueError(f"mask for a sequence of {length} tokens has shape "
                             f"{tuple(block.shape)}")
        mask[start:start + length, start:start + length] = block
        start += length
    return mask


def dense_attention(seqlens: Sequence[int], mask_fn: MaskFn = None) -> Attention:
    """attn(q, k, v) computing exact attention over the packed batch with scaled dot-product
    attention (scale 1/sqrt(head_dim)) and an explicit mask built once for all layers. Rows that
    see no key give o = 0."""
    mask = packed_mask(seqlens, mask_fn)
    empty_rows = ~mask.any(dim=1)
    has_empty = bool(empty_rows.any())

    def attn(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        tokens, heads, _ = q.shape
        if tokens != mask.shape[0]:
            raise ValueError(f"q has {tokens} tokens; the packed batch has {mask.shape[0]}")
        group = heads // k.shape[1]
        if group > 1:  # q head h reads kv head h // group
            k = k.repeat_interleave(group, dim=1)
            v = v.repeat_interleave(group, dim=1)
        local_mask = mask.to(q.device)
        o = F.scaled_dot_product_attention(q.transpose(0, 1)[None], k.transpose(0, 1)[None],
                                           v.transpose(0, 1)[None], attn_mask=local_mask)
        o = o[0].transpose(0, 1)
        if has_empty:
            o = o.masked_fill(empty_rows.to(q.device)[:, None, None], 0.0)
        return o.contiguous()

    return attn


def make_positions(seqlens: Sequence[int]) -> torch.Tensor:
    """Position of every token within its sequence (long, sum(seqlens))."""
    lengths = torch.as_tensor(list(seqlens), dtype=torch.long)
    starts = torch.cumsum(lengths, 0) - lengths
    return torch.arange(int(lengths.sum())) - torch.repeat_interleave(starts, lengths)


def make_labels(input_ids: torch.Tensor, seqlens: Sequence[int]) -> torch.Tensor:
    """labels[i] = input_ids[i + 1] inside a sequence, -100 at the last token of each."""
    lengths = torch.as_tensor(list(seqlens), dtype=torch.long)
    if int(lengths.sum()) != input_ids.numel():
        raise ValueError(f"seqlens sum to {int(lengths.sum())}; input_ids has "
                         f"{input_ids.numel()} tokens")
    labels = torch.roll(input_ids, -1).clone()
    labels[torch.cumsum(lengths, 0) - 1] = IGNORE_INDEX
    return labels


def loss_fn(logits: torch.Tensor, labels: torch.Tensor,
            total_loss_tokens: Union[int, torch.Tensor]) -> torch.Tensor:
    """Sum of the cross entropy of the tokens whose label is not -100, divided by the loss tokens
    of the whole global batch. Per-rank losses (and gradients) summed over the ranks that split
    the batch give the single-process loss (and gradients)."""
    total = (total_loss_tokens.clamp_min(1) if isinstance(total_loss_tokens, torch.Tensor)
             else max(int(total_loss_tokens), 1))
    summed = F.cross_entropy(logits.float(), labels, ignore_index=IGNORE_INDEX, reduction="sum")
    return summed / total
