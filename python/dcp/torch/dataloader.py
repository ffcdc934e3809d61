# SPDX-License-Identifier: Apache-2.0
"""DCPDataloader: packs samples into batches, plans each batch in the background in C++ threads,
and yields this rank's tokens of each batch in the executor's local layout, with the plan.

Every rank of the group iterates the same batches and plans each one itself: planning is
deterministic (same batch, options and seed, same plan bytes), so no plan crosses the network
and no rank waits for another to plan (docs/python.md has the measurement behind this choice)."""
from __future__ import annotations

import collections
import dataclasses
import time
from typing import Any, Callable, Iterable, Iterator

import numpy as np
import torch

import dcp
from dcp import _core
from dcp.torch._group import resolve_group

IGNORE_INDEX = -100


@dataclasses.dataclass
class LocalBatch:
    """This rank's tokens of one packed batch, in the plan's local layout."""
    input_ids: torch.Tensor     # long (local tokens,)
    labels: torch.Tensor        # long: the next token of the same sequence, -100 at a sequence end
    position_ids: torch.Tensor  # long: position within the token's sequence (RoPE)
    loss_mask: torch.Tensor     # bool: labels != -100
    loss_tokens: int            # loss tokens of the whole batch (normalise the loss by this)
    seqlens: list[int]          # the whole batch's sequence lengths, packed order
    batch_indices: list[int]    # the samples (dataset indices, or stream positions) packed
    global_positions: torch.Tensor  # long: each local token's position in the packed batch
    epoch: int = 0


def pack_batches(lengths: Iterable[int], tokens_per_batch: int, seed: int = 0,
                 shuffle: bool = True) -> list[list[int]]:
    """Packs sample lengths into batches of at most tokens_per_batch tokens (dcp's packing:
    shuffle with the seed, then fill batches in order); returns the indices of each batch. Every
    sample is in exactly one batch. Raises ValueError for a sample longer than tokens_per_batch."""
    return _core.pack_batch_indices([int(n) for n in lengths], int(tokens_per_batch), int(seed),
                                    bool(shuffle))


def _as_tokens(sample: Any, index: int) -> torch.Tensor:
    tokens = sample if isinstance(sample, torch.Tensor) else torch.as_tensor(sample)
    if tokens.dim() != 1:
        raise ValueError(f"sample {index} has shape {tuple(tokens.shape)}; a sample is a 1-D "
                         "sequence of token ids")
    if tokens.dtype.is_floating_point or tokens.dtype.is_complex or tokens.dtype == torch.bool:
        raise TypeError(f"sample {index} holds {tokens.dtype}; token ids are integers")
    if tokens.numel() == 0:
        raise ValueError(f"sample {index} is empty")
    return tokens.to(torch.long)


