# SPDX-License-Identifier: Apache-2.0
"""transformers models on dcp, in one process (CPU, fp32, dcp's C++ kernels):

1. The layout copies of attn_implementation="dcp": transformers hands q, k, v head-major
   ((1, heads, tokens, d)); dcp takes them token-major. Times the copies dcp.torch.hf.dcp_attention
   makes (q and k; v is token-major in memory already, o is returned as it is) against the
   layer's attention forward and backward.
2. torch.compile: a training step (forward, backward, AdamW) of a Llama-style model compiled with
   torch.compile(fullgraph=True, dynamic=True) against the same step eager, interleaved over the
   same batches of different sizes, after the compiled model has seen every size once.

    python3 bench/hf_bench.py [--tokens 4096] [--repeats 7] [--threads 2]
Prints Markdown rows for docs/benchmarks.md."""
from __future__ import annotations

import argparse
import os
import statistics
import sys
import time

import torch

import dcp
import dcp.torch as dcpt
import dcp.torch.hf as dcphf

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "examples"))


def seconds(fn) -> float:
    start = time.perf_counter()
    fn()
    return time.perf_counter() - start


def layout_copies(args) -> None:
    heads, kv_heads, d, t = args.heads, args.kv_heads, args.head_dim, args.tokens
    seqlens = [t // 2, t // 4, t - t // 2 - t // 4]
    plan = dcp.plan(seqlens, "causal", heads=heads, kv_heads=kv_heads, head_dim=d, dtype="fp32",
                    nodes=1, devices_per_node=1, block_size=args.block_size, cluster="cpu-local")
    executor = dcpt.DCPExecutor(threads=args.threads)
    executor.prepare(plan)
    # As transformers makes them: q and k written head-major by RoPE, v a transposed view of its
    # projection (token-major in memory already).
    q = torch.randn(1, heads, t, d)
    k = torch.randn(1, kv_heads, t, d)
    v = torch.randn(1, t, kv_heads, d).transpose(1, 2)

    def copies():
        for x in (q, k, v):
            x[0].transpose(0, 1).contiguous()

    qt, kt, vt = (x[0].transpose(0, 1).contiguous().requires_grad_() for x in (q, k, v))

    def attention():
        dcpt.attention(executor, qt, kt, vt, softmax_scale=d ** -0.5).sum().backward()

    copies(), attention()  # warm-up
    copy_times, attention_times = [], []
    for _ in range(args.repeats):
        copy_times.append(min(seconds(copies) for _ in range(20)))
        attention_times.append(seconds(attention))
    a, b = statistics.median(copy_times), statistics.median(attention_times)
    moved = (heads + kv_heads) * t * d * 4
    print(f"| layout copies of one layer (q and k, {moved / 2**20:.1f} MiB; v and o need none), "
          f"{t} tokens, heads {heads}/{kv_heads}, d {d} | {a * 1e3:.2f} ms | the layer's attention "
          f"forward + backward {b * 1e3:.0f} ms | {a / b:.2%} |")


def compiled_step(args) -> None:
    import transformers
    from gpt_model import loss_fn
    dcphf.register()
    config = transformers.LlamaConfig(vocab_size=256, hidden_size=args.hidden,
                                      intermediate_size=args.hidden * 3,
                                      num_hidden_layers=args.layers,
                                      num_attention_heads=args.heads,
                                      num_key_value_heads=args.kv_heads,
                                      max_position_embeddings=args.tokens)
    models = []
    for _ in range(2):
        torch.manual_seed(0)
        models.append(transformers.AutoModelForCausalLM.from_config(
            config, attn_implementation="dcp", dtype=torch.float32))
    eager, plain = models
    compiled = torch.compile(plain, fullgraph=True, dynamic=True)
    optimizers = [torch.optim.AdamW(m.parameters(), lr=1e-4) for m in models]
    opts = dcphf.plan_options(config)
    g = torch.Generator().manual_seed(0)
    batches = []
    for i in range(args.batches):
        total = args.tokens - 97 * i
        cut = sorted(torch.randint(1, total, (3,), generator=g).tolist())
        seqlens = [x for x in (cut[0], cut[1] - cut[0], cut[2] - cut[1], total - cut[2]) if x]
        plan = dcp.plan(seqlens, opts["mask_fn"](None), heads=opts["heads"],
                        kv_heads=opts["kv_heads"], head_dim=opts["head_dim"], dtype="fp32",
                        nodes=1, devices_per_node=1, block_size=args.block_size,
                        cluster="cpu-local")
        ids = torch.randint(0, 256, (total,), generator=g)
        positions = torch.cat([torch.arange(n) for n in seqlens])
        labels = ids.roll(-1)
        batches.append((plan, ids, positions, labels))
    executor = dcpt.DCPExecutor(threads=args.threads)

    def step(fn, optimizer, batch):
        plan, ids, positions, labels = batch
        executor.prepare(plan)
        logits = fn(input_ids=ids[None], position_ids=positions[None], dcp_executor=executor,
                    use_cache=False).logits[0]
        loss = loss_fn(logits, labels, labels.numel())
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()

    start = time.perf_counter()
    for batch in batches:
        step(compiled, optimizers[1], batch)
    compile_s = time.perf_counter() - start
    step(eager, optimizers[0], batches[0])
    eager_times, compiled_times = [], []
    for _ in range(args.repeats):
        for batch in batches:
            eager_times.append(seconds(lambda: step(eager, optimizers[0], batch)))
            compiled_times.append(seconds(lambda: step(compiled, optimizers[1], batch)))
    a, b = statistics.median(eager_times), statistics.median(compiled_times)
    params = sum(p.numel() for p in eager.parameters())
    print(f"| training step, Llama-style {params / 1e6:.1f}M parameters ({args.layers} layers, "
          f"hidden {args.hidden}), {args.batches} batch sizes up to {args.tokens} tokens | eager "
          f"{a * 1e3:.0f} ms | compiled {b * 1e3:.0f} ms | compiled/eager {b / a:.2f} "
          f"(first pass over the sizes, compiling: {compile_s:.0f} s) |")


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--tokens", type=int, default=2048)
    p.add_argument("--heads", type=int, default=8)
    p.add_argument("--kv-heads", type=int, default=2)
    p.add_argument("--head-dim", type=int, default=64)
    p.add_argument("--hidden", type=int, default=256)
    p.add_argument("--layers", type=int, default=4)
    p.add_argument("--block-size", type=int, default=256)
    p.add_argument("--batches", type=int, default=4)
    p.add_argument("--repeats", type=int, default=5)
    p.add_argument("--threads", type=int, default=2)
    args = p.parse_args()
    torch.set_num_threads(args.threads)
    layout_copies(args)
    compiled_step(args)


if __name__ == "__main__":
    main()
