# SPDX-License-Identifier: Apache-2.0
"""Trains a stock transformers causal LM with dcp context parallelism (attn_implementation="dcp")
on CPU ranks, or in one process on transformers' sdpa attention, on the same batches of the same
offline text as train_gpt.py, so the two loss curves can be compared. With --fsdp the model is
sharded by FSDP2 over every rank; with --dp N the ranks form an N x (ranks / N) (dp, cp) mesh:
each of the N replicas plans its own share of every global batch of N packed batches.

    torchrun --nproc-per-node 4 examples/train_hf.py --model llama     # dcp over 4 gloo ranks
    python examples/train_hf.py --model llama --dense                  # one process, sdpa
    torchrun --nproc-per-node 4 examples/train_hf.py --model qwen3 --compile
    torchrun --nproc-per-node 4 examples/train_hf.py --fsdp --dp 2   # FSDP2, a 2 x 2 mesh
    torchrun --nproc-per-node 4 examples/train_hf.py --steps 20 --save ckpt
    torchrun --nproc-per-node 4 examples/train_hf.py --steps 40 --resume ckpt   # steps 21..40

--model is a family (llama, qwen3, mistral, granite: a tiny random-initialised config, nothing
downloaded) or a local checkpoint directory. The ranks share one global batch per step, as in
train_gpt.py: each rank's loss is its token losses' sum over the global batch's loss tokens, and
gradients are summed over the group before the optimizer step. Rank 0 prints each step with its
tokens/s, draws a progress bar and writes loss.csv and loss.svg to --out. --save DIR writes a
checkpoint (model, optimizer, loader position, step) after the last step with
torch.distributed.checkpoint; --resume DIR continues from one with the batches and plans that
come next."""
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
from train_gpt import (  # noqa: E402
    check_training_args,
    import_dcp_torch,
    launch,
    make_optimizer,
    packed_batches,
    run_context,
    training_loop,
    training_parser,
    write_outputs,
)


def parse_args(argv=None) -> argparse.Namespace:
    p = training_parser(__doc__, steps=40, out="train_hf_out", dense_help="one process, "
                        "transformers' sdpa attention over the same batches")
    p.add_argument("--model", default="llama",
                   help=f"a family ({', '.join(FAMILIES)}) or a checkpoint directory")
    p.add_argument("--device", choices=("cpu", "cuda"), default="cpu",
                   help="cpu: gloo, fp32; cuda: NCCL, bf16, one GPU per rank")
    p.add_argument("--compile", action="store_true",
                   help="torch.compile(model, fullgraph=True, dynamic=True)")
    p.add_argument("--fsdp", action="store_true",
                   help="FSDP2 (fully_shard) over every rank: each decoder layer, then the model")
    p.add_argument("--dp", type=int, default=1,
                   help="data-parallel replicas: a (dp, ranks / dp) mesh, each replica planning "
                   "its share of every global batch of dp packed batches")
    p.add_argument("--save", default=None, metavar="DIR",
                   help="write a checkpoint (model, optimizer, loader, step) after the last step")
    p.add_argument("--resume", default=None, metavar="DIR",
                   help="continue from a checkpoint --save wrote, up to --steps")
    args = p.parse_args(argv)
    check_training_args(p, args)
    if args.dp < 1:
        p.error(f"--dp {args.dp} is not positive")
    if args.resume is not None and not os.path.isdir(args.resume):
        p.error(f"--resume {args.resume!r} is not a directory")
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


def global_batches(dcpt, dataset, args: argparse.Namespace):
    """The dense baseline's batches: the dataloader's global batches, --dp packed batches each
    (the samples every replica trains on together, indices sorted)."""
    batches = packed_batches(dcpt, dataset, args)
    if args.dp == 1:
        yield from batches
    while True:
        group = [next(batches) for _ in range(args.dp)]
        seqlens = [n for b in group for n in b["seqlens"]]
        yield dict(input_ids=torch.cat([b["input_ids"] for b in group]),
                   position_ids=torch.cat([b["position_ids"] for b in group]),
                   labels=torch.cat([b["labels"] for b in group]),
                   loss_tokens=sum(b["loss_tokens"] for b in group), seqlens=seqlens,
                   indices=sorted(i for b in group for i in b["indices"]))


def checkpoint(directory: str, model, optimizer, loader, step: int, load: bool) -> int:
    """Saves (load False) or loads the model, the optimizer, the loader's position and the step
    with torch.distributed.checkpoint; returns the step."""
    import torch.distributed.checkpoint as dcp_checkpoint
    from torch.distributed.checkpoint.state_dict import get_state_dict, set_state_dict
    model_state, optim_state = get_state_dict(model, optimizer)
    state = {"model": model_state, "optim": optim_state, "progress": {"step": step}}
    if loader is not None:
        state["loader"] = loader
    if not load:
        dcp_checkpoint.save(state, checkpoint_id=directory)
        return step
    dcp_checkpoint.load(state, checkpoint_id=directory)
    set_state_dict(model, optimizer, model_state_dict=state["model"],
                   optim_state_dict=state["optim"])
    return int(state["progress"]["step"])


