# SPDX-License-Identifier: Apache-2.0
"""Fine-tunes a tiny Llama-style model with dcp.torch.hf.DCPTrainer (transformers' Trainer on
dcp: dcp's loader, executor and loss) on the offline byte-level corpus of train_gpt.py, or, with
--dense, with the plain transformers.Trainer on one process and sdpa over the same packed
batches, so the two loss curves can be compared.

    torchrun --nproc-per-node 2 examples/finetune_trainer.py             # DCPTrainer, 2 ranks
    python3 examples/finetune_trainer.py --dense                         # plain Trainer, sdpa
    torchrun --nproc-per-node 2 examples/finetune_trainer.py --completion-only

--completion-only trains on dict samples whose first third is a prompt (completion_mask 0): only
the rest counts in the loss. Rank 0 writes loss.csv (step, loss, grad norm, learning rate) and
loss.svg to --out; --compare draws another run's loss.csv beside it. The Trainer's own features
are on: gradient accumulation, clipping, a cosine schedule with warm-up, logging, checkpoints
every --save-steps (with the loader's position) and --resume from one."""
from __future__ import annotations

import argparse
import csv
import os
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from hf_models import FAMILIES, build_model  # noqa: E402
from svg_plot import write_loss_svg  # noqa: E402
from text_corpus import ByteSequenceDataset, load_corpus  # noqa: E402


def parse_args(argv=None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    p.add_argument("--model", default="llama",
                   help=f"a family ({', '.join(FAMILIES)}) or a checkpoint directory")
    p.add_argument("--steps", type=int, default=30, help="optimizer steps")
    p.add_argument("--accumulation", type=int, default=2, help="gradient accumulation steps")
    p.add_argument("--tokens-per-batch", type=int, default=1024,
                   help="tokens of one packed batch (a micro-batch of the pool)")
    p.add_argument("--max-len", type=int, default=512, help="longest sample, bytes")
    p.add_argument("--mean-len", type=int, default=160, help="mean sample length, bytes")
    p.add_argument("--lr", type=float, default=3e-3, help="peak learning rate (cosine)")
    p.add_argument("--block-size", type=int, default=64, help="dcp token block size")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--completion-only", action="store_true",
                   help="the first third of every sample is a prompt, outside the loss")
    p.add_argument("--dense", action="store_true",
                   help="one process, the plain Trainer with sdpa over the same packed batches")
    p.add_argument("--bf16", action="store_true",
                   help="bf16 mixed precision (autocast) on the CPU too; always on a GPU")
    p.add_argument("--save-steps", type=int, default=0, help="checkpoint every N steps (0: none)")
    p.add_argument("--resume", default=None, metavar="DIR", help="a checkpoint to resume from")
    p.add_argument("--out", default="finetune_trainer_out", help="loss.csv, loss.svg, checkpoints")
    p.add_argument("--compare", action="append", default=[], metavar="[LABEL=]CSV",
                   help="another run's loss.csv to draw in loss.svg too")
    args = p.parse_args(argv)
    if args.max_len > args.tokens_per_batch:
        p.error(f"--max-len {args.max_len} exceeds --tokens-per-batch {args.tokens_per_batch}")
    if args.dense and int(os.environ.get("WORLD_SIZE", "1")) > 1:
        p.error("--dense is the one-process baseline; run it with python3, not torchrun")
    return args


class Samples(torch.utils.data.Dataset):
    """The corpus's byte samples: token lists, or dicts with a completion_mask."""

    def __init__(self, args: argparse.Namespace):
        data = ByteSequenceDataset(load_corpus(), max_len=args.max_len, min_len=16,
                                   seed=args.seed, mean_len=args.mean_len)
        self.samples = [data[i].tolist() for i in range(len(data))]
        self.completion_only = args.completion_only

    def __len__(self) -> int:
        return len(self.samples)

    def __getitem__(self, index: int):
        tokens = self.samples[index]
        if not self.completion_only:
            return tokens
        prompt = len(tokens) // 3
        return {"input_ids": tokens, "completion_mask": [0] * prompt + [1] * (len(tokens) - prompt)}