class DCPDataloader:
    """Iterates (local_batch, plan) pairs. `dataset`: map-style (len and [i]) or iterable, of
    token sequences (1-D integer tensors or lists). `mask_fn(sample)` returns the sample's mask: a
    built-in spec ('causal', 'lambda:sink=64,window=4096', ...) or an int32 (tokens, K, 2) array of
    per-row key intervals; None means causal. For a model whose layers attend differently it
    returns a dict {kind name: mask}, with the same kind names for every sample, and `layers`
    ({kind name: layer count}, 1 for a kind left out) counts each kind's layers: every batch's plan
    then holds every kind (dcp.plan with a dict of masks).

    Batches hold at most tokens_per_batch tokens; a longer sample raises ValueError. A map-style
    dataset is packed whole per epoch (shuffled with seed + epoch); an iterable one in pools of
    `pool_size` samples. `prefetch` batches are planned ahead on `planner_threads` C++ threads,
    without the GIL. The attention shape (heads, kv_heads, head_dim, dtype, softmax_scale) and the
    planner options (block_size, head_block_size, strategy, cluster, nodes, devices_per_node,
    stages, keep_kv, partial_dtype) are those of dcp.plan; nodes x devices_per_node must be the group's size."""

    def __init__(self, dataset, mask_fn: Callable[[Any], Any] | None = None, *, group=None,
                 tokens_per_batch: int, heads: int, kv_heads: int, head_dim: int,
                 dtype: Any = torch.bfloat16, softmax_scale: float | None = None,
                 block_size: int | None = None, head_block_size: int | None = None,
                 strategy: str | None = None, cluster: str | None = None, nodes: int = 1,
                 devices_per_node: int | None = None, stages: int | None = None,
                 keep_kv: Any = None, partial_dtype: Any = None, layers: dict | None = None,
                 seed: int = 0,
                 shuffle: bool = True, prefetch: int = 2, planner_threads: int = 1,
                 epochs: int = 1, pool_size: int = 1024):
        _, self.rank, self.world_size = resolve_group(group, "DCPDataloader")
        if tokens_per_batch < 1:
            raise ValueError(f"tokens_per_batch {tokens_per_batch} is not positive")
        if nodes < 1 or self.world_size % nodes != 0:
            raise ValueError(f"nodes {nodes} does not divide the group's {self.world_size} ranks")
        devices_per_node = devices_per_node or self.world_size // nodes
        if nodes * devices_per_node != self.world_size:
            raise ValueError(f"nodes x devices_per_node = {nodes} x {devices_per_node} is not the "
                             f"group's {self.world_size} ranks")
        for name, value, low in (("prefetch", prefetch, 1), ("planner_threads", planner_threads, 1),
                                 ("epochs", epochs, 1), ("pool_size", pool_size, 1)):
            if int(value) < low:
                raise ValueError(f"{name} {value} is below {low}")
        if layers is not None and mask_fn is None:
            raise ValueError(f"layers {layers!r} counts the layers of attention kinds; give a "
                             "mask_fn that returns a dict {kind name: mask}")
        self.dataset = dataset
        self.mask_fn = mask_fn
        self.layers = layers
        self.tokens_per_batch = int(tokens_per_batch)
        self.options = dict(heads=heads, kv_heads=kv_heads, head_dim=head_dim,
                            dtype=dcp.dtype_name(dtype), softmax_scale=softmax_scale,
                            block_size=block_size, head_block_size=head_block_size,
                            strategy=strategy, cluster=cluster, nodes=nodes,
                            devices_per_node=devices_per_node, stages=stages, keep_kv=keep_kv,
                            partial_dtype=partial_dtype, seed=seed)
        self.seed, self.shuffle, self.epochs = int(seed), bool(shuffle), int(epochs)
        self.prefetch, self.planner_threads, self.pool_size = int(prefetch), int(planner_threads), int(pool_size)
        self.map_style = hasattr(dataset, "__getitem__") and hasattr(dataset, "__len__")
        self._lengths: list[int] | None = None
        self.wait_seconds = 0.0  # time __next__ blocked on a plan not yet built
        self.plan_seconds = 0.0  # planner time of the batches yielded (sum over threads)

    def _sample(self, index: int) -> torch.Tensor:
        return self._checked(self.dataset[index], index)

    def _checked(self, sample: Any, index: int) -> torch.Tensor:
        tokens = _as_tokens(sample, index)
        if tokens.numel() > self.tokens_per_batch:
            raise ValueError(f"sample {index} has {tokens.numel()} tokens, more than "
                             f"tokens_per_batch {self.tokens_per_batch}")
        return tokens

    def _batches(self) -> Iterator[tuple[int, list[int], list[torch.Tensor]]]:
        for epoch in range(self.epochs):
            if self.map_style:
                if self._lengths is None:
                    self._lengths = [self._sample(i).numel() for i in range(len(self.dataset))]
                for indices in pack_batches(self._lengths, self.tokens_per_batch,
                                            self.seed + epoch, self.shuffle):
                    yield epoch, indices, [self._sample(i) for i in indices]
            else:
                position = 0
                pool: list[torch.Tensor] = []
                stream = iter(self.dataset)
                while True:
                    sample = next(stream, None)
                    if sample is not None:
                        pool.append(self._checked(sample, position + len(pool)))
                    if pool and (sample is None or len(pool) == self.pool_size):
                        for batch in pack_batches([t.numel() for t in pool], self.tokens_per_batch,
                                                  self.seed + epoch + position, self.shuffle):
                            yield epoch, [position + i for i in batch], [pool[i] for i in batch]
                        position += len(pool)
                        pool = []
                    if sample is None:
                        break

    def _request(self, samples: list[torch.Tensor]):
        lengths = [s.numel() for s in samples]
        if self.mask_fn is None:
            return dcp._request(lengths, "causal", **self.options)
        given = [self.mask_fn(sample) for sample in samples]

        def checked(mask: Any, sample: torch.Tensor, what: str) -> Any:
            return mask if isinstance(mask, str) else dcp._mask_array(
                mask, f"{what} for a sample of {sample.numel()} tokens")

        named = [isinstance(mask, dict) for mask in given]
        if not any(named):
            if self.layers is not None:
                raise ValueError(f"layers {self.layers!r} counts the layers of attention kinds, "
                                 "but mask_fn returned a mask, not a dict {kind name: mask}")
            return dcp._request(lengths, [checked(m, s, "mask_fn's mask")
                                          for m, s in zip(given, samples)], **self.options)
        kinds = list(given[named.index(True)])
        for mask in given:
            if not isinstance(mask, dict) or sorted(mask) != sorted(kinds):
                got = sorted(mask) if isinstance(mask, dict) else f"a {type(mask).__name__}"
                raise ValueError(f"mask_fn returned attention kinds {sorted(kinds)} for one "
                                 f"sample of the batch and {got} for another; every sample "
                                 "needs the same kinds")
        masks = {kind: [checked(m[kind], s, f"mask_fn's mask of kind {kind!r}")
                        for m, s in zip(given, samples)] for kind in kinds}
        return dcp._request(lengths, masks, self.layers, **self.options)

    def __iter__(self) -> "_LoaderIterator":
        return _LoaderIterator(self)