def train(args: argparse.Namespace, distributed: bool) -> int:
    world, lead, progress, say = run_context(args, distributed)
    if not args.dense and world % args.dp:
        sys.exit(f"train_hf.py: --dp {args.dp} does not divide the {world} ranks")

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
    config = model.config
    if distributed:  # construction is seeded already; the broadcast only guards against drift
        for tensor in model.state_dict().values():
            dist.broadcast(tensor, src=0)
    if args.fsdp and distributed:
        from torch.distributed.device_mesh import init_device_mesh
        from torch.distributed.fsdp import fully_shard
        pool = init_device_mesh(device.type, (world,))
        for layer in model.model.layers:
            fully_shard(layer, mesh=pool)
        fully_shard(model, mesh=pool)
    optimizer = make_optimizer(model, args)
    forward = torch.compile(model, fullgraph=True, dynamic=True) if args.compile else model

    lengths = dataset.lengths()
    per_epoch = len(dcpt.pack_batches(lengths, args.tokens_per_batch, seed=args.seed,
                                      shuffle=True)) // args.dp
    parameters = sum(p.numel() for p in model.parameters())
    mode = "sdpa, 1 process" if args.dense else f"dcp ({args.strategy}), {world} ranks" + (
        f" as {args.dp} x {world // args.dp} (dp, cp)" if args.dp > 1 else "") + (
        ", FSDP2" if args.fsdp else "")
    say(f"train_hf: {mode}{', compiled' if args.compile else ''}; {args.model} "
        f"({type(model).__name__}, {parameters:,} parameters, {config.num_hidden_layers} "
        f"layers); corpus {len(corpus):,} bytes in {len(dataset):,} samples; {per_epoch} global "
        f"batches of {args.dp} x <= {args.tokens_per_batch} tokens per epoch")

    iterator, loader = None, None
    reduce = None
    if args.dense:
        batches = (dict(b, model_kwargs={}) for b in global_batches(dcpt, dataset, args))
    else:
        options = dcphf.plan_options(config)
        mask_fn = options["mask_fn"]
        attention = mask_fn.spec if isinstance(mask_fn, dcphf.ModelMask) else "; ".join(
            f"{kind} ({options['layers'][kind]} layers) {spec}"
            for kind, spec in mask_fn.kinds.items())
        say(f"attention: {attention}, heads {options['heads']}/{options['kv_heads']}, head dim "
            f"{options['head_dim']}")
        mesh = None
        if args.dp > 1:
            from torch.distributed.device_mesh import init_device_mesh
            mesh = init_device_mesh(device.type, (args.dp, world // args.dp),
                                    mesh_dim_names=("dp", "cp"))
        loader = dcpt.DCPDataloader(
            dataset, mesh=mesh, tokens_per_batch=args.tokens_per_batch, dtype=dtype,
            block_size=args.block_size, strategy=args.strategy, nodes=args.nodes,
            cluster=args.cluster, seed=args.seed, shuffle=True, prefetch=2,
            epochs=math.ceil(args.steps / max(per_epoch, 1)) + 1, **options)
        if args.fsdp and distributed:
            dcpt.sum_gradients(model, loader)

            def reduce(model, loss):  # the gradients are summed by FSDP2 already
                total = loss.detach().clone()
                dist.all_reduce(total)
                return total.item()
        executor = dcpt.DCPExecutor(group=loader.group)

        def planned():
            for lb, plan in iterator:
                executor.prepare(plan)
                seqlens, indices = lb.seqlens, lb.batch_indices
                if args.dp > 1:  # the global batch's, every replica's, for the log
                    shares = [None] * world
                    dist.all_gather_object(shares, (lb.replica, lb.seqlens, lb.batch_indices))
                    by_replica = {r: (n, ix) for r, n, ix in shares}
                    seqlens = [n for r in sorted(by_replica) for n in by_replica[r][0]]
                    indices = sorted(i for r in by_replica for i in by_replica[r][1])
                yield dict(labels=lb.labels, loss_tokens=lb.loss_tokens, seqlens=seqlens,
                           indices=indices, local=lb, model_kwargs={"dcp_executor": executor})

    start_step = 0
    if args.resume is not None:
        start_step = checkpoint(args.resume, model, optimizer, loader, 0, load=True)
        say(f"resumed from {args.resume} after step {start_step}")
        if args.dense:
            for _ in range(start_step):
                next(batches)
    if not args.dense:
        iterator = iter(loader)
        batches = planned()

    def step_loss(batch):
        if "local" in batch:  # a rank's share: a rank without tokens runs a stand-in token
            inputs = dcphf.model_inputs(batch["local"], batch["model_kwargs"]["dcp_executor"],
                                        loss=False)
            inputs = {k: v.to(device) if isinstance(v, torch.Tensor) else v
                      for k, v in inputs.items()}
            logits = forward(**inputs).logits[0][:batch["labels"].numel()]
        else:
            logits = forward(input_ids=batch["input_ids"][None].to(device),
                             position_ids=batch["position_ids"][None].to(device),
                             use_cache=False).logits[0]
        return loss_fn(logits, batch["labels"].to(device), batch["loss_tokens"])

    try:
        rows, losses, elapsed = training_loop(args, model, optimizer, batches, distributed, say,
                                              progress, step_loss, start_step, reduce)
    finally:
        if iterator is not None:
            iterator.close()
    if loader is not None:
        say(f"loader: {loader.plan_seconds:.2f} s of planning in background threads; the loop "
            f"waited {loader.wait_seconds * 1000:.1f} ms for plans")
    if args.save is not None:
        checkpoint(args.save, model, optimizer, loader, start_step + len(rows), load=False)
        say(f"saved model, optimizer and loader after step {start_step + len(rows)} to "
            f"{args.save}")
    if lead and rows:
        write_outputs(args, rows, {mode + (", compiled" if args.compile else ""): losses},
                      elapsed, title=f"{args.model} ({parameters:,} parameters), "
                      f"{args.tokens_per_batch} tokens per batch")
    return 0


if __name__ == "__main__":
    sys.exit(main())
