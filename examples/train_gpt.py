# SPDX-License-Identifier: Apache-2.0
"""Trains a small byte-level GPT with dcp context parallelism on CPU ranks, or densely in one
process, on the same batches, so the two loss curves can be compared.

    torchrun --nproc-per-node 4 examples/train_gpt.py            # dcp over 4 gloo ranks
    python examples/train_gpt.py --dense                          # one process, dense attention

As in the DCP paper, the ranks of the dcp group share one global batch per step: the dataloader
gives every rank its local tokens, each rank's loss is its sum of token losses divided by the
global batch's loss tokens, and the gradients are summed over the group (all-reduce) before the
optimizer step, which makes the update that of the single-process run up to rounding. Rank 0
prints each step, draws a progress bar on stderr and writes loss.csv and loss.svg to --out."""
from __future__ import annotations

import argparse
import csv
import math
import os
import sys
import time
import zlib

import torch
import torch.distributed as dist

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from gpt_model import (  # noqa: E402
    GPT,
    GPTConfig,
    dense_attention,
    init_seed,
    loss_fn,
    make_labels,
    make_positions,
    spec_mask,
)
from svg_plot import write_loss_svg  # noqa: E402
from text_corpus import ByteSequenceDataset, load_corpus  # noqa: E402


def block_size_arg(text: str):
    if text.lower() in ("auto", "none", "0"):
        return None
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"block size {text} is not positive")
    return value


