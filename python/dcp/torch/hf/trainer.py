# SPDX-License-Identifier: Apache-2.0
"""transformers' Trainer and TRL's SFTTrainer on dcp: DCPTrainer and DCPSFTTrainer, swapped in for
the stock classes with the same arguments plus dcp's (tokens_per_batch, mask_fn, planner options,
the group or mesh).

    trainer = dcp.torch.hf.DCPTrainer(model=model, args=TrainingArguments(...),
                                      train_dataset=dataset, tokens_per_batch=65536)
    trainer.train()

What changes against the stock Trainer, and why (docs/python.md, "The Hugging Face Trainer"):
- The train loader is a DCPDataloader: samples packed by tokens, every batch planned for the
  model's attention kinds (plan_options(config)), each rank given its tokens in the plan's
  layout. accelerate neither prepares nor slices it: its batches are already per rank.
- The model gets the executor (model_inputs) and dcp's labels (already shifted, local); its own
  loss divides by num_items_in_batch, the loss tokens of every micro-batch of the optimizer step
  over the whole pool, so the ranks' gradients sum to the global mean's. They are summed: DDP
  and FSDP2 by dcp.torch.sum_gradients, an unwrapped model by one all-reduce before clipping.
- The logged loss is the global mean (each rank's share, summed over the pool).
- Checkpoints hold the loader's position; resume_from_checkpoint continues with the next batch.
- Evaluation runs on dcp too, over packed batches of the eval dataset (eval_loss only).

How samples are read, checked and packed into the loader is dcp.torch.hf._trainer_loader's; this
module holds the Trainer subclasses. Imports transformers and accelerate; DCPSFTTrainer imports
trl when first used."""
from __future__ import annotations

import inspect
import json
import os
import time
import warnings
from typing import Any, Callable, Iterator

import torch
import torch.distributed as dist
import transformers
from transformers.trainer_utils import speed_metrics

import dcp.torch as dcpt
from dcp.torch import hf as dcphf
from dcp.torch.data.dataloader import IGNORE_INDEX
from dcp.torch.hf._trainer_loader import (
    ENDLESS,
    LOADER_OPTIONS,
    DCPTrainerBatches,
    SampleMask,
    check_samples,
    epoch_length,
    is_map_style,
    sample_loader,
)

# The file of a checkpoint that holds the train loader's position (DCPTrainerBatches.state_dict).
LOADER_STATE = "dcp_loader_state.json"


def _distributed() -> bool:
    return dist.is_available() and dist.is_initialized()


