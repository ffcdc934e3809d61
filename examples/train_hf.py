# SPDX-License-Identifier: Apache-2.0
"""Trains a stock transformers causal LM with dcp context parallelism (attn_implementation="dcp")
on CPU ranks, or in one process on transformers' sdpa attention, on the same batches of the same
offline text as train_gpt.py, so the two loss curves can be compared.

    torchrun --nproc-per-node 4 examples/train_hf.py --model llama     # dcp over 4 gloo ranks
    python examples/train_hf.py --model llama --dense                  # one process, sdpa
    torchrun --nproc-per-node 4 examples/train_hf.py --model qwen3 --compile

--model is a family (llama, qwen3, mistral, granite: a tiny random-initialised config, nothing
downloaded) or a local checkpoint directory. The ranks share one global batch per step, as in
train_gpt.py: each rank's loss is its token losses' sum over the global batch's loss tokens, and
gradients are summed over the group before the optimizer step. Rank 0 prints each step with its
tokens/s, draws a progress bar and writes loss.csv and loss.svg to --out."""
from __future__ import annotations

import argparse
import math
import os
import sys

import torch
import torch.distributed as dist

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from gpt_model import loss_fn  # noqa: E402
from hf_models import FAMILIES, build_model  # noqa: E402
from text_corpus import ByteSequenceDataset, load_corpus  # noqa: E402
from train_gpt import Progress, block_size_arg, import_dcp_torch, make_optimizer, \
    packed_batches, training_loop, write_outputs  # noqa: E402