class _LoaderIterator:
    def __init__(self, loader: DCPDataloader):
        self.loader = loader
        self.queue = _core.PlanQueue(loader.planner_threads)
        self.batches = loader._batches()
        self.pending: collections.deque = collections.deque()
        self.exhausted = False
        try:
            self._fill()
        except BaseException:
            self.close()
            raise

    def _fill(self) -> None:
        while not self.exhausted and len(self.pending) < self.loader.prefetch:
            item = next(self.batches, None)
            if item is None:
                self.exhausted = True
                break
            epoch, indices, samples = item
            ticket = self.queue.submit(self.loader._request(samples))
            self.pending.append((ticket, epoch, indices, samples))

    def __iter__(self) -> "_LoaderIterator":
        return self

    def __next__(self) -> tuple[LocalBatch, dcp.Plan]:
        if not self.pending:
            self.close()
            raise StopIteration
        try:
            ticket, epoch, indices, samples = self.pending.popleft()
            start = time.perf_counter()
            plan = self.queue.take(ticket)
            self.loader.wait_seconds += time.perf_counter() - start
            self.loader.plan_seconds += plan.plan_ms / 1000.0
            self._fill()
            return _local_batch(plan, self.loader.rank, epoch, indices, samples), plan
        except BaseException:
            self.close()
            raise

    def close(self) -> None:
        """Drops the batches not yet planned and stops the planner threads."""
        if self.queue is not None:
            self.queue.close()
            self.queue = None
            self.pending.clear()
            self.batches.close()

    def __del__(self) -> None:
        self.close()


def _local_batch(plan: dcp.Plan, rank: int, epoch: int, indices: list[int],
                 samples: list[torch.Tensor]) -> LocalBatch:
    tokens = torch.cat(samples)
    lengths = torch.tensor([s.numel() for s in samples])
    starts = torch.cumsum(lengths, 0) - lengths
    positions = torch.arange(tokens.numel()) - torch.repeat_interleave(starts, lengths)
    labels = torch.roll(tokens, -1)
    labels[starts + lengths - 1] = IGNORE_INDEX  # the last token of every sequence
    local = torch.from_numpy(np.asarray(plan.local_token_positions(rank)))
    local_labels = labels[local]
    return LocalBatch(input_ids=tokens[local], labels=local_labels, position_ids=positions[local],
                      loss_mask=local_labels != IGNORE_INDEX,
                      loss_tokens=int(tokens.numel() - len(samples)),
                      seqlens=lengths.tolist(), batch_indices=list(indices),
                      global_positions=local, epoch=epoch)