class DCPTrainerMixin:
    """dcp's part of DCPTrainer and DCPSFTTrainer; see the module's docstring."""

    # compute_loss divides by the optimizer step's loss tokens: no further division by the
    # accumulation steps.
    loss_is_scaled_for_ga = True

    def __init__(self, *args: Any, tokens_per_batch: int,
                 mask_fn: Callable[[Any], Any] | None = None, group=None, mesh=None,
                 mesh_dims: tuple[str, str] = ("dp", "cp"), dp_group=None,
                 executor: dcpt.DCPExecutor | None = None, **kwargs: Any):
        self._dcp_options = {name: kwargs.pop(name) for name in LOADER_OPTIONS if name in kwargs}
        bound = inspect.signature(super().__init__).bind_partial(*args, **kwargs).arguments
        if isinstance(tokens_per_batch, bool) or not isinstance(tokens_per_batch, int) \
                or tokens_per_batch < 2:
            raise ValueError(f"tokens_per_batch {tokens_per_batch!r} is not an integer above 1")
        self._dcp_refuse_arguments(bound)
        self._dcp_tokens_per_batch = tokens_per_batch
        self._dcp_user_mask = mask_fn
        self._dcp_layout = dict(group=group, mesh=mesh, mesh_dims=mesh_dims, dp_group=dp_group)
        self._dcp_executor = executor
        self._dcp_batches: DCPTrainerBatches | None = None
        self._dcp_resume: str | None = None
        # How gradients are summed over the pool (_dcp_sum_gradients), set at the first step.
        self._dcp_gradient_sum: str | None = None
        # The train dataset's sample lengths and whether its samples mark targets (check_samples).
        self._dcp_train_lengths: list[int] | None = None
        self._dcp_train_targets = False
        dcphf.register()
        super().__init__(*args, **kwargs)
        self._dcp_setup_model()
        if self.args.per_device_train_batch_size != 1:  # TRL's and the Trainer's defaults
            self.args.per_device_train_batch_size = 1
            self._train_batch_size = 1
        if self.train_dataset is not None:
            lengths, targets = self._dcp_check_dataset(self.train_dataset, "train_dataset")
            if not isinstance(self.train_dataset, dict):
                self._dcp_train_lengths, self._dcp_train_targets = lengths, targets

    # - arguments -

    def _dcp_refuse_arguments(self, bound: dict) -> None:
        """Refuses the Trainer arguments dcp cannot honour, or overrides them with a warning that
        says so."""
        name = type(self).__name__
        args = bound.get("args")
        if bound.get("data_collator") is not None:
            raise ValueError(f"{name}: data_collator={bound['data_collator']!r}: dcp packs samples "
                             "by tokens and gives each rank its tokens of the plan, so there is "
                             "nothing to collate or pad; pass samples of token ids (or dicts "
                             "with input_ids, and labels, completion_mask or assistant_masks)")
        for what in ("compute_metrics", "preprocess_logits_for_metrics", "compute_loss_func",
                     "model_init"):
            if bound.get(what) is not None:
                raise ValueError(f"{name}: {what} is not supported: each rank holds its tokens "
                                 "of the plan, not whole sequences (evaluation reports eval_loss; "
                                 "the loss is the model's own over dcp's labels)")
        if args is None:
            return
        strategy = getattr(args, "train_sampling_strategy", None)
        refused = [
            ("group_by_length", getattr(args, "group_by_length", False),
             "dcp packs samples by tokens itself"),
            ("train_sampling_strategy", strategy if strategy == "group_by_length" else None,
             "dcp packs samples by tokens itself"),
            ("auto_find_batch_size", getattr(args, "auto_find_batch_size", False),
             "dcp packs by tokens_per_batch; lower that instead"),
            ("label_smoothing_factor", getattr(args, "label_smoothing_factor", 0.0),
             "the loss is the model's own cross-entropy over dcp's labels"),
            ("neftune_noise_alpha", getattr(args, "neftune_noise_alpha", None),
             "NEFTune scales its noise by each call's sequence length, which on a rank of dcp "
             "is the rank's share of the batch"),
            ("deepspeed", getattr(args, "deepspeed", None),
             "DeepSpeed's gradient averaging is not undone; use DDP or FSDP2"),
            ("parallelism_config", getattr(args, "parallelism_config", None),
             "dcp is the context parallelism; pass group= or mesh= instead"),
            ("packing", getattr(args, "packing", False),
             "dcp packs samples by tokens itself, every sequence kept apart by the plan"),
        ]
        for field, value, why in refused:
            if value:
                raise ValueError(f"{name}: {field}={value!r} is not supported: {why}")
        if getattr(args, "fsdp", None):
            version = int((getattr(args, "fsdp_config", None) or {}).get("version", 1))
            if version != 2:
                raise ValueError(f"{name}: fsdp={args.fsdp!r} with FSDP version {version}; dcp "
                                 "sums gradients under FSDP2 (fsdp_config={'version': 2}) or DDP")
        if getattr(args, "n_gpu", 1) > 1:
            raise ValueError(f"{name}: {args.n_gpu} GPUs in one process (DataParallel); launch one "
                             "process per GPU (torchrun or accelerate launch)")
        if args.per_device_train_batch_size != 1:
            warnings.warn(f"{name}: per_device_train_batch_size={args.per_device_train_batch_size} "
                          f"is ignored: dcp packs samples into batches of up to tokens_per_batch "
                          "tokens, one batch per step of the pool (set to 1)", stacklevel=4)
            args.per_device_train_batch_size = 1
        if strategy == "sequential":
            self._dcp_options.setdefault("shuffle", False)  # samples packed in dataset order
        if getattr(args, "dataloader_num_workers", 0):
            warnings.warn(f"{name}: dataloader_num_workers={args.dataloader_num_workers} is "
                          "ignored: dcp plans batches on its own planner threads "
                          "(planner_threads=)", stacklevel=4)
            args.dataloader_num_workers = 0

    def _dcp_setup_model(self) -> None:
        """Plans for the model as it runs: its attention's plan options (mask_fn wrapped around a
        user's), dcp's attention set where it ran another, and the plan's dtype."""
        model = self.model
        config = getattr(model, "config", None)
        if config is None:
            raise ValueError(f"{type(self).__name__}: the model ({type(model).__name__}) has no "
                             "transformers config to plan its attention from")
        # Raises ValueError naming what dcp cannot plan (an attention kind, softcapping, ...).
        self._dcp_plan_options = dcphf.plan_options(config)
        implementation = getattr(config, "_attn_implementation", None)
        if implementation != dcphf.NAME:
            if not hasattr(model, "set_attn_implementation"):
                raise ValueError(f"{type(self).__name__}: the model runs attention "
                                 f"{implementation!r}; load it with attn_implementation='dcp'")
            warnings.warn(f"{type(self).__name__}: the model ran attention {implementation!r}; "
                          "it now runs 'dcp' (set_attn_implementation)", stacklevel=4)
            model.set_attn_implementation(dcphf.NAME)
        model_mask = self._dcp_plan_options["mask_fn"]
        kinds = model_mask.kinds if isinstance(model_mask, dcphf.ModelKinds) else None
        if self._dcp_user_mask is not None:
            self._dcp_plan_options["mask_fn"] = SampleMask(self._dcp_user_mask, kinds)
        # The plan's dtype is the one attention runs in: autocast's under mixed precision.
        precision = str(getattr(self.accelerator, "mixed_precision", "no"))
        if precision == "bf16":
            self._dcp_dtype = torch.bfloat16
        elif precision == "fp16":
            self._dcp_dtype = torch.float16
        else:
            self._dcp_dtype = next((p.dtype for p in model.parameters()
                                    if p.is_floating_point()), torch.float32)

    def _dcp_check_dataset(self, dataset: Any, what: str) -> tuple[list[int] | None, bool]:
        """check_samples on the dataset (each dataset of a dict of them), its errors prefixed with
        the trainer and the dataset's name: the sample lengths of a map-style dataset (None
        otherwise) and whether a sample says which tokens are targets."""
        if isinstance(dataset, dict):
            checks = [self._dcp_check_dataset(part, f"{what}[{key!r}]")
                      for key, part in dataset.items()]
            return None, any(targets for _, targets in checks)
        try:
            return check_samples(dataset, self._dcp_tokens_per_batch)
        except (TypeError, ValueError) as error:
            raise type(error)(f"{type(self).__name__}: {what}: {error}") from error

    # - loaders -

    def _dcp_loader(self, dataset: Any, *, shuffle: bool | None = None,
                    epochs: int = ENDLESS) -> dcpt.DCPDataloader:
        """A DCPDataloader over the dataset with the trainer's options, checked to span every
        process (each must hold a rank of the pool); the first one also gives the executor its
        group when none was passed."""
        options = dict(self._dcp_options)
        options.setdefault("seed", self.args.data_seed if self.args.data_seed is not None
                           else self.args.seed)
        if shuffle is not None:
            options["shuffle"] = shuffle
        loader = sample_loader(dataset, **self._dcp_layout,
                               tokens_per_batch=self._dcp_tokens_per_batch,
                               dtype=self._dcp_dtype, epochs=epochs, **options,
                               **self._dcp_plan_options)
        pool = loader.world_size * loader.replicas
        world = dist.get_world_size() if _distributed() else 1
        if pool != world:
            raise ValueError(f"{type(self).__name__}: the loader's pool is {pool} ranks "
                             f"({loader.replicas} replicas of {loader.world_size}), but {world} "
                             "processes train: every process must hold a rank of the pool")
        if self._dcp_executor is None:
            self._dcp_executor = dcpt.DCPExecutor(group=loader.group)
        return loader

    def get_train_dataloader(self) -> DCPTrainerBatches:
        """The DCPDataloader's batches as the Trainer iterates them (DCPTrainerBatches), at the
        checkpoint's position when resuming. Not prepared by accelerate: each rank's batch is its
        share already."""
        if self.train_dataset is None:
            raise ValueError(f"{type(self).__name__}: training requires a train_dataset")
        if self._dcp_batches is not None:
            self._dcp_batches.close()
        loader = self._dcp_loader(self.train_dataset)
        length = epoch_length(self.train_dataset, self._dcp_train_lengths, loader)
        batches = DCPTrainerBatches(loader, self.train_dataset, length, self._dcp_train_targets)
        if self._dcp_resume is not None:
            path = os.path.join(self._dcp_resume, LOADER_STATE)
            if not os.path.isfile(path):
                raise ValueError(f"{type(self).__name__}: checkpoint {self._dcp_resume!r} has no "
                                 f"{LOADER_STATE} (written by another trainer than DCPTrainer?)")
            with open(path) as f:
                batches.load_state_dict(json.load(f))
        self._dcp_batches = batches
        return batches

    # - training -

    def train(self, *args: Any, **kwargs: Any):
        try:
            return super().train(*args, **kwargs)
        finally:
            if self._dcp_batches is not None:
                self._dcp_batches.close()

    def _inner_training_loop(self, *args: Any, **kwargs: Any):
        self._dcp_resume = kwargs.get("resume_from_checkpoint")
        return super()._inner_training_loop(*args, **kwargs)

    def _run_epoch(self, *args: Any, **kwargs: Any):
        # On resume the Trainer skips the epoch's trained batches with accelerate's
        # skip_first_batches, which rebuilds torch DataLoaders; dcp's loader already stands
        # after them (its checkpointed state), so for it the skip only checks the count.
        import transformers.trainer as trainer_module
        original = trainer_module.skip_first_batches

        def skip_first_batches(loader, num_batches=0):
            if isinstance(loader, DCPTrainerBatches):
                return loader.skipped(num_batches)
            return original(loader, num_batches)

        trainer_module.skip_first_batches = skip_first_batches
        try:
            return super()._run_epoch(*args, **kwargs)
        finally:
            trainer_module.skip_first_batches = original

    def get_batch_samples(self, epoch_iterator: Iterator, num_batches: int, device: Any):
        """The micro-batches of one optimizer step and their loss tokens over the whole pool
        (num_items_in_batch): every micro-batch's global loss tokens, or, where labels are
        masked (completion-only), the targets counted on every rank and summed."""
        batches = []
        for _ in range(num_batches):
            item = next(epoch_iterator, None)
            if item is None:
                break
            batches.append(item)
        if not batches:
            return batches, None
        if self._dcp_batches is not None and self._dcp_batches.target_masks:
            count = torch.tensor(sum(int((b["labels"] != IGNORE_INDEX).sum()) for b in batches),
                                 dtype=torch.float64)
            if _distributed():
                dist.all_reduce(count)
            total = int(count.item())
        else:
            total = sum(b["dcp_batch"].loss_tokens for b in batches)
        return batches, max(total, 1)

    def compute_loss(self, model, inputs, return_outputs: bool = False,
                     num_items_in_batch: Any = None):
        """The model's own loss over dcp's labels: its token losses over num_items_in_batch (the
        loss tokens of the optimizer step over the pool)."""
        inputs = dict(inputs)
        plan, lb = inputs.pop("dcp_plan"), inputs.pop("dcp_batch")
        labels = inputs.pop("labels")
        self._dcp_executor.prepare(plan)
        if lb.input_ids.numel():
            call = dict(input_ids=inputs["input_ids"], position_ids=inputs["position_ids"],
                        dcp_executor=self._dcp_executor, use_cache=False)
        else:  # a rank the plan gives no tokens runs model_inputs's stand-in token, no label
            device = inputs["input_ids"].device
            call = {k: v.to(device) if isinstance(v, torch.Tensor) else v
                    for k, v in dcphf.model_inputs(lb, self._dcp_executor, loss=False).items()}
            labels = torch.full((1, 1), IGNORE_INDEX, dtype=torch.long, device=device)
        if num_items_in_batch is None:
            num_items_in_batch = lb.loss_tokens
        outputs = model(**call, labels=labels, shift_labels=labels,
                        num_items_in_batch=num_items_in_batch)
        return (outputs.loss, outputs) if return_outputs else outputs.loss

    def training_step(self, model, inputs, num_items_in_batch=None):
        """The Trainer's step; then, on the last micro-batch of an optimizer step, the gradients
        of an unwrapped model summed over the pool. Returns the loss summed over the pool: each
        rank's is its share of the global mean, so the Trainer logs the global mean."""
        if self._dcp_gradient_sum is None:
            self._dcp_gradient_sum = self._dcp_sum_gradients(model)
        loss = super().training_step(model, inputs, num_items_in_batch)
        if self._dcp_gradient_sum == "all-reduce" \
                and self.accelerator.gradient_state.sync_gradients:
            self._dcp_all_reduce_gradients(model)
        if _distributed():
            loss = loss.clone()
            dist.all_reduce(loss)
        return loss

    def _dcp_sum_gradients(self, model) -> str:
        """How the gradients are summed over the pool: by the wrapper accelerate put around the
        model (DDP, FSDP2: dcp.torch.sum_gradients undoes their averaging), by an all-reduce of
        ours (no wrapper), or not at all (one process)."""
        from torch.distributed.fsdp import FSDPModule
        from torch.nn.parallel import DistributedDataParallel
        if not _distributed() or dist.get_world_size() == 1:
            return "none"
        wrapped = isinstance(model, DistributedDataParallel) or any(
            isinstance(m, FSDPModule) for m in model.modules())
        if wrapped:
            dcpt.sum_gradients(model, dist.get_world_size())
            return "wrapper"
        return "all-reduce"

    @staticmethod
    def _dcp_all_reduce_gradients(model) -> None:
        """Sums an unwrapped model's gradients over the pool in one all-reduce of them all,
        flattened; a parameter without a gradient sends zeros, so every rank's buffer has the same
        layout."""
        params = [p for p in model.parameters() if p.requires_grad]
        if not params:
            return
        grads = [p.grad if p.grad is not None else torch.zeros_like(p) for p in params]
        flat = torch.cat([g.reshape(-1) for g in grads])
        dist.all_reduce(flat)
        offset = 0
        for p, g in zip(params, grads):
            p.grad = flat[offset:offset + g.numel()].view_as(p).to(g.dtype)
            offset += g.numel()

    # - checkpoints -

    def _save_checkpoint(self, model, trial) -> None:
        super()._save_checkpoint(model, trial)
        if self._dcp_batches is None or not self.args.should_save:
            return
        from transformers.trainer_utils import PREFIX_CHECKPOINT_DIR
        folder = os.path.join(self._get_output_dir(trial=trial),
                              f"{PREFIX_CHECKPOINT_DIR}-{self.state.global_step}")
        os.makedirs(folder, exist_ok=True)
        with open(os.path.join(folder, LOADER_STATE), "w") as f:
            json.dump(self._dcp_batches.state_dict(), f)

    # - evaluation -

    def evaluate(self, eval_dataset: Any = None, ignore_keys: Any = None,
                 metric_key_prefix: str = "eval") -> dict[str, float]:
        """eval_loss on dcp: the eval dataset packed by tokens_per_batch in order (no shuffle),
        every batch planned and run on the pool like training, without gradients; the loss is
        the mean over every target token of the dataset. A dict of datasets reports each under
        eval_<name>_loss."""
        dataset = self.eval_dataset if eval_dataset is None else eval_dataset
        if isinstance(dataset, str):
            dataset = self.eval_dataset[dataset]
        if dataset is None:
            raise ValueError(f"{type(self).__name__}: evaluation requires an eval_dataset")
        if isinstance(dataset, dict):
            metrics = {}
            for key, part in dataset.items():
                metrics.update(self.evaluate(part, ignore_keys, f"{metric_key_prefix}_{key}"))
            return metrics
        _, has_targets = self._dcp_check_dataset(dataset, "eval_dataset")
        start = time.time()
        loader = self._dcp_loader(dataset, shuffle=False, epochs=1)
        batches = DCPTrainerBatches(loader, dataset, None, has_targets)
        model = self.model
        was_training = model.training
        model.eval()
        totals = torch.zeros(3, dtype=torch.float64)  # loss sum, targets, batches
        try:
            with torch.no_grad(), self.compute_loss_context_manager():
                for item in batches:
                    item = self._prepare_inputs(item)
                    batch_targets = int((item["labels"] != IGNORE_INDEX).sum())
                    loss = self.compute_loss(model, item, num_items_in_batch=1)
                    totals[0] += float(loss)
                    totals[1] += batch_targets
                    totals[2] += 1
        finally:
            batches.close()
            model.train(was_training)
        if _distributed():
            dist.all_reduce(totals)
            totals[2] /= dist.get_world_size()
        metrics = {f"{metric_key_prefix}_loss": float(totals[0] / max(totals[1], 1))}
        metrics.update(speed_metrics(metric_key_prefix, start, num_samples=len(dataset)
                                     if is_map_style(dataset) else None,
                                     num_steps=int(totals[2])))
        self.log(metrics)
        self.control = self.callback_handler.on_evaluate(self.args, self.state, self.control,
                                                         metrics)
        return metrics

    def predict(self, *args: Any, **kwargs: Any):
        raise ValueError(f"{type(self).__name__}.predict: each rank holds its tokens of the plan, "
                         "not whole sequences, so there are no per-sample predictions to "
                         "gather; evaluate() reports eval_loss")


