# SPDX-License-Identifier: Apache-2.0
"""DCPTrainer and DCPSFTTrainer runs on gloo ranks, and the plain transformers.Trainer on one
process with sdpa over the same packed batches, for test_hf_trainer.py (importable by the ranks'
processes)."""
from __future__ import annotations

import os
import warnings

import torch

# fp32 everywhere (no autocast), gradient accumulation 2, clipping, a linear schedule.
TRAIN = dict(steps=10, accumulation=2, tokens_per_batch=256, block_size=32, samples=30,
             max_len=128, lr=3e-3, seed=0)


class Samples(torch.utils.data.Dataset):
    """The first TRAIN["samples"] byte samples of the offline corpus, as lists of token ids."""

    def __init__(self):
        import text_corpus
        data = text_corpus.ByteSequenceDataset(text_corpus.load_corpus(),
                                               max_len=TRAIN["max_len"], min_len=8, seed=0,
                                               mean_len=64)
        self.samples = [data[i].tolist() for i in range(TRAIN["samples"])]

    def __len__(self) -> int:
        return len(self.samples)

    def __getitem__(self, index: int) -> list[int]:
        return self.samples[index]


def completion_mask(tokens: list[int]) -> list[int]:
    """The SFT samples' completion: all but the first third (the prompt)."""
    prompt = len(tokens) // 3
    return [0] * prompt + [1] * (len(tokens) - prompt)


def sft_dataset():
    import datasets
    ids = Samples().samples
    return datasets.Dataset.from_dict({"input_ids": ids,
                                       "completion_mask": [completion_mask(t) for t in ids]})


def byte_tokenizer():
    """A byte-level tokenizer built here (nothing downloaded), for TRL's SFTTrainer."""
    import transformers
    from tokenizers import Tokenizer, models
    vocab = {f"<{i}>": i for i in range(256)}
    return transformers.PreTrainedTokenizerFast(
        tokenizer_object=Tokenizer(models.WordLevel(vocab, unk_token="<0>")), eos_token="<1>",
        pad_token="<0>")


def arguments(output_dir: str, sft: bool = False, **extra):
    import transformers
    options = dict(output_dir=output_dir, max_steps=TRAIN["steps"],
                   gradient_accumulation_steps=TRAIN["accumulation"], learning_rate=TRAIN["lr"],
                   lr_scheduler_type="linear", warmup_steps=2, max_grad_norm=1.0,
                   logging_steps=1, report_to=[], use_cpu=True, per_device_train_batch_size=1,
                   save_strategy="no", disable_tqdm=True, seed=TRAIN["seed"], bf16=False)
    options.update(extra)
    if sft:
        import trl
        return trl.SFTConfig(completion_only_loss=True, **options)
    return transformers.TrainingArguments(**options)


def _losses(trainer) -> list[float]:
    return [h["loss"] for h in trainer.state.log_history if "loss" in h]


def _recording(base):
    """`base` that records the samples of every micro-batch it trains on (in order)."""
    class Recording(base):
        def compute_loss(self, model, inputs, *args, **kwargs):
            if model.training:
                self.batches.append(list(inputs["dcp_batch"].batch_indices))
            return super().compute_loss(model, inputs, *args, **kwargs)
    Recording.batches = None
    return Recording


