# SPDX-License-Identifier: Apache-2.0
"""A Trainer's datasets as DCPDataloader batches, for DCPTrainer and DCPSFTTrainer (trainer.py):
samples read as token ids and target masks, refused with their index before the first step when
they are not, the DCPDataloader over them, and its batches as the Trainer iterates them
(DCPTrainerBatches)."""
from __future__ import annotations

from typing import Any, Callable, Iterator

import torch

import dcp.torch as dcpt
from dcp.torch.data.dataloader import IGNORE_INDEX, PLANNER_OPTIONS, token_ids

# DCPDataloader's planner and loading options a trainer passes through as they are: every planner
# option (dcp.planner_options()) but token_flops, which plan_options(config) gives for the model.
LOADER_OPTIONS = tuple(sorted(PLANNER_OPTIONS - {"token_flops"})) + (
    "block_size", "head_block_size", "softmax_scale", "prefetch", "planner_threads", "pool_size",
    "balance_rounds", "shuffle", "seed")

# The train loader's epochs: it streams for as long as the Trainer asks, and the Trainer counts
# its own epochs.
ENDLESS = 1 << 40

# Per-token masks of a dict sample that keep a token as a target of the loss (1) or not (0):
# TRL's names, honoured when present.
TARGET_MASKS = ("completion_mask", "assistant_masks")


# --- samples ----------------------------------------------------------------------------------

def is_map_style(dataset: Any) -> bool:
    """Whether the dataset is indexed (read again per planned batch for its target masks, and
    counted into Trainer epochs) rather than only iterated."""
    return hasattr(dataset, "__getitem__") and hasattr(dataset, "__len__") and not isinstance(
        dataset, torch.utils.data.IterableDataset)


def _as_list(value: Any) -> Any:
    return value.tolist() if hasattr(value, "tolist") else value


def sample_tokens(sample: Any, index: int) -> torch.Tensor:
    """The token ids of a training sample: a 1-D integer sequence (tensor, array, list) or a dict
    with 'input_ids'. Raises TypeError or ValueError naming the sample and what it holds."""
    ids = sample
    if isinstance(sample, dict):
        if "input_ids" not in sample:
            raise ValueError(f"sample {index} is a dict with keys {sorted(sample)}, without "
                             "'input_ids'; dcp trains on token sequences (tokenize the dataset)")
        ids = sample["input_ids"]
    if isinstance(ids, (str, bytes)):
        raise TypeError(f"sample {index} is text ({ids[:40]!r}...), not token ids; tokenize the "
                        "dataset first")
    return token_ids(ids, index)


def target_mask(sample: Any, tokens: torch.Tensor, index: int) -> torch.Tensor | None:
    """Which next-token labels of the sample count in the loss, as a bool (tokens,) tensor whose
    entry i says whether token i+1 is a target (the last entry is False), or None when all do. A
    dict sample's 'labels' (transformers' convention: the input ids, -100 where a token is no
    target), 'completion_mask' and 'assistant_masks' (1 where a token is a target) decide."""
    if not isinstance(sample, dict):
        return None
    keep = None
    n = tokens.numel()
    labels = sample.get("labels")
    if labels is not None:
        labels = torch.as_tensor(_as_list(labels)).to(torch.long)
        if labels.shape != tokens.shape:
            raise ValueError(f"sample {index} has labels of shape {tuple(labels.shape)} for "
                             f"{n} input_ids")
        bad = (labels != IGNORE_INDEX) & (labels != tokens)
        if bool(bad.any()):
            at = int(bad.nonzero()[0])
            raise ValueError(f"sample {index} has label {int(labels[at])} at position {at} "
                             f"where the input id is {int(tokens[at])}: dcp trains next-token "
                             "prediction, so labels are the input ids, or -100 where a token is "
                             "no target")
        keep = labels != IGNORE_INDEX
    for name in TARGET_MASKS:
        mask = sample.get(name)
        if mask is None:
            continue
        mask = torch.as_tensor(_as_list(mask))
        if mask.shape != tokens.shape:
            raise ValueError(f"sample {index} has a {name} of shape {tuple(mask.shape)} for {n} "
                             "input_ids")
        keep = mask.bool() if keep is None else keep & mask.bool()
    if keep is None:
        return None
    # Label i is token i + 1.
    return torch.cat([keep[1:], torch.zeros(1, dtype=torch.bool)])


