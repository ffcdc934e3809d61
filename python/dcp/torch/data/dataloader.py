# SPDX-License-Identifier: Apache-2.0
"""DCPDataloader: packs samples into batches, plans each batch in the background in C++ threads,
and yields this rank's tokens of each batch in the executor's local layout, with the plan.

Every rank of the group iterates the same batches and plans each one itself: planning is
deterministic (same batch, options and seed, same plan bytes), so no plan crosses the network
and no rank waits for another to plan (docs/python.md has the measurement behind this choice)."""
from __future__ import annotations

import collections
import concurrent.futures
import dataclasses
import functools
import itertools
import time
import warnings
from typing import Any, Callable, Iterable, Iterator

import numpy as np
import torch

import dcp
from dcp import _core
from dcp.torch.data import shares
from dcp.torch.group import resolve_layout

IGNORE_INDEX = -100

# The planner's options (dcp.planner_options(): the flags of `dcp plan`, described once in C++),
# each a keyword of DCPDataloader that it passes to every batch's plan as dcp.plan takes it.
PLANNER_OPTIONS = frozenset(option["name"] for option in dcp.planner_options())


@dataclasses.dataclass
class LocalBatch:
    """This rank's tokens of one packed batch, in the plan's local layout."""
    input_ids: torch.Tensor     # long (local tokens,)
    labels: torch.Tensor        # long: the next token of the same sequence, -100 at a sequence end
    position_ids: torch.Tensor  # long: position within the token's sequence (RoPE)
    loss_mask: torch.Tensor     # bool: labels != -100
    loss_tokens: int            # loss tokens of the global batch, every replica's (the normaliser)
    seqlens: list[int]          # the plan's sequence lengths, packed order
    batch_indices: list[int]    # the plan's samples (dataset indices, or stream positions)
    global_positions: torch.Tensor  # long: each local token's position in the plan's batch
    epoch: int = 0
    step: int = 0               # the global batch's number within its epoch
    replica: int = 0            # this rank's data-parallel replica, of `replicas`
    replicas: int = 1
    replica_steps: list[float] = dataclasses.field(default_factory=list)  # simulated, per replica


def pack_batches(lengths: Iterable[int], tokens_per_batch: int, seed: int = 0,
                 shuffle: bool = True) -> list[list[int]]:
    """Packs sample lengths into batches of at most tokens_per_batch tokens (dcp's packing:
    shuffle with the seed, then fill batches in order); returns the indices of each batch. Every
    sample is in exactly one batch. Raises ValueError for a sample longer than tokens_per_batch."""
    return _core.pack_batch_indices([int(n) for n in lengths], int(tokens_per_batch), int(seed),
                                    bool(shuffle))