def training_arguments(args: argparse.Namespace):
    import transformers
    return transformers.TrainingArguments(
        output_dir=args.out, max_steps=args.steps, gradient_accumulation_steps=args.accumulation,
        learning_rate=args.lr, lr_scheduler_type="cosine", warmup_steps=max(args.steps // 10, 1),
        weight_decay=0.1, max_grad_norm=1.0, logging_steps=1, report_to=[],
        per_device_train_batch_size=1, seed=args.seed, data_seed=args.seed,
        save_strategy="steps" if args.save_steps else "no", save_steps=args.save_steps or 500,
        use_cpu=not torch.cuda.is_available(), bf16=args.bf16 or torch.cuda.is_available())


def dense_trainer(args: argparse.Namespace, dataset: Samples):
    """The plain Trainer over DCPTrainer's micro-batches, each one packed sequence with position
    ids that restart at every document (transformers' sdpa then keeps documents apart)."""
    import transformers

    import dcp.torch as dcpt
    lengths = [len(s) for s in dataset.samples]
    batches, epoch = [], 0
    while len(batches) < args.steps * args.accumulation:  # DCPTrainer's stream of batches
        batches += dcpt.pack_batches(lengths, args.tokens_per_batch, seed=args.seed + epoch)
        epoch += 1

    def packed(indices):
        ids, positions, labels = [], [], []
        for i in indices:
            sample = dataset[i]
            tokens = sample["input_ids"] if isinstance(sample, dict) else sample
            keep = sample["completion_mask"] if isinstance(sample, dict) else [1] * len(tokens)
            ids += tokens
            positions += range(len(tokens))
            # The model shifts: a document's first token is no target (of the previous one).
            labels += [t if k and j else -100 for j, (t, k) in enumerate(zip(tokens, keep))]
        return {"input_ids": torch.tensor(ids), "position_ids": torch.tensor(positions),
                "labels": torch.tensor(labels)}

    class InOrder(transformers.Trainer):
        def _get_train_sampler(self, train_dataset=None):
            return torch.utils.data.SequentialSampler(self.train_dataset)

    model = build_model(args.model, "sdpa", seed=args.seed)
    return InOrder(model=model, args=training_arguments(args),
                   train_dataset=[packed(b) for b in batches],
                   data_collator=lambda items: {k: v[None] for k, v in items[0].items()})


def main(argv=None) -> int:
    args = parse_args(argv)
    torch.set_num_threads(int(os.environ.get("OMP_NUM_THREADS", "1")))
    dataset = Samples(args)
    if args.dense:
        trainer = dense_trainer(args, dataset)
        label = "Trainer, sdpa, 1 process"
    else:
        import dcp.torch.hf as dcphf
        dcphf.register()
        model = build_model(args.model, "dcp", seed=args.seed)
        trainer = dcphf.DCPTrainer(model=model, args=training_arguments(args),
                                   train_dataset=dataset, tokens_per_batch=args.tokens_per_batch,
                                   block_size=args.block_size, cluster="cpu-local")
        world = int(os.environ.get("WORLD_SIZE", "1"))
        label = f"DCPTrainer, {world} rank{'s' if world > 1 else ''}"
    if args.completion_only:
        label += ", completion only"
    trainer.train(resume_from_checkpoint=args.resume)
    if not trainer.is_world_process_zero():
        return 0
    rows = [dict(step=h["step"], loss=f"{h['loss']:.6f}", grad_norm=f"{h['grad_norm']:.6f}",
                 learning_rate=f"{h['learning_rate']:.6g}")
            for h in trainer.state.log_history if "loss" in h and "grad_norm" in h]
    os.makedirs(args.out, exist_ok=True)
    csv_path, svg_path = os.path.join(args.out, "loss.csv"), os.path.join(args.out, "loss.svg")
    with open(csv_path, "w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)
    series = {label: [float(r["loss"]) for r in rows]}
    for other in args.compare:
        name, _, path = other.rpartition("=")
        with open(path, newline="") as f:
            series[name or os.path.basename(os.path.dirname(os.path.abspath(path)))] = [
                float(r["loss"]) for r in csv.DictReader(f)]
    parameters = sum(p.numel() for p in trainer.model.parameters())
    write_loss_svg(svg_path, series, title=f"{args.model} ({parameters:,} parameters), "
                   f"{args.tokens_per_batch} tokens per batch x {args.accumulation}")
    print(f"done: {len(rows)} steps, final loss {float(rows[-1]['loss']):.4f}; wrote {csv_path} "
          f"and {svg_path}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