def check_samples(dataset: Any, tokens_per_batch: int) -> tuple[list[int] | None, bool]:
    """Reads every sample of a map-style dataset (its lengths are packed anyway), or the first of
    an iterable one, so that a sample that is not token ids, or is longer than tokens_per_batch,
    is refused before the first step. Returns the map-style dataset's sample lengths (None for
    an iterable one) and whether a sample says which tokens are targets (labels,
    completion_mask, assistant_masks). Raises TypeError or ValueError naming the sample."""
    has_targets = False
    if is_map_style(dataset):
        lengths = []
        for index in range(len(dataset)):
            sample = dataset[index]
            tokens = sample_tokens(sample, index)
            has_targets |= target_mask(sample, tokens, index) is not None
            lengths.append(tokens.numel())
        checked = lengths
    else:
        # Target masks are read from the samples of each planned batch again, by index.
        lengths, checked = None, []
        first = next(iter(dataset), None)
        if first is not None:
            tokens = sample_tokens(first, 0)
            if target_mask(first, tokens, 0) is not None:
                kept = [name for name in ("labels",) + TARGET_MASKS if first.get(name) is not None]
                raise ValueError(f"sample 0 says which tokens are targets ({', '.join(kept)}), "
                                 "which dcp reads from map-style datasets only (it reads the "
                                 "samples of each planned batch again); give a dataset with a "
                                 f"length, not a {type(dataset).__name__}")
            checked = [tokens.numel()]
    for index, n in enumerate(checked):
        if n > tokens_per_batch:
            raise ValueError(f"sample {index} has {n} tokens, more than tokens_per_batch "
                             f"{tokens_per_batch}")
    return lengths, has_targets


# --- the loader -------------------------------------------------------------------------------

def _tagged_tokens(sample: Any, index: int) -> torch.Tensor:
    """The sample's token ids, carrying the sample itself (as `dcp_sample`) for a user's mask_fn,
    which gets the sample rather than its tokens."""
    tokens = sample_tokens(sample, index).clone()
    tokens.dcp_sample = sample
    return tokens


class _MapStyleTokens:
    """A map-style dataset's samples as token tensors, which DCPDataloader packs."""

    def __init__(self, dataset: Any):
        self.dataset = dataset

    def __len__(self) -> int:
        return len(self.dataset)

    def __getitem__(self, index: int) -> torch.Tensor:
        return _tagged_tokens(self.dataset[index], index)


class _IterableTokens:
    """An iterable dataset's samples as token tensors, which DCPDataloader packs."""

    def __init__(self, dataset: Any):
        self.dataset = dataset

    def __iter__(self) -> Iterator[torch.Tensor]:
        for index, sample in enumerate(self.dataset):
            yield _tagged_tokens(sample, index)


class SampleMask:
    """The loader's mask_fn around a user's, which gets the dataset's sample, not its tokens, and
    must give every attention kind's mask when the model has several."""

    def __init__(self, mask_fn: Callable[[Any], Any], kinds: dict[str, str] | None):
        self.mask_fn, self.kinds = mask_fn, kinds

    def __call__(self, tokens: torch.Tensor) -> Any:
        mask = self.mask_fn(getattr(tokens, "dcp_sample", tokens))
        if self.kinds is not None and (not isinstance(mask, dict)
                                       or sorted(mask) != sorted(self.kinds)):
            got = sorted(mask) if isinstance(mask, dict) else repr(mask)
            raise ValueError(f"mask_fn returned {got} for a model whose layers attend in kinds "
                             f"{sorted(self.kinds)}: return a dict {{kind: mask}} with every "
                             f"kind (the model's own: {self.kinds})")
        return mask


def sample_loader(dataset: Any, **options: Any) -> dcpt.DCPDataloader:
    """A DCPDataloader (with these options) over the dataset's samples read as token ids."""
    view = _MapStyleTokens(dataset) if is_map_style(dataset) else _IterableTokens(dataset)
    return dcpt.DCPDataloader(view, **options)