def token_ids(ids: Any, index: int) -> torch.Tensor:
    """Sample `index`'s token ids as a 1-D long tensor, from a tensor, an array or a list. Raises
    TypeError (not integers, not a sequence) or ValueError (not 1-D, empty) naming the sample."""
    try:
        tokens = ids if isinstance(ids, torch.Tensor) else torch.as_tensor(
            ids.tolist() if hasattr(ids, "tolist") else ids)
    except (TypeError, ValueError, RuntimeError) as error:
        raise TypeError(f"sample {index} is a {type(ids).__name__}, not a sequence of token ids "
                        f"({error})") from error
    if tokens.dim() != 1:
        raise ValueError(f"sample {index} has shape {tuple(tokens.shape)}; a sample is one 1-D "
                         "sequence of token ids (unbatched, unpadded)")
    if tokens.dtype.is_floating_point or tokens.dtype.is_complex or tokens.dtype == torch.bool:
        raise TypeError(f"sample {index} holds {tokens.dtype} values; token ids are integers")
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

    A plan's batch holds at most tokens_per_batch tokens; a longer sample raises ValueError. A
    map-style dataset is packed whole per epoch (shuffled with seed + epoch); an iterable one in
    pools of `pool_size` samples. `prefetch` batches are planned ahead on `planner_threads` C++
    threads, without the GIL. The attention shape (heads, kv_heads, head_dim, dtype,
    softmax_scale), the block sizes (block_size, head_block_size) and every option of
    dcp.planner_options() (the flags of `dcp plan`: strategy, static_dp, eps_memory, keep_kv, ...)
    are dcp.plan's, passed to every batch's plan as dcp.plan takes them (dcp.torch.hf.plan_options
    gives a transformers model's); one left out or None is the planner's default, but nodes is 1
    unless given and devices_per_node the group's size over nodes: nodes x devices_per_node must be
    the size of the group the plans span. Another keyword is a TypeError naming it. Over a pool of
    many devices, where the rest of each layer costs per token, a tight eps_memory (0.02, say)
    keeps every device's tokens near the mean, and max_device_tokens (the most a rank may hold)
    lets dcp also fill each node up to it (docs/pool_bench.md).

    Data parallelism: the plans span `group` (default: every rank), which may be the whole pool
    of devices. With `mesh` (a DeviceMesh with the dims named by mesh_dims, data-parallel then
    context-parallel) or `dp_group` beside `group`, each of the dp replicas plans its own share of
    every global batch over its context-parallel group: a global batch is dp packed batches
    whose samples are dealt to the replicas by attention work, then balanced by the simulated
    step of each replica's plan (up to `balance_rounds` moves; every rank plans every share, so
    the ranks agree without exchanging anything). Every sample is trained once per epoch across
    the replicas; when the last global batch of an epoch has fewer samples than replicas, those
    samples are left out of that epoch (a warning names them; with shuffle, other samples fall
    there in the next epoch). LocalBatch.loss_tokens counts the loss tokens of the whole global
    batch, every replica's: each rank's loss is its share of the global mean, and the gradients
    are summed over every rank (dcp.torch.sum_gradients sets FSDP2 and DDP to sum).

    state_dict() / load_state_dict() (torch.distributed.checkpoint's Stateful protocol): the
    position (epoch, global batch) of the next batch, with what fixes the batches; iteration
    resumes there with the same batches and plans as an uninterrupted run."""

    STATE_VERSION = 1

    def __init__(self, dataset, mask_fn: Callable[[Any], Any] | None = None, *, group=None,
                 mesh=None, mesh_dims: tuple[str, str] = ("dp", "cp"), dp_group=None,
                 tokens_per_batch: int, heads: int, kv_heads: int, head_dim: int,
                 dtype: Any = torch.bfloat16, softmax_scale: float | None = None,
                 block_size: int | None = None, head_block_size: int | None = None,
                 cluster: str | None = None, nodes: int = 1, devices_per_node: int | None = None,
                 layers: dict | None = None,
                 seed: int = 0, shuffle: bool = True, prefetch: int = 2,
                 planner_threads: int = 1, epochs: int = 1, pool_size: int = 1024,
                 balance_rounds: int = 2, **planner_options: Any):
        unknown = sorted(set(planner_options) - PLANNER_OPTIONS)
        if unknown:
            raise TypeError(f"DCPDataloader got unknown keyword argument(s) {', '.join(unknown)}; "
                            "its planner options are dcp.planner_options()'s: "
                            f"{', '.join(sorted(PLANNER_OPTIONS))}")
        layout = resolve_layout(group, mesh, mesh_dims, dp_group, "DCPDataloader")
        self.group, self.rank, self.world_size = layout.group, layout.rank, layout.size
        self.replica, self.replicas = layout.replica, layout.replicas
        if tokens_per_batch < 1:
            raise ValueError(f"tokens_per_batch {tokens_per_batch} is not positive")
        if nodes < 1 or self.world_size % nodes != 0:
            raise ValueError(f"nodes {nodes} does not divide the group's {self.world_size} ranks")
        devices_per_node = devices_per_node or self.world_size // nodes
        if nodes * devices_per_node != self.world_size:
            raise ValueError(f"nodes x devices_per_node = {nodes} x {devices_per_node} is not the "
                             f"group's {self.world_size} ranks")
        for name, value, low in (("prefetch", prefetch, 1), ("planner_threads", planner_threads, 1),
                                 ("epochs", epochs, 1), ("pool_size", pool_size, 1),
                                 ("balance_rounds", balance_rounds, 0)):
            if int(value) < low:
                raise ValueError(f"{name} {value} is below {low}")
        if layers is not None and mask_fn is None:
            raise ValueError(f"layers {layers!r} counts the layers of attention kinds; give a "
                             "mask_fn that returns a dict {kind name: mask}")
        self.dataset = dataset
        self.mask_fn = mask_fn
        self.layers = layers
        self.tokens_per_batch = int(tokens_per_batch)
        self.options = dict(planner_options, heads=heads, kv_heads=kv_heads, head_dim=head_dim,
                            dtype=dcp.dtype_name(dtype), softmax_scale=softmax_scale,
                            block_size=block_size, head_block_size=head_block_size,
                            cluster=cluster, nodes=nodes, devices_per_node=devices_per_node,
                            seed=seed)
        self.cluster = cluster or _core.DEFAULT_CLUSTER
        self.seed, self.shuffle, self.epochs = int(seed), bool(shuffle), int(epochs)
        self.prefetch, self.planner_threads = int(prefetch), int(planner_threads)
        self.pool_size = int(pool_size)
        self.balance_rounds = int(balance_rounds)
        self.map_style = hasattr(dataset, "__getitem__") and hasattr(dataset, "__len__")
        self._lengths: list[int] | None = None
        self._position = (0, 0)  # (epoch, global batch within it) of the next batch
        self.left_out: list[int] = []  # samples left out at the ends of epochs (see above)
        self.wait_seconds = 0.0  # time __next__ blocked on a plan not yet built
        self.plan_seconds = 0.0  # planner time of the batches yielded (sum over threads)

    # --- state --------------------------------------------------------------------------------

    def _identity(self) -> dict:
        """What fixes the sequence of global batches: a state from a loader that differs in any
        of these would resume on other batches."""
        return dict(dataset_length=len(self.dataset) if self.map_style else None,
                    seed=self.seed, shuffle=self.shuffle, tokens_per_batch=self.tokens_per_batch,
                    world_size=self.world_size, replicas=self.replicas,
                    pool_size=None if self.map_style else self.pool_size)

    def state_dict(self) -> dict:
        """The position of the next global batch (epoch, batch) and what fixes the batches; the
        same on every rank of the pool."""
        epoch, batch = self._position
        return dict(version=self.STATE_VERSION, epoch=epoch, batch=batch, **self._identity())

    def load_state_dict(self, state: dict) -> None:
        """Continues at the state's position. Raises ValueError naming the first field in which
        the state's loader differs from this one (dataset_length, seed, shuffle,
        tokens_per_batch, world_size, replicas, pool_size), or a malformed state."""
        if not isinstance(state, dict):
            raise TypeError(f"a DCPDataloader state is a dict, not a {type(state).__name__}")
        if state.get("version") != self.STATE_VERSION:
            raise ValueError(f"DCPDataloader state version {state.get('version')!r} is not "
                             f"{self.STATE_VERSION}")
        for name, want in self._identity().items():
            if name not in state:
                raise ValueError(f"the DCPDataloader state has no field {name!r}")
            if state[name] != want:
                raise ValueError(f"the DCPDataloader state is for {name} {state[name]!r}; this "
                                 f"loader has {name} {want!r}")
        epoch, batch = state.get("epoch"), state.get("batch")
        for name, value in (("epoch", epoch), ("batch", batch)):
            if isinstance(value, bool) or not isinstance(value, int) or value < 0:
                raise ValueError(f"the DCPDataloader state's {name} {value!r} is not a count")
        self._position = (int(epoch), int(batch))

    # --- batches ------------------------------------------------------------------------------

    def _sample(self, index: int) -> torch.Tensor:
        return self._checked(self.dataset[index], index)

    def _checked(self, sample: Any, index: int) -> torch.Tensor:
        tokens = token_ids(sample, index)
        if tokens.numel() > self.tokens_per_batch:
            raise ValueError(f"sample {index} has {tokens.numel()} tokens, more than "
                             f"tokens_per_batch {self.tokens_per_batch}")
        return tokens

    def _read(self, indices: list[int]) -> list[torch.Tensor]:
        return [self._sample(i) for i in indices]

    def _bins(self, epoch: int) -> Iterator[tuple[list[int], Callable[[], list[torch.Tensor]]]]:
        """The packed batches of one epoch: (indices, a function that reads their samples)."""
        if self.map_style:
            if self._lengths is None:
                self._lengths = [self._sample(i).numel() for i in range(len(self.dataset))]
            for indices in pack_batches(self._lengths, self.tokens_per_batch, self.seed + epoch,
                                        self.shuffle):
                yield indices, functools.partial(self._read, indices)
            return
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
                    chosen = [pool[i] for i in batch]
                    yield [position + i for i in batch], functools.partial(list, chosen)
                position += len(pool)
                pool = []
            if sample is None:
                break

    def _global_batches(self, start: tuple[int, int]) -> Iterator[tuple]:
        """(epoch, global batch, its packed batches' sizes, indices, samples) from position
        `start` on: `replicas` packed batches at a time (the global batch's samples, in packing
        order). The batches before `start` are skipped without reading their samples (a
        map-style dataset)."""
        first_epoch, skip = start
        for epoch in range(first_epoch, self.epochs):
            bins = self._bins(epoch)
            number = 0
            while True:
                group = list(itertools.islice(bins, self.replicas))
                if not group:
                    break
                if epoch == first_epoch and number < skip:
                    number += 1
                    continue
                indices = [i for ix, _ in group for i in ix]
                if len(indices) < self.replicas:
                    warnings.warn(f"DCPDataloader: epoch {epoch} ends with {len(indices)} samples "
                                  f"({indices}) for {self.replicas} data-parallel replicas; they "
                                  "are left out of this epoch", stacklevel=3)
                    self.left_out.extend(indices)
                    break
                samples = [s for _, read in group for s in read()]
                yield epoch, number, [len(ix) for ix, _ in group], indices, samples
                number += 1
            first_epoch, skip = -1, 0

    def _masks(self, samples: list[torch.Tensor]) -> Any:
        """The masks of the samples in the planner's form: a spec for all, a list with one per
        sample, or a dict {kind: list}."""
        if self.mask_fn is None:
            return "causal"
        given = [self.mask_fn(sample) for sample in samples]

        def checked(mask: Any, sample: torch.Tensor, what: str) -> Any:
            return mask if isinstance(mask, str) else dcp._mask_array(
                mask, f"{what} for a sample of {sample.numel()} tokens")

        named = [isinstance(mask, dict) for mask in given]
        if not any(named):
            if self.layers is not None:
                raise ValueError(f"layers {self.layers!r} counts the layers of attention kinds, "
                                 "but mask_fn returned a mask, not a dict {kind name: mask}")
            return [checked(m, s, "mask_fn's mask") for m, s in zip(given, samples)]
        kinds = list(given[named.index(True)])
        for mask in given:
            if not isinstance(mask, dict) or sorted(mask) != sorted(kinds):
                got = sorted(mask) if isinstance(mask, dict) else f"a {type(mask).__name__}"
                raise ValueError(f"mask_fn returned attention kinds {sorted(kinds)} for one "
                                 f"sample of the batch and {got} for another; every sample "
                                 "needs the same kinds")
        return {kind: [checked(m[kind], s, f"mask_fn's mask of kind {kind!r}")
                       for m, s in zip(given, samples)] for kind in kinds}

    def _request(self, samples: list[torch.Tensor], masks: Any, share: list[int] | None = None):
        """The plan request of the samples at positions `share` (all when None)."""
        share = list(range(len(samples))) if share is None else share
        lengths = [samples[i].numel() for i in share]

        def pick(m: Any) -> Any:
            return m if isinstance(m, str) else [m[i] for i in share]
        if isinstance(masks, dict):
            return dcp._request(lengths, {k: pick(m) for k, m in masks.items()}, self.layers,
                                **self.options)
        return dcp._request(lengths, pick(masks), **self.options)

    def _works(self, samples: list[torch.Tensor], masks: Any) -> list[float]:
        """Each sample's attention work: the unmasked pairs of its mask, kinds by their layers."""
        def pairs(mask: Any, length: int) -> float:
            rows = dcp.mask_intervals(mask, length) if isinstance(mask, str) else mask
            return float(np.asarray(rows[..., 1] - rows[..., 0], dtype=np.int64).sum())

        def of(masks_of_kind: Any, i: int) -> Any:
            return masks_of_kind if isinstance(masks_of_kind, str) else masks_of_kind[i]
        kinds = masks if isinstance(masks, dict) else {None: masks}
        layers = self.layers or {}
        return [sum(layers.get(kind, 1) * pairs(of(m, i), samples[i].numel())
                    for kind, m in kinds.items()) for i in range(len(samples))]

    def __iter__(self) -> "_LoaderIterator":
        if self._position[0] >= self.epochs:
            self._position = (0, 0)  # a finished run starts over
        return _LoaderIterator(self)


@dataclasses.dataclass
class _Planned:
    """A global batch, split and planned: this replica's samples and plan."""
    epoch: int
    number: int
    samples: list[torch.Tensor]   # this replica's
    indices: list[int]            # this replica's
    plan: Any
    loss_tokens: int              # the global batch's (every replica's)
    replica_steps: list[float]    # each replica's simulated step (empty with one replica)


def _judge(loader: DCPDataloader, queue, samples, masks,
           parts: list[list[int]]) -> list[tuple[Any, float]]:
    """Plans shares of a global batch at once; each one's plan and simulated step."""
    tickets = [queue.submit(loader._request(samples, masks, s)) for s in parts]
    plans = [queue.take(t) for t in tickets]
    return [(p, float(p.simulate(loader.cluster)["step_seconds"])) for p in plans]


def _plan(loader: DCPDataloader, queue, epoch: int, number: int, bin_sizes: list[int],
          indices: list[int], samples: list[torch.Tensor]) -> _Planned:
    """A global batch split among the replicas (shares.split) and this replica's share planned."""
    masks = loader._masks(samples)
    loss_tokens = sum(s.numel() for s in samples) - len(samples)
    if loader.replicas == 1:
        plan = queue.take(queue.submit(loader._request(samples, masks)))
        return _Planned(epoch, number, samples, indices, plan, loss_tokens, [])
    starts = np.cumsum([0] + bin_sizes)
    bins = [list(range(starts[i], starts[i + 1])) for i in range(len(bin_sizes))]
    split = shares.split(loader._works(samples, masks), [s.numel() for s in samples], bins,
                         loader.replicas, loader.tokens_per_batch,
                         lambda ss: _judge(loader, queue, samples, masks, ss),
                         loader.balance_rounds)
    mine = split.shares[loader.replica]
    return _Planned(epoch, number, [samples[i] for i in mine], [indices[i] for i in mine],
                    split.plans[loader.replica], loss_tokens, split.steps)


class _LoaderIterator:
    def __init__(self, loader: DCPDataloader):
        self.loader = loader
        self.queue = _core.PlanQueue(loader.planner_threads)
        # Global batches are split and planned on Python threads that wait on the C++ planner
        # threads (the GIL is released there), `prefetch` of them ahead.
        self.workers = concurrent.futures.ThreadPoolExecutor(max_workers=loader.prefetch,
                                                             thread_name_prefix="dcp-loader")
        self.batches = loader._global_batches(loader._position)
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
            # The workers hold the loader and the queue, not this iterator: dropping the
            # iterator closes it at once, in the thread that drops it.
            self.pending.append(self.workers.submit(_plan, self.loader, self.queue, *item))

    def __iter__(self) -> "_LoaderIterator":
        return self

    def __next__(self) -> tuple[LocalBatch, dcp.Plan]:
        if not self.pending:
            self.close()
            self.loader._position = (self.loader.epochs, 0)
            raise StopIteration
        try:
            future = self.pending.popleft()
            start = time.perf_counter()
            planned = future.result()
            self.loader.wait_seconds += time.perf_counter() - start
            self.loader.plan_seconds += planned.plan.plan_ms / 1000.0
            self._fill()
            self.loader._position = (planned.epoch, planned.number + 1)
            return _local_batch(planned, self.loader), planned.plan
        except BaseException:
            self.close()
            raise

    def close(self) -> None:
        """Drops the batches not yet planned and stops the planner threads."""
        if self.queue is not None:
            for future in self.pending:
                future.cancel()
            self.queue.close()  # a worker waiting on a dropped plan raises, and is dropped
            self.workers.shutdown(wait=True, cancel_futures=True)
            self.queue = None
            self.pending.clear()
            self.batches.close()

    def __del__(self) -> None:
        self.close()


def _local_batch(planned: _Planned, loader: DCPDataloader) -> LocalBatch:
    tokens = torch.cat(planned.samples)
    lengths = torch.tensor([s.numel() for s in planned.samples])
    starts = torch.cumsum(lengths, 0) - lengths
    positions = torch.arange(tokens.numel()) - torch.repeat_interleave(starts, lengths)
    labels = torch.roll(tokens, -1)
    labels[starts + lengths - 1] = IGNORE_INDEX  # the last token of every sequence
    local = torch.from_numpy(np.asarray(planned.plan.local_token_positions(loader.rank)))
    local_labels = labels[local]
    return LocalBatch(input_ids=tokens[local], labels=local_labels, position_ids=positions[local],
                      loss_mask=local_labels != IGNORE_INDEX, loss_tokens=planned.loss_tokens,
                      seqlens=lengths.tolist(), batch_indices=list(planned.indices),
                      global_positions=local, epoch=planned.epoch, step=planned.number,
                      replica=loader.replica, replicas=loader.replicas,
                      replica_steps=planned.replica_steps)