def trainer_world(rank: int, size: int, output_dir: str) -> dict:
    """On every rank: DCPTrainer on a tiny Llama (checkpoints at steps 5 and 10), the same
    resumed from step 5's checkpoint, a tiny Gemma 3 with gradient checkpointing and an eval
    set, and DCPSFTTrainer on the Llama with completion-only loss. Returns each run's logged
    losses and micro-batches (their samples), the grad norms and the eval loss."""
    import dcp.torch as dcpt
    import dcp.torch.hf as dcphf
    import hf_models
    # What torchrun sets: accelerate then sees a process group of `size` CPU ranks.
    os.environ.update(RANK=str(rank), WORLD_SIZE=str(size), LOCAL_RANK=str(rank),
                      LOCAL_WORLD_SIZE=str(size), MASTER_ADDR="127.0.0.1",
                      MASTER_PORT="29500")
    warnings.simplefilter("ignore")
    dcphf.register()
    options = dict(tokens_per_batch=TRAIN["tokens_per_batch"], block_size=TRAIN["block_size"],
                   cluster="cpu-local", executor=dcpt.DCPExecutor(threads=1))
    out = {}

    def run(name, family, base, resume=None, **extra):
        sft = base is not dcphf.DCPTrainer
        cls = _recording(base)
        model = hf_models.build_model(family, "dcp", seed=TRAIN["seed"])
        data = sft_dataset() if sft else Samples()
        more = dict(processing_class=byte_tokenizer()) if sft else {}
        eval_data = extra.pop("eval_dataset", None)
        trainer = cls(model=model, args=arguments(os.path.join(output_dir, name), sft, **extra),
                      train_dataset=data, eval_dataset=eval_data, **more, **options)
        trainer.batches = []
        trainer.train(resume_from_checkpoint=resume)
        result = {"losses": _losses(trainer), "batches": trainer.batches,
                  "grad_norms": [h["grad_norm"] for h in trainer.state.log_history
                                 if "grad_norm" in h],
                  "ddp": type(trainer.model_wrapped).__name__}
        if eval_data is not None:
            result["eval_loss"] = trainer.evaluate()["eval_loss"]
        out[name] = result
        return trainer

    run("llama", "llama", dcphf.DCPTrainer, save_strategy="steps", save_steps=5)
    run("llama_resumed", "llama", dcphf.DCPTrainer,
        resume=os.path.join(output_dir, "llama", "checkpoint-5"))
    run("gemma3", "gemma3", dcphf.DCPTrainer, gradient_checkpointing=True,
        eval_dataset=torch.utils.data.Subset(Samples(), range(12)))
    run("sft", "llama", dcphf.DCPSFTTrainer)
    return out


def dense_trainer(family: str, batches: list[list[int]], sft: bool = False,
                  output_dir: str = "dense", eval_samples: list[int] | None = None) -> dict:
    """The plain transformers.Trainer on one process, attn_implementation="sdpa", over the given
    micro-batches of the same samples, each one packed sequence of documents with position ids
    that restart at every document (transformers then masks each document apart). Labels are
    the input ids, -100 on each document's first token (the target of the previous document's
    last) and, with `sft`, on the prompt's tokens. Returns the logged losses and grad norms, and
    the mean token loss over `eval_samples` each run alone."""
    import transformers

    import hf_models
    samples = Samples().samples

    def packed(indices):
        ids, positions, labels = [], [], []
        for i in indices:
            tokens = samples[i]
            keep = completion_mask(tokens) if sft else [1] * len(tokens)
            ids += tokens
            positions += list(range(len(tokens)))
            labels += [t if k and j > 0 else -100 for j, (t, k) in enumerate(zip(tokens, keep))]
        return dict(input_ids=torch.tensor(ids), position_ids=torch.tensor(positions),
                    labels=torch.tensor(labels))

    class InOrder(transformers.Trainer):
        def _get_train_sampler(self, train_dataset=None):
            return torch.utils.data.SequentialSampler(self.train_dataset)

    def collate(items):
        return {k: v[None] for k, v in items[0].items()}

    model = hf_models.build_model(family, "sdpa", seed=TRAIN["seed"])
    trainer = InOrder(model=model, args=arguments(output_dir), train_dataset=[
        packed(b) for b in batches], data_collator=collate)
    trainer.train()
    result = {"losses": _losses(trainer),
              "grad_norms": [h["grad_norm"] for h in trainer.state.log_history
                             if "grad_norm" in h]}
    if eval_samples is not None:
        model.eval()
        total, count = 0.0, 0
        with torch.no_grad():
            for i in eval_samples:
                batch = collate([packed([i])])
                logits = model(input_ids=batch["input_ids"], position_ids=batch["position_ids"],
                               use_cache=False).logits[0, :-1]
                target = batch["labels"][0, 1:]
                total += float(torch.nn.functional.cross_entropy(logits, target,
                                                                 ignore_index=-100,
                                                                 reduction="sum"))
                count += int((target != -100).sum())
        result["eval_loss"] = total / count
    return result