def epoch_length(dataset: Any, lengths: list[int] | None,
                 loader: dcpt.DCPDataloader) -> int | None:
    """The batches of one Trainer epoch: the global batches of the loader's first epoch
    (DCPDataloader's grouping: `replicas` packed batches each, a last group of fewer samples than
    replicas left out), or None for a dataset without a length. `lengths` are the samples' token
    counts when check_samples read them; they are read again when the dataset has since changed
    size."""
    if not is_map_style(dataset):
        return None
    if lengths is None or len(lengths) != len(dataset):
        lengths = [sample_tokens(dataset[i], i).numel() for i in range(len(dataset))]
    bins = dcpt.pack_batches(lengths, loader.tokens_per_batch, seed=loader.seed,
                             shuffle=loader.shuffle)
    replicas = loader.replicas
    groups = [bins[i:i + replicas] for i in range(0, len(bins), replicas)]
    if groups and sum(len(b) for b in groups[-1]) < replicas:
        groups.pop()
    return len(groups)


# --- the train loader as the Trainer iterates it -----------------------------------------------

class DCPTrainerBatches:
    """The Trainer's train loader: one endless stream of a DCPDataloader's batches, cut into the
    Trainer's epochs of `len(self)` batches (epoch_length; a dataset without a length has none,
    and the Trainer then needs max_steps). Each item is this rank's model inputs for one batch
    (input_ids, position_ids, labels: (1, local tokens)) with the plan and the LocalBatch; the
    loader's own epochs go on underneath, every sample once per loader epoch.

    state_dict(): the loader's position of the next batch and the batches taken in the current
    Trainer epoch; the Trainer's checkpoints hold it (dcp_loader_state.json)."""

    def __init__(self, loader: dcpt.DCPDataloader, dataset: Any, length: int | None,
                 target_masks: bool):
        self.loader = loader
        self.dataset = dataset  # the Trainer reads its length (num_examples)
        self.length = length
        self.target_masks = target_masks
        self.batch_size = 1
        self.taken = 0          # batches taken in the current Trainer epoch
        self._stream = None

    def __len__(self) -> int:
        if self.length is None:
            raise TypeError(f"a DCPTrainer's batches over a {type(self.dataset).__name__}, a "
                            "dataset without a length, have none")
        return self.length

    def __iter__(self) -> Iterator[dict]:
        if self.length is not None and self.taken >= self.length:
            self.taken = 0
        if self._stream is None:
            self._stream = iter(self.loader)
        while self.length is None or self.taken < self.length:
            item = next(self._stream, None)
            if item is None:
                return
            self.taken += 1
            yield self.inputs(*item)

    def inputs(self, lb: dcpt.LocalBatch, plan: Any) -> dict:
        """A batch's model inputs, with dcp's labels (the next token of the same sequence, -100
        where it is no target)."""
        labels = lb.labels
        if self.target_masks and labels.numel() and is_map_style(self.dataset):
            keep = []
            for index in lb.batch_indices:
                sample = self.dataset[index]
                keep.append(target_mask(sample, sample_tokens(sample, index), index))
            if any(k is not None for k in keep):
                whole = torch.cat([k if k is not None else torch.ones(n, dtype=torch.bool)
                                   for k, n in zip(keep, lb.seqlens)])
                labels = torch.where(whole[lb.global_positions], labels,
                                     torch.full_like(labels, IGNORE_INDEX))
        return dict(input_ids=lb.input_ids[None], position_ids=lb.position_ids[None],
                    labels=labels[None], dcp_plan=plan, dcp_batch=lb)

    def skipped(self, batches: int) -> "DCPTrainerBatches":
        """What the Trainer's skip of the batches it trained before a resume returns: these
        batches, whose loader already stands after them (its state came from the checkpoint)."""
        if batches != self.taken:
            raise ValueError(f"resuming skips {batches} batches of the epoch, but the loader's "
                             f"checkpointed state had taken {self.taken}: was the checkpoint "
                             "written with other gradient_accumulation_steps or another dataset?")
        return self

    def state_dict(self) -> dict:
        return dict(loader=self.loader.state_dict(), taken=self.taken, length=self.length)

    def load_state_dict(self, state: dict) -> None:
        if state.get("length") != self.length:
            raise ValueError(f"the checkpoint's loader state has Trainer epochs of "
                             f"{state.get('length')} batches; this dataset gives {self.length}")
        self.loader.load_state_dict(state["loader"])
        self.taken = int(state["taken"])
        self._stream = None

    def close(self) -> None:
        if self._stream is not None:
            self._stream.close()
            self._stream = None
