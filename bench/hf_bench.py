# SPDX-License-Identifier: Apache-2.0
"""transformers models on dcp, in one process (CPU, fp32, dcp's C++ kernels):

1. The layout copies of attn_implementation="dcp": transformers hands q, k, v head-major
   ((1, heads, tokens, d)); dcp takes them token-major. Times the copies dcp.torch.hf.dcp_attention
   makes (q and k; v is token-major in memory already, o is returned as it is) against the
   layer's attention forward and backward.
2. torch.compile: a training step (forward, backward, AdamW) of a Llama-style model compiled with
   torch.compile(fullgraph=True, dynamic=True) against the same step eager, interleaved over the
   same batches of different sizes, after the compiled model has seen every size once.
3. dcp against transformers' own attention: the same model's training step (same weights, the
   same packed batch of several documents, position ids restarting at each) with
   attn_implementation="dcp" on one rank and with each of --baselines, interleaved; tokens/s.
   With --device cuda: bf16 and dcp's Triton kernels; on the CPU: fp32 and dcp's C++ kernels.

    python3 bench/hf_bench.py [--measure copies,compile,dense] [--tokens 2048] [--repeats 5]
    python3 bench/hf_bench.py --measure dense --device cuda --tokens 32768 --hidden 2048 \
        --layers 16 --heads 16 --kv-heads 8 --head-dim 128 --baselines sdpa,flex_attention
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
    config = llama_config(args)
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


def llama_config(args):
    import transformers
    return transformers.LlamaConfig(vocab_size=args.vocab, hidden_size=args.hidden,
                                    intermediate_size=args.hidden * 3,
                                    num_hidden_layers=args.layers,
                                    num_attention_heads=args.heads,
                                    num_key_value_heads=args.kv_heads, head_dim=args.head_dim,
                                    max_position_embeddings=args.tokens)


def against_dense(args) -> None:
    import transformers

    from gpt_model import loss_fn, make_labels, make_positions
    dcphf.register()
    device = torch.device(args.device)
    dtype = torch.bfloat16 if device.type == "cuda" else torch.float32
    config = llama_config(args)
    torch.manual_seed(0)
    model = transformers.AutoModelForCausalLM.from_config(
        config, attn_implementation="dcp", dtype=dtype).to(device)
    opts = dcphf.plan_options(config)
    t = args.tokens
    seqlens = [t // 2, t // 4, t // 8, t - t // 2 - t // 4 - t // 8]
    plan = dcp.plan(seqlens, opts["mask_fn"](None), heads=opts["heads"], kv_heads=opts["kv_heads"],
                    head_dim=opts["head_dim"], dtype=dcp.dtype_name(dtype), nodes=1,
                    devices_per_node=1, block_size=args.block_size, cluster="cpu-local")
    executor = dcpt.DCPExecutor(device=device, threads=args.threads)
    executor.prepare(plan)
    ids = torch.randint(0, args.vocab, (t,))
    positions, labels = make_positions(seqlens), make_labels(ids, seqlens)
    local = torch.from_numpy(plan.local_token_positions(0))
    whole = dict(input_ids=ids[None].to(device), position_ids=positions[None].to(device))
    mine = dict(input_ids=ids[local][None].to(device),
                position_ids=positions[local][None].to(device), dcp_executor=executor)
    targets = {"dcp": labels[local].to(device)}
    runs = {"dcp": mine}
    for name in args.baselines.split(","):
        runs[name] = whole
        targets[name] = labels.to(device)

    def step(name):
        model.set_attn_implementation(name)
        model.zero_grad(set_to_none=True)
        logits = model(**runs[name], use_cache=False).logits[0]
        loss_fn(logits, targets[name], t).backward()
        if device.type == "cuda":
            torch.cuda.synchronize()

    times = {name: [] for name in runs}
    for name in runs:
        step(name)  # warm-up
    for _ in range(args.repeats):
        for name in runs:
            times[name].append(seconds(lambda: step(name)))
    medians = {name: statistics.median(ts) for name, ts in times.items()}
    best = min((n for n in medians if n != "dcp"), key=medians.get)
    params = sum(p.numel() for p in model.parameters())
    where = torch.cuda.get_device_name(device) if device.type == "cuda" else "CPU"
    row = " | ".join(f"{n} {t / medians[n]:,.0f} tokens/s" for n in medians)
    print(f"| training step (forward + backward), Llama-style {params / 1e6:.0f}M parameters, "
          f"{t} packed tokens in {len(seqlens)} documents, {where}, {str(dtype)[6:]} | {row} | "
          f"dcp / best ({best}) {medians[best] / medians['dcp']:.2f}x |")


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
    p.add_argument("--vocab", type=int, default=256)
    p.add_argument("--device", default="cpu")
    p.add_argument("--baselines", default="sdpa",
                   help="transformers attn_implementations to compare with (comma-separated)")
    p.add_argument("--measure", default="copies,compile,dense",
                   help="comma-separated: copies, compile, dense")
    args = p.parse_args()
    torch.set_num_threads(args.threads)
    measures = {"copies": layout_copies, "compile": compiled_step, "dense": against_dense}
    for name in args.measure.split(","):
        if name not in measures:
            p.error(f"--measure {name!r} is not one of {', '.join(measures)}")
        measures[name](args)


if __name__ == "__main__":
    main()