class DCPTrainer(DCPTrainerMixin, transformers.Trainer):
    """transformers.Trainer on dcp. Takes the Trainer's arguments plus dcp's: tokens_per_batch
    (required: the tokens of one plan's batch), mask_fn (sample -> dcp mask, or {kind: mask} for
    a model of several attention kinds; default the model's own, plan_options(config)), group /
    mesh / mesh_dims / dp_group (the pool, as DCPDataloader's), executor (a DCPExecutor; default
    one on the loader's group) and DCPDataloader's planner options (block_size, strategy,
    cluster, nodes, eps_memory, ..., seed: default args.data_seed or args.seed)."""


_SFT_TRAINER = None


def _sft_trainer_class():
    """DCPSFTTrainer, made at the first use so that importing this module does not import TRL."""
    global _SFT_TRAINER
    if _SFT_TRAINER is None:
        try:
            from trl import SFTTrainer
        except ImportError as error:
            raise ImportError("DCPSFTTrainer needs TRL: pip install 'dcp[trl]' (or pip install "
                              f"trl) ({error})") from error

        class DCPSFTTrainer(DCPTrainerMixin, SFTTrainer):
            """TRL's SFTTrainer on dcp: TRL prepares the dataset (tokenizes, builds labels from
            completion_mask and assistant_masks, truncates to max_length), dcp packs, plans and
            trains it like DCPTrainer, the loss counting only the labels TRL kept. packing=True
            is refused (dcp packs itself); TRL's training metrics (entropy, token accuracy) are
            not logged."""

        DCPSFTTrainer.__module__ = __name__
        DCPSFTTrainer.__qualname__ = "DCPSFTTrainer"
        _SFT_TRAINER = DCPSFTTrainer
    return _SFT_TRAINER


def __getattr__(name: str) -> Any:
    if name == "DCPSFTTrainer":
        return _sft_trainer_class()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
