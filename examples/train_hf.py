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
from train_gpt import check_training_args, import_dcp_torch, launch, make_optimizer, \
    packed_batches, run_context, training_loop, training_parser, write_outputs  # noqa: E402


def parse_args(argv=None) -> argparse.Namespace:
    p = training_parser(__doc__, steps=40, out="train_hf_out", dense_help="one process, "
                        "transformers' sdpa attention over the same batches")
    p.add_argument("--model", default="llama",
                   help=f"a family ({', '.join(FAMILIES)}) or a checkpoint directory")
    p.add_argument("--device", choices=("cpu", "cuda"), default="cpu",
                   help="cpu: gloo, fp32; cuda: NCCL, bf16, one GPU per rank")
    p.add_argument("--compile", action="store_true",
                   help="torch.compile(model, fullgraph=True, dynamic=True)")
    args = p.parse_args(argv)
    check_training_args(p, args)
    if args.model not in FAMILIES and not os.path.isdir(args.model):
        p.error(f"--model {args.model!r} is neither a family ({', '.join(FAMILIES)}) nor a "
                "checkpoint directory")
    if args.device == "cuda" and not torch.cuda.is_available():
        p.error("--device cuda: no CUDA device is visible")
    return args


def main(argv=None) -> int:
    args = parse_args(argv)
    if args.device == "cuda":
        torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", 0)))
    return launch("train_hf.py", args, train, "nccl" if args.device == "cuda" else "gloo")


def train(args: argparse.Namespace, distributed: bool) -> int:
    world, lead, progress, say = run_context(args, distributed)

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
        mask_fn = options["mask_fn"]
        attention = mask_fn.spec if isinstance(mask_fn, dcphf.ModelMask) else "; ".join(
            f"{kind} ({options['layers'][kind]} layers) {spec}"
            for kind, spec in mask_fn.kinds.items())
        say(f"attention: {attention}, heads {options['heads']}/{options['kv_heads']}, head dim "
            f"{options['head_dim']}")
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