def training_parser(doc: str, steps: int, out: str, dense_help: str) -> argparse.ArgumentParser:
    """The flags train_gpt.py and train_hf.py share: the schedule, the data, dcp's plan, outputs."""
    p = argparse.ArgumentParser(description=doc.split("\n\n")[0],
                                formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    p.add_argument("--steps", type=int, default=steps, help="optimizer steps (global batches)")
    p.add_argument("--tokens-per-batch", type=int, default=2048, help="tokens of a global batch")
    p.add_argument("--lr", type=float, default=3e-3, help="AdamW peak learning rate")
    p.add_argument("--warmup", type=int, default=5, help="linear warm-up steps, then cosine")
    p.add_argument("--weight-decay", type=float, default=0.1, help="on weight matrices only")
    p.add_argument("--clip", type=float, default=1.0, help="gradient norm clip (0: none)")
    p.add_argument("--seed", type=int, default=0, help="weights, samples, packing and plans")
    p.add_argument("--strategy", default="dcp",
                   help="dcp, dcp-pure, ring, zigzag, ulysses or hybrid")
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
    p.add_argument("--out", default=out, help="directory for loss.csv and loss.svg")
    p.add_argument("--compare", action="append", default=[], metavar="[LABEL=]CSV",
                   help="another run's loss.csv to draw in loss.svg too (repeatable; the label "
                   "defaults to the CSV's directory name)")
    p.add_argument("--dense", action="store_true", help=dense_help)
    p.add_argument("--threads", type=int, default=1, help="torch threads per rank")
    return p


def check_training_args(p: argparse.ArgumentParser, args: argparse.Namespace) -> None:
    if args.max_len is None:
        args.max_len = args.tokens_per_batch
    if args.max_len > args.tokens_per_batch:
        p.error(f"--max-len {args.max_len} exceeds --tokens-per-batch {args.tokens_per_batch}")
    if args.steps < 1:
        p.error(f"--steps {args.steps} is not positive")


def parse_args(argv=None) -> argparse.Namespace:
    p = training_parser(__doc__, steps=60, out="train_gpt_out", dense_help="one process, dense "
                        "attention over the same batches (no dcp executor)")
    p.add_argument("--dim", type=int, default=256)
    p.add_argument("--layers", type=int, default=4)
    p.add_argument("--heads", type=int, default=8)
    p.add_argument("--kv-heads", type=int, default=2)
    p.add_argument("--mask", default="causal",
                   help="dcp mask spec of every sample, e.g. 'lambda:sink=16,window=256'")
    p.add_argument("--checkpoint", action="store_true",
                   help="activation checkpointing on every layer")
    args = p.parse_args(argv)
    check_training_args(p, args)
    return args


def import_dcp_torch(dense: bool):
    try:
        import dcp.torch as dcpt
    except ImportError as error:
        need = ("--dense still needs dcp.torch.pack_batches, to iterate the very batches the dcp "
                "dataloader packs" if dense else "the dcp path needs dcp.torch")
        sys.exit(f"train_gpt.py: {need}, but `import dcp.torch` failed ({error}). Install dcp "
                 "with `pip install .` in the repository root.")
    return dcpt


class Progress:
    """A one-line progress bar on stderr, redrawn with \\r; clear() before printing elsewhere."""

    def __init__(self, total: int, width: int = 30):
        self.total, self.width, self.drawn = total, width, 0

    def draw(self, done: int, text: str) -> None:
        filled = int(self.width * done / self.total)
        line = f"[{'#' * filled}{'.' * (self.width - filled)}] {done}/{self.total} {text}"
        sys.stderr.write("\r" + line.ljust(self.drawn))
        sys.stderr.flush()
        self.drawn = len(line)

    def clear(self) -> None:
        if self.drawn:
            sys.stderr.write("\r" + " " * self.drawn + "\r")
            sys.stderr.flush()
            self.drawn = 0


def learning_rate(args: argparse.Namespace, step: int) -> float:
    """Linear warm-up to --lr, then cosine decay to a tenth of it at the last step."""
    if step < args.warmup:
        return args.lr * (step + 1) / args.warmup
    span = max(args.steps - args.warmup, 1)
    progress = min((step - args.warmup) / span, 1.0)
    return args.lr * (0.1 + 0.9 * 0.5 * (1.0 + math.cos(math.pi * progress)))


def make_optimizer(model: torch.nn.Module, args: argparse.Namespace) -> torch.optim.Optimizer:
    decay = [p for p in model.parameters() if p.dim() >= 2]
    no_decay = [p for p in model.parameters() if p.dim() < 2]
    return torch.optim.AdamW([{"params": decay, "weight_decay": args.weight_decay},
                              {"params": no_decay, "weight_decay": 0.0}],
                             lr=args.lr, betas=(0.9, 0.95), eps=1e-8)


def sum_over_group(model: torch.nn.Module, loss: torch.Tensor) -> float:
    """All-reduces (sum) every gradient and the loss in one flat buffer; returns the summed loss."""
    params = list(model.parameters())
    grads = [p.grad if p.grad is not None else torch.zeros_like(p) for p in params]
    flat = torch.cat([g.reshape(-1) for g in grads] + [loss.detach().reshape(1).to(grads[0].dtype)])
    dist.all_reduce(flat, op=dist.ReduceOp.SUM)
    offset = 0
    for p, g in zip(params, grads):
        n = g.numel()
        p.grad = flat[offset:offset + n].view_as(p).clone()
        offset += n
    return float(flat[-1])


def batch_crc(indices) -> int:
    """A checksum of a batch's dataset indices: equal columns in two CSVs mean equal batches."""
    return zlib.crc32(",".join(str(int(i)) for i in indices).encode())


def packed_batches(dcpt, dataset: ByteSequenceDataset, args: argparse.Namespace):
    """The dataloader's batches (same packing, seed + epoch per epoch), as whole packed batches
    with position ids that restart at every sequence."""
    lengths = dataset.lengths()
    epoch = 0
    while True:
        for indices in dcpt.pack_batches(lengths, args.tokens_per_batch, seed=args.seed + epoch,
                                         shuffle=True):
            samples = [dataset[i] for i in indices]
            seqlens = [s.numel() for s in samples]
            input_ids = torch.cat(samples)
            yield dict(input_ids=input_ids, position_ids=make_positions(seqlens),
                       labels=make_labels(input_ids, seqlens),
                       loss_tokens=sum(seqlens) - len(seqlens), seqlens=seqlens,
                       indices=list(indices))
        epoch += 1


def dense_batches(dcpt, dataset: ByteSequenceDataset, args: argparse.Namespace):
    """packed_batches with dense attention over each batch's mask."""
    for batch in packed_batches(dcpt, dataset, args):
        yield dict(batch, attn=dense_attention(batch["seqlens"], args.mask))


def read_loss_csv(path: str) -> list[float]:
    with open(path, newline="") as f:
        return [float(row["loss"]) for row in csv.DictReader(f)]


def training_loop(args: argparse.Namespace, model: torch.nn.Module,
                  optimizer: torch.optim.Optimizer, batches, distributed: bool, say,
                  progress: Progress, step_loss, start_step: int = 0,
                  reduce=None) -> tuple[list[dict], list[float], float]:
    """Optimizer steps start_step .. args.steps - 1 over `batches` (dicts with labels, seqlens
    and indices), the loss of each from step_loss(batch): learning-rate schedule, backward, the
    gradients summed over the group by reduce(model, loss), which returns the global loss
    (default sum_over_group; a model whose wrapper sums its gradients passes one that sums the
    loss only), clipping. Prints and draws each step on the lead rank; returns the CSV rows, the
    global losses and the seconds taken."""
    if reduce is None:
        reduce = sum_over_group if distributed else (lambda model, loss: loss.item())
    lead = not distributed or dist.get_rank() == 0
    rows, losses = [], []
    start = time.perf_counter()
    try:
        for step in range(start_step, args.steps):
            step_start = time.perf_counter()
            batch = next(batches, None)
            if batch is None:
                say(f"the data ran out after {step} steps")
                break
            for group in optimizer.param_groups:
                group["lr"] = learning_rate(args, step)
            optimizer.zero_grad(set_to_none=True)
            loss = step_loss(batch)
            loss.backward()
            total_loss = reduce(model, loss)
            if args.clip > 0:
                torch.nn.utils.clip_grad_norm_(model.parameters(), args.clip)
            optimizer.step()
            seconds = time.perf_counter() - step_start
            tokens = sum(batch["seqlens"])
            losses.append(total_loss)
            rows.append(dict(step=step + 1, loss=f"{total_loss:.6f}", tokens=tokens,
                             sequences=len(batch["seqlens"]), seconds=f"{seconds:.4f}",
                             tokens_per_s=f"{tokens / seconds:.1f}",
                             batch_crc=batch_crc(batch["indices"])))
            say(f"step {step + 1:4d}/{args.steps}  loss {total_loss:.4f}  tokens/s "
                f"{tokens / seconds:8.0f}  ({tokens} tokens, {len(batch['seqlens'])} seqs, "
                f"{seconds * 1000:.0f} ms)")
            if lead:
                progress.draw(step + 1, f"loss {total_loss:.4f}")
    finally:
        if lead:
            progress.clear()
    return rows, losses, time.perf_counter() - start


def write_outputs(args: argparse.Namespace, rows: list[dict], series: dict[str, list[float]],
                  elapsed: float, title: str) -> None:
    """loss.csv (one row a step) and loss.svg (this run's losses and those of --compare) in
    --out, and the closing line."""
    os.makedirs(args.out, exist_ok=True)
    csv_path = os.path.join(args.out, "loss.csv")
    with open(csv_path, "w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)
    series = dict(series)
    for other in args.compare:
        label, _, path = other.rpartition("=")
        label = label or os.path.basename(os.path.dirname(os.path.abspath(path))) or path
        series[label] = read_loss_csv(path)
    svg_path = os.path.join(args.out, "loss.svg")
    write_loss_svg(svg_path, series, title=title)
    tokens = sum(int(r["tokens"]) for r in rows)
    losses = next(iter(series.values()))
    print(f"done: {len(rows)} steps in {elapsed:.1f} s ({tokens / elapsed:.0f} tokens/s); "
          f"final loss {losses[-1]:.4f}; wrote {csv_path} and {svg_path}", flush=True)


def launch(script: str, args: argparse.Namespace, train, backend: str = "gloo") -> int:
    """Runs train(args, distributed): under torchrun on a process group of `backend` (the dcp
    path), else in this one process (--dense, or a plain python launch)."""
    torch.set_num_threads(args.threads)
    launched = "RANK" in os.environ and "WORLD_SIZE" in os.environ
    if args.dense and launched and int(os.environ["WORLD_SIZE"]) > 1:
        sys.exit(f"{script}: --dense is the single-process baseline; run it with python, "
                 "not torchrun")
    distributed = launched and not args.dense
    if distributed:
        dist.init_process_group(backend)
    try:
        return train(args, distributed)
    finally:
        if distributed and dist.is_initialized():
            dist.destroy_process_group()


def run_context(args: argparse.Namespace, distributed: bool):
    """(world size, whether this is the lead rank, the progress bar, say): say(*parts) prints on
    the lead rank (rank 0) only, clearing the progress bar first."""
    world = dist.get_world_size() if distributed else 1
    lead = not distributed or dist.get_rank() == 0
    progress = Progress(args.steps)

    def say(*parts) -> None:
        if lead:
            progress.clear()
            print(*parts, flush=True)
    return world, lead, progress, say


def main(argv=None) -> int:
    return launch("train_gpt.py", parse_args(argv), train)


def train(args: argparse.Namespace, distributed: bool) -> int:
    world, lead, progress, say = run_context(args, distributed)
    if args.dense:
        try:
            spec_mask(args.mask, 4)  # a malformed mask fails here, before any work
        except ValueError as error:
            sys.exit(f"train_gpt.py: --mask: {error}")
    corpus = load_corpus(args.corpus)
    dataset = ByteSequenceDataset(corpus, max_len=args.max_len, min_len=args.min_len,
                                  seed=args.seed, mean_len=args.mean_len)
    config = GPTConfig(dim=args.dim, layers=args.layers, heads=args.heads, kv_heads=args.kv_heads)
    init_seed(args.seed)
    model = GPT(config, checkpoint_layers=range(config.layers) if args.checkpoint else ())
    if distributed:  # construction is seeded already; the broadcast only guards against drift
        for tensor in model.state_dict().values():
            dist.broadcast(tensor, src=0)
    optimizer = make_optimizer(model, args)
    dcpt = import_dcp_torch(args.dense)

    lengths = dataset.lengths()
    per_epoch = len(dcpt.pack_batches(lengths, args.tokens_per_batch, seed=args.seed,
                                      shuffle=True))
    mode = "dense, 1 process" if args.dense else f"dcp ({args.strategy}), {world} ranks"
    say(f"train_gpt: {mode}; model {model.num_parameters():,} parameters ({config.layers} layers, "
        f"dim {config.dim}, {config.heads} heads, {config.kv_heads} kv heads); corpus "
        f"{len(corpus):,} bytes in {len(dataset):,} samples ({min(lengths)}..{max(lengths)} "
        f"tokens); {per_epoch} batches of <= {args.tokens_per_batch} tokens per epoch; mask "
        f"{args.mask}")

    if args.dense:
        batches = dense_batches(dcpt, dataset, args)
        executor, iterator = None, None
    else:
        loader = dcpt.DCPDataloader(
            dataset, mask_fn=lambda sample: args.mask, group=None,
            tokens_per_batch=args.tokens_per_batch, heads=config.heads, kv_heads=config.kv_heads,
            head_dim=config.head_dim, dtype=torch.float32, block_size=args.block_size,
            strategy=args.strategy, nodes=args.nodes, cluster=args.cluster, seed=args.seed,
            shuffle=True, prefetch=2, epochs=math.ceil(args.steps / per_epoch) + 1)
        executor = dcpt.DCPExecutor(group=None)
        iterator = iter(loader)

        def dcp_batches():
            for local, plan in iterator:
                executor.prepare(plan)
                yield dict(input_ids=local.input_ids, position_ids=local.position_ids,
                           labels=local.labels, loss_tokens=local.loss_tokens,
                           seqlens=local.seqlens, indices=local.batch_indices,
                           attn=lambda q, k, v: dcpt.attention(executor, q, k, v))

        batches = dcp_batches()

    try:
        rows, losses, elapsed = training_loop(
            args, model, optimizer, batches, distributed, say, progress,
            lambda batch: loss_fn(model(batch["input_ids"], batch["position_ids"], batch["attn"]),
                                  batch["labels"], batch["loss_tokens"]))
    finally:
        if iterator is not None:
            iterator.close()

    if lead and rows:
        label = "dense, 1 process" if args.dense else f"{args.strategy}, {world} ranks"
        write_outputs(args, rows, {label: losses}, elapsed,
                      title=f"byte-level GPT, {model.num_parameters():,} parameters, "
                      f"{args.tokens_per_batch} tokens per batch, mask {args.mask}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
