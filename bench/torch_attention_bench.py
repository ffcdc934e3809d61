# SPDX-License-Identifier: Apache-2.0
"""The torch path against the C++ executor on the same plan, and a training step's split.

    python3 bench/torch_attention_bench.py [--ranks 2] [--seqlens 3000,700,300,96] ...

1. Per attention layer: wall time of dcp.torch.attention forward and backward on `ranks` gloo
   processes (the slowest rank, passes started together after a barrier), against the C++
   executor running the same plan on as many local ranks (threads, the local communicator).
2. A training loop (the example GPT, DCPDataloader, data parallel over the group): how long each
   step waited for the loader, and the step's split between attention and the rest.
Prints Markdown rows for docs/benchmarks.md."""
from __future__ import annotations

import argparse
import os
import statistics
import sys
import time

import torch
import torch.distributed as dist
import torch.multiprocessing as mp

import dcp
import dcp.torch as dcpt

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "examples"))


def plan_of(args) -> dcp.Plan:
    return dcp.plan([int(n) for n in args.seqlens.split(",")], args.mask, heads=args.heads,
                    kv_heads=args.kv_heads, head_dim=args.head_dim, dtype=args.dtype,
                    block_size=args.block_size, cluster="cpu-local", nodes=1,
                    devices_per_node=args.ranks, strategy=args.strategy, seed=0)


def layer_times(rank, args, out):
    plan = plan_of(args)
    executor = dcpt.DCPExecutor(threads=args.threads)
    executor.prepare(plan)
    n, dtype = executor.local_tokens, executor.dtype
    q = torch.randn(n, args.heads, args.head_dim).to(dtype).requires_grad_()
    k, v = (torch.randn(n, args.kv_heads, args.head_dim).to(dtype).requires_grad_()
            for _ in range(2))
    fwd, bwd, kernel = [], [], []
    for i in range(args.repeats + 1):
        dist.barrier()
        start = time.perf_counter()
        o = dcpt.attention(executor, q, k, v)
        t1 = time.perf_counter()
        dist.barrier()
        t2 = time.perf_counter()
        o.backward(torch.ones_like(o))
        t3 = time.perf_counter()
        if i > 0:  # the first is a warm-up
            fwd.append(t1 - start)
            bwd.append(t3 - t2)
            kernel.append((executor.profile()["kernel_seconds"],
                           executor.profile(backward=True)["kernel_seconds"]))
    times = torch.tensor([fwd, bwd], dtype=torch.float64)
    dist.all_reduce(times, op=dist.ReduceOp.MAX)  # the slowest rank, per repeat
    if rank == 0:
        out.put({"forward": statistics.median(times[0].tolist()),
                 "backward": statistics.median(times[1].tolist())})


def train_split(rank, args, out):
    import gpt_model
    config = gpt_model.GPTConfig(dim=256, layers=4, heads=args.heads, kv_heads=args.kv_heads)
    g = torch.Generator().manual_seed(0)
    lengths = torch.randint(16, args.train_tokens // 2, (400,), generator=g).tolist()
    dataset = [torch.randint(0, 256, (n,), generator=g) for n in lengths]
    loader = dcpt.DCPDataloader(dataset, None, tokens_per_batch=args.train_tokens,
                                heads=config.heads, kv_heads=config.kv_heads,
                                head_dim=config.head_dim, dtype=torch.float32, block_size=128,
                                cluster="cpu-local", prefetch=2)
    executor = dcpt.DCPExecutor(threads=args.threads)
    torch.manual_seed(0)
    model = gpt_model.GPT(config)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    attention_s = [0.0]

    def attn(q, k, v):
        start = time.perf_counter()
        o = dcpt.attention(executor, q, k, v)
        attention_s[0] += time.perf_counter() - start
        return o

    steps, waits, step_s, attn_fwd, attn_bwd = 0, [], [], [], []
    it = iter(loader)
    while steps < args.train_steps + 1:
        waited = loader.wait_seconds
        start = time.perf_counter()
        local, plan = next(it)
        waits.append(loader.wait_seconds - waited)
        executor.prepare(plan)
        attention_s[0] = 0.0
        logits = model(local.input_ids, local.position_ids, attn)
        loss = gpt_model.loss_fn(logits, local.labels, local.loss_tokens)
        optimizer.zero_grad()
        loss.backward()
        for p in model.parameters():
            dist.all_reduce(p.grad)
        optimizer.step()
        if steps > 0:  # the first waits for the first plan
            step_s.append(time.perf_counter() - start)
            attn_fwd.append(attention_s[0])
            # The executor profiles its last call: the first layer's backward, all layers alike.
            attn_bwd.append(executor.profile(backward=True)["seconds"] * config.layers)
        steps += 1
    it.close()
    if rank == 0:
        out.put({"wait": waits[1:], "step": statistics.median(step_s),
                 "attention_forward": statistics.median(attn_fwd),
                 "attention_backward": statistics.median(attn_bwd),
                 "plan_ms": loader.plan_seconds * 1000 / steps})


def spawn(fn, args):
    ctx = mp.get_context("spawn")
    out = ctx.SimpleQueue()
    mp.start_processes(_entry, args=(fn, args, out), nprocs=args.ranks, start_method="spawn")
    return out.get()


def _entry(rank, fn, args, out):
    torch.set_num_threads(args.threads)
    os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
    dist.init_process_group("gloo", rank=rank, world_size=args.ranks,
                            init_method=f"tcp://127.0.0.1:{args.port}")
    try:
        fn(rank, args, out)
    finally:
        dist.destroy_process_group()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--ranks", type=int, default=2)
    parser.add_argument("--seqlens", default="3000,700,300,96")
    parser.add_argument("--mask", default="causal")
    parser.add_argument("--heads", type=int, default=8)
    parser.add_argument("--kv-heads", type=int, default=2)
    parser.add_argument("--head-dim", type=int, default=64)
    parser.add_argument("--dtype", default="fp32")
    parser.add_argument("--block-size", type=int, default=512)
    parser.add_argument("--strategy", default="dcp-pure")
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--train-tokens", type=int, default=2048)
    parser.add_argument("--train-steps", type=int, default=8)
    parser.add_argument("--port", type=int, default=29581)
    args = parser.parse_args()

    torch_path = spawn(layer_times, args)
    cpp = [dcp._core.run_locally(plan_of(args), 0, args.threads) for _ in range(args.repeats)]
    cpp_fwd = statistics.median(r["forward_seconds"] for r in cpp)
    cpp_bwd = statistics.median(r["backward_seconds"] for r in cpp)
    print("| pass | torch path (ms) | C++ executor (ms) | ratio |")
    print("|---|---|---|---|")
    for name, t, c in (("forward", torch_path["forward"], cpp_fwd),
                       ("backward", torch_path["backward"], cpp_bwd)):
        print(f"| {name} | {t * 1e3:.1f} | {c * 1e3:.1f} | {t / c:.2f} |")
    args.port += 1
    split = spawn(train_split, args)
    print(f"\nloader wait per step (ms, after the first): "
          f"{', '.join(f'{w * 1e3:.2f}' for w in split['wait'])}")
    print(f"planning per batch (ms, background): {split['plan_ms']:.1f}")
    rest = split['step'] - split['attention_forward'] - split['attention_backward']
    print(f"step {split['step'] * 1e3:.1f} ms: attention forward "
          f"{split['attention_forward'] * 1e3:.1f} ms, attention backward "
          f"{split['attention_backward'] * 1e3:.1f} ms, the rest {rest * 1e3:.1f} ms")


if __name__ == "__main__":
    main()