def parse_args(argv=None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    p.add_argument("--model", default="llama",
                   help=f"a family ({', '.join(FAMILIES)}) or a checkpoint directory")
    p.add_argument("--steps", type=int, default=40, help="optimizer steps (global batches)")
    p.add_argument("--tokens-per-batch", type=int, default=2048, help="tokens of a global batch")
    p.add_argument("--lr", type=float, default=3e-3, help="AdamW peak learning rate")
    p.add_argument("--warmup", type=int, default=5, help="linear warm-up steps, then cosine")
    p.add_argument("--weight-decay", type=float, default=0.1, help="on weight matrices only")
    p.add_argument("--clip", type=float, default=1.0, help="gradient norm clip (0: none)")
    p.add_argument("--seed", type=int, default=0, help="weights, samples, packing and plans")
    p.add_argument("--strategy", default="dcp", help="dcp, dcp-pure, ring, zigzag, ...")
    p.add_argument("--block-size", type=block_size_arg, default=256,
                   help="dcp token block size ('auto': chosen by dcp)")
    p.add_argument("--nodes", type=int, default=1, help="nodes the group's ranks are split into")
    p.add_argument("--cluster", default="cpu-local", help="dcp cost-model preset or file")
    p.add_argument("--corpus", default=None,
                   help="text file to train on (default: /usr/share/common-licenses)")
    p.add_argument("--min-len", type=int, default=16, help="shortest sample, bytes")
    p.add_argument("--mean-len", type=int, default=256, help="mean sample length, bytes")
    p.add_argument("--max-len", type=int, default=None,
                   help="longest sample, bytes (default: --tokens-per-batch)")
    p.add_argument("--device", choices=("cpu", "cuda"), default="cpu",
                   help="cpu: gloo, fp32; cuda: NCCL, bf16, one GPU per rank")
    p.add_argument("--compile", action="store_true",
                   help="torch.compile(model, fullgraph=True, dynamic=True)")
    p.add_argument("--dense", action="store_true",
                   help="one process, transformers' sdpa attention over the same batches")
    p.add_argument("--out", default="train_hf_out", help="directory for loss.csv and loss.svg")
    p.add_argument("--compare", action="append", default=[], metavar="[LABEL=]CSV",
                   help="another run's loss.csv to draw in loss.svg too (repeatable)")
    p.add_argument("--threads", type=int, default=1, help="torch threads per rank")
    args = p.parse_args(argv)
    if args.max_len is None:
        args.max_len = args.tokens_per_batch
    if args.max_len > args.tokens_per_batch:
        p.error(f"--max-len {args.max_len} exceeds --tokens-per-batch {args.tokens_per_batch}")
    if args.steps < 1:
        p.error(f"--steps {args.steps} is not positive")
    if args.model not in FAMILIES and not os.path.isdir(args.model):
        p.error(f"--model {args.model!r} is neither a family ({', '.join(FAMILIES)}) nor a "
                "checkpoint directory")
    if args.device == "cuda" and not torch.cuda.is_available():
        p.error("--device cuda: no CUDA device is visible")
    return args


def main(argv=None) -> int:
    args = parse_args(argv)
    torch.set_num_threads(args.threads)
    launched = "RANK" in os.environ and "WORLD_SIZE" in os.environ
    if args.dense and launched and int(os.environ["WORLD_SIZE"]) > 1:
        sys.exit("train_hf.py: --dense is the single-process baseline; run it with python, "
                 "not torchrun")
    distributed = launched and not args.dense
    if args.device == "cuda":
        torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", 0)))
    if distributed:
        dist.init_process_group("nccl" if args.device == "cuda" else "gloo")
    try:
        return train(args, distributed)
    finally:
        if distributed and dist.is_initialized():
            dist.destroy_process_group()


def train(args: argparse.Namespace, distributed: bool) -> int:
    rank = dist.get_rank() if distributed else 0
    world = dist.get_world_size() if distributed else 1
    lead = rank == 0
    progress = Progress(args.steps)

    def say(*parts) -> None:
        if lead:
            progress.clear()
            print(*parts, flush=True)

    dcpt = import_dcp_torch(args.dense)
    import dcp.torch.hf as dcphf
    dcphf.register()
    device = torch.device("cuda", torch.cuda.current_device()) if args.device == "cuda" else \
        torch.device("cpu")
    dtype = torch.bfloat16 if args.device == "cuda" else torch.float32
    corpus = load_corpus(args.corpus)
    dataset = ByteSequenceDataset(corpus, max_len=args.max_len, min_len=args.min_len,
                                  seed=args.seed, mean_len=args.mean_len)
    model = build_model(args.model, "sdpa" if args.dense else "dcp", seed=args.seed,
                        dtype=dtype).to(device)
    if model.config.vocab_size < 256:
        sys.exit(f"train_hf.py: the model's vocabulary ({model.config.vocab_size}) is smaller "
                 "than the byte-level corpus's 256 tokens")
    model.train()
    if distributed:  # construction is seeded already; the broadcast only guards against drift
        for tensor in model.state_dict().values():
            dist.broadcast(tensor, src=0)
    optimizer = make_optimizer(model, args)
    forward = torch.compile(model, fullgraph=True, dynamic=True) if args.compile else model

    lengths = dataset.lengths()
    per_epoch = len(dcpt.pack_batches(lengths, args.tokens_per_batch, seed=args.seed,
                                      shuffle=True))
    parameters = sum(p.numel() for p in model.parameters())
    mode = "sdpa, 1 process" if args.dense else f"dcp ({args.strategy}), {world} ranks"
    say(f"train_hf: {mode}{', compiled' if args.compile else ''}; {args.model} "
        f"({type(model).__name__}, {parameters:,} parameters, {model.config.num_hidden_layers} "
        f"layers); corpus {len(corpus):,} bytes in {len(dataset):,} samples; {per_epoch} batches "
        f"of <= {args.tokens_per_batch} tokens per epoch")

    iterator = None
    if args.dense:
        batches = (dict(b, model_kwargs={}) for b in packed_batches(dcpt, dataset, args))
    else:
        options = dcphf.plan_options(model.config)
        say(f"attention: {options['mask_fn'].spec}, heads {options['heads']}/"
            f"{options['kv_heads']}, head dim {options['head_dim']}")
        loader = dcpt.DCPDataloader(
            dataset, tokens_per_batch=args.tokens_per_batch, dtype=dtype,
            block_size=args.block_size, strategy=args.strategy, nodes=args.nodes,
            cluster=args.cluster, seed=args.seed, shuffle=True, prefetch=2,
            epochs=math.ceil(args.steps / per_epoch) + 1, **options)
        executor = dcpt.DCPExecutor()
        iterator = iter(loader)

        def planned():
            for lb, plan in iterator:
                executor.prepare(plan)
                yield dict(input_ids=lb.input_ids, position_ids=lb.position_ids,
                           labels=lb.labels, loss_tokens=lb.loss_tokens, seqlens=lb.seqlens,
                           indices=lb.batch_indices, model_kwargs={"dcp_executor": executor})
        batches = planned()

    def step_loss(batch):
        logits = forward(input_ids=batch["input_ids"][None].to(device),
                         position_ids=batch["position_ids"][None].to(device), use_cache=False,
                         **batch["model_kwargs"]).logits[0]
        return loss_fn(logits, batch["labels"].to(device), batch["loss_tokens"])

    try:
        rows, losses, elapsed = training_loop(args, model, optimizer, batches, distributed, say,
                                              progress, step_loss)
    finally:
        if iterator is not None:
            iterator.close()
    if lead and rows:
        write_outputs(args, rows, {mode + (", compiled" if args.compile else ""): losses},
                      elapsed, title=f"{args.model} ({parameters:,} parameters), "
                      f"{args.tokens_per_batch} tokens per batch")
    return 0


if __name__ == "__main__":
    sys.exit(main())
