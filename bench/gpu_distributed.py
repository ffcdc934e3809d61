# SPDX-License-Identifier: Apache-2.0
"""One attention layer of a packed batch through dcp.torch on every rank, per planning strategy.

What it measures: for each strategy (dcp, dcp-pure and the static ring, zigzag and ulysses
layouts), the batch is planned with dcp.plan on every rank (nodes x devices per node = the world),
a DCPExecutor on this rank's device runs dcp.torch.attention forward and backward on random
q, k, v in the plan's local layout (one global batch, drawn once from a fixed seed, each rank
taking its tokens at plan.local_token_positions(rank), so every strategy sees the same data), and
each pass is timed on its own: barrier, synchronize, CUDA events around the pass (perf_counter on
the CPU), synchronize. A repeat's time is the slowest rank's (all_reduce MAX); the table shows the
median over `--repeats` after `--warmup`, the plan's simulated times on --cluster beside the
measured ones (a cluster file from `python -m dcp.calibrate` makes that a check of the cost model),
each strategy's ratio to the best static strategy (ring, zigzag, ulysses, hybrid, te, loongtrain:
the lowest time among those run), and TFLOP/s per GPU (forward FLOPs = 4 * d * heads * unmasked
pairs of the batch, backward 2.5 x). It also gathers o, dq, dk and dv of every strategy into the
global token order and reports their largest difference from the first strategy's (relative to its
max |value|); a difference above the dtype's tolerance (bf16 3e-2, fp16 5e-3, fp32 1e-4) makes the
run exit 1. `--profile` runs one more forward and backward per strategy under torch.profiler and
prints rank 0's kernels by their own GPU time (on the CPU: operations by self time), to see which
kernel a difference between strategies comes from.

On a GPU node (NCCL, Triton kernels):

    torchrun --nproc-per-node 8 bench/gpu_distributed.py --seqlens 65536,32768,16384,16384 \\
        --mask causal --strategies dcp,dcp-pure,ring,zigzag,ulysses --repeats 10 [--json out.json]

Several nodes: the same on each node with torchrun's --nnodes/--rdzv options and `--nodes N`.
Without a GPU (smoke test: gloo, dcp's C++ cpu kernels, tiny sizes):

    torchrun --standalone --nproc-per-node 2 bench/gpu_distributed.py --device cpu \\
        --backend gloo --kernels cpu --seqlens 40,9 --block-size 8 --heads 2 --kv-heads 1 \\
        --head-dim 8 --repeats 1 --strategies dcp-pure,ring
"""
from __future__ import annotations

import argparse
import datetime
import inspect
import json
import os
import statistics
import sys
import time

import torch
import torch.distributed as dist

STATIC = ("ring", "zigzag", "ulysses", "hybrid", "te", "loongtrain")
STORAGE = {"bf16": torch.bfloat16, "fp16": torch.float16, "fp32": torch.float32}
TOLERANCE = {"bf16": 3e-2, "fp16": 5e-3, "fp32": 1e-4}  # of max |first strategy's value|


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seqlens", default="65536,32768,16384,8192,8192,4096,2048,2048,1024,1024",
                        help="sequence lengths of the packed batch")
    parser.add_argument("--mask", default="causal", help="dcp mask spec, e.g. lambda:sink=64,"
                        "window=4096")
    parser.add_argument("--strategies", default="dcp,dcp-pure,ring,zigzag,ulysses")
    parser.add_argument("--heads", type=int, default=8)
    parser.add_argument("--kv-heads", type=int, default=2)
    parser.add_argument("--head-dim", type=int, default=128)
    parser.add_argument("--dtype", default="bf16", choices=sorted(STORAGE))
    parser.add_argument("--block-size", type=int, default=None, help="default: the planner's")
    parser.add_argument("--nodes", type=int, default=1)
    parser.add_argument("--cluster", default="a100-p4de", help="the planner's cluster model")
    parser.add_argument("--repeats", type=int, default=10)
    parser.add_argument("--warmup", type=int, default=2)
    parser.add_argument("--device", default="cuda", choices=("cuda", "cpu"))
    parser.add_argument("--backend", default=None, help="default nccl on cuda, gloo on cpu")
    parser.add_argument("--kernels", default=None, choices=("triton", "cpu"),
                        help="default triton on cuda, cpu on cpu")
    parser.add_argument("--threads", type=int, default=1, help="threads of the cpu kernels")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--timeout", type=float, default=600.0, help="process group timeout, s")
    parser.add_argument("--no-check", action="store_true",
                        help="skip the comparison of the strategies' results")
    parser.add_argument("--json", default=None, help="rank 0 writes the records to this file")
    parser.add_argument("--profile", action="store_true",
                        help="after timing, run one more forward and backward per strategy under "
                             "torch.profiler and print rank 0's kernels by their own GPU time "
                             "(on the CPU: operations by self time)")
    args = parser.parse_args(argv)
    args.seqlens = [int(n) for n in args.seqlens.split(",") if n]
    args.strategies = [s for s in args.strategies.split(",") if s]
    args.backend = args.backend or ("nccl" if args.device == "cuda" else "gloo")
    args.kernels = args.kernels or ("triton" if args.device == "cuda" else "cpu")
    if args.repeats < 1 or args.warmup < 0 or args.nodes < 1:
        parser.error("--repeats and --nodes must be positive, --warmup not negative")
    return args


def missing_features(args) -> str | None:
    """Why the installed dcp cannot run this benchmark, or None."""
    try:
        import dcp
        import dcp.torch as dcpt
    except ImportError as error:
        return f"import dcp.torch failed: {error}"
    parameters = inspect.signature(dcpt.DCPExecutor.__init__).parameters
    for name in ("device", "kernels"):
        if name not in parameters:
            return (f"the installed dcp ({dcp.__file__}) has no DCPExecutor({name}=...); "
                    "reinstall it from this tree (pip install --no-build-isolation .)")
    if not hasattr(dcp.Plan, "local_token_positions"):
        return "the installed dcp's Plan has no local_token_positions()"
    if args.kernels == "triton":
        try:
            from dcp.torch.kernels import triton_kernels as tk
        except ImportError as error:
            return f"dcp.torch.kernels.triton_kernels does not import: {error}"
        for name in ("attention_forward", "attention_backward"):
            if not hasattr(tk, name):
                return f"the installed dcp.torch.kernels.triton_kernels has no {name}"
    return None


class PassTimer:
    """Times one pass: CUDA events on a GPU, perf_counter on the CPU."""

    def __init__(self, device: torch.device):
        self.device = device

    def __enter__(self):
        if self.device.type == "cuda":
            self.start = torch.cuda.Event(enable_timing=True)
            self.end = torch.cuda.Event(enable_timing=True)
            self.start.record()
        else:
            self.t0 = time.perf_counter()
        return self

    def __exit__(self, *exc):
        if self.device.type == "cuda":
            self.end.record()
            torch.cuda.synchronize(self.device)
            self.seconds = self.start.elapsed_time(self.end) / 1e3
        else:
            self.seconds = time.perf_counter() - self.t0
        return False


def synchronize(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    dist.barrier()
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def global_inputs(args, device: torch.device, total: int):
    """q, k, v, do of the whole batch (storage dtype, on `device`), the same on every rank."""
    generator = torch.Generator(device=device).manual_seed(args.seed)
    dtype = STORAGE[args.dtype]

    def randn(heads):
        return torch.randn(total, heads, args.head_dim, generator=generator, device=device,
                           dtype=torch.float32).to(dtype)
    return randn(args.heads), randn(args.kv_heads), randn(args.kv_heads), randn(args.heads)


def gather_global(local: torch.Tensor, positions: torch.Tensor, total: int) -> torch.Tensor | None:
    """The local tensor scattered into global token order, summed over ranks onto rank 0."""
    full = torch.zeros((total,) + tuple(local.shape[1:]), dtype=torch.float32,
                       device=local.device)
    full[positions] = local.float()
    dist.reduce(full, dst=0, op=dist.ReduceOp.SUM)
    return full if dist.get_rank() == 0 else None


def run_strategy(strategy: str, executor, inputs, args, device, rank: int, world: int):
    """One strategy's record (rank 0's has the times), and rank 0's global o, dq, dk, dv."""
    import dcp
    import dcp.torch as dcpt

    total = sum(args.seqlens)
    try:
        plan = dcp.plan(args.seqlens, args.mask, heads=args.heads, kv_heads=args.kv_heads,
                        head_dim=args.head_dim, dtype=args.dtype, block_size=args.block_size,
                        cluster=args.cluster, nodes=args.nodes,
                        devices_per_node=world // args.nodes, strategy=strategy, seed=args.seed)
    except ValueError as error:  # the same on every rank: every rank skips it
        return {"strategy": strategy, "error": str(error)}, None
    executor.prepare(plan)
    positions = torch.as_tensor(plan.local_token_positions(rank), dtype=torch.int64)
    if positions.numel() != executor.local_tokens:
        raise RuntimeError(f"rank {rank}: {positions.numel()} positions for "
                           f"{executor.local_tokens} local tokens")
    positions = positions.to(device)
    q_all, k_all, v_all, do_all = inputs
    q, k, v = (x[positions].requires_grad_() for x in (q_all, k_all, v_all))
    do = do_all[positions]

    times = []
    for i in range(args.warmup + args.repeats):
        for x in (q, k, v):
            x.grad = None
        synchronize(device)
        with PassTimer(device) as forward:
            o = dcpt.attention(executor, q, k, v)
        synchronize(device)
        with PassTimer(device) as backward:
            o.backward(do)
        if i >= args.warmup:
            times.append((forward.seconds, backward.seconds))
    slowest = torch.tensor(times, dtype=torch.float64, device=device)
    dist.all_reduce(slowest, op=dist.ReduceOp.MAX)  # the slowest rank, per repeat
    slowest = slowest.cpu()
    local_tokens = torch.tensor([executor.local_tokens], dtype=torch.float64, device=device)
    max_tokens, min_tokens = local_tokens.clone(), local_tokens.clone()
    dist.all_reduce(max_tokens, op=dist.ReduceOp.MAX)
    dist.all_reduce(min_tokens, op=dist.ReduceOp.MIN)
    simulated = plan.simulate(args.cluster)  # the planner's model of these same passes
    record = {"strategy": strategy, "plan_ms": plan.plan_ms,
              "simulated_forward_s": simulated["forward"]["seconds"],
              "simulated_backward_s": simulated["backward"]["seconds"],
              "local_tokens_max": int(max_tokens.item()),
              "local_tokens_min": int(min_tokens.item()),
              "forward_s": statistics.median(slowest[:, 0].tolist()),
              "backward_s": statistics.median(slowest[:, 1].tolist()),
              "total_s": statistics.median((slowest[:, 0] + slowest[:, 1]).tolist()),
              "forward_repeats_s": slowest[:, 0].tolist(),
              "backward_repeats_s": slowest[:, 1].tolist()}
    if args.profile:  # q, k, v then hold the profiled backward's gradients, the same values
        record["kernels"] = profile_passes(executor, q, k, v, do, device, dcpt)
    results = None
    if not args.no_check:
        results = {name: gather_global(x, positions, total) for name, x in
                   (("o", o.detach()), ("dq", q.grad), ("dk", k.grad), ("dv", v.grad))}
    return record, results


def profile_passes(executor, q, k, v, do, device: torch.device, dcpt) -> dict:
    """One forward and one backward, each under torch.profiler: per pass, [{name, calls, us}] by
    time, of the GPU kernels (their own time) on CUDA, of the operations (their self time, without
    the operations they call) on the CPU, so that no time is counted twice."""
    from torch.autograd import DeviceType
    from torch.profiler import ProfilerActivity, profile

    cuda = device.type == "cuda"

    def profiled(run):  # run()'s result, and its kernels by time
        synchronize(device)
        with profile(activities=[ProfilerActivity.CPU] +
                     ([ProfilerActivity.CUDA] if cuda else [])) as prof:
            result = run()
            if cuda:
                torch.cuda.synchronize(device)
        rows = []
        for event in prof.key_averages():
            if cuda and event.device_type != DeviceType.CUDA:
                continue  # a host operation: its device time is its kernels'
            us = event.self_device_time_total if cuda else event.self_cpu_time_total
            if us > 0:
                rows.append({"name": event.key, "calls": event.count, "us": us})
        return result, sorted(rows, key=lambda row: -row["us"])

    for x in (q, k, v):
        x.grad = None
    o, forward = profiled(lambda: dcpt.attention(executor, q, k, v))
    _, backward = profiled(lambda: o.backward(do))
    return {"forward": forward, "backward": backward}


def print_kernels(records: list[dict], top: int = 12) -> None:
    for r in records:
        for name, rows in r.get("kernels", {}).items():
            total = sum(row["us"] for row in rows)
            print(f"\n{r['strategy']} {name}: {total / 1e3:.3f} ms in {len(rows)} kernels or "
                  f"operations (one profiled pass)")
            for row in rows[:top]:
                print(f"  {row['us'] / 1e3:9.3f} ms {row['calls']:6d} calls  {row['name'][:90]}")


def relative_difference(got: torch.Tensor, want: torch.Tensor) -> float:
    scale = max(want.abs().max().item(), 1e-30)
    return (got.double() - want.double()).abs().max().item() / scale


def fmt(value, spec: str) -> str:
    return "-" if value is None else format(value, spec)


def print_table(records: list[dict], reference: str | None) -> None:
    print(f"| strategy | forward ms | backward ms | fwd+bwd ms | forward / best static | "
          f"backward / best static | fwd+bwd / best static | fwd TFLOP/s/GPU | bwd TFLOP/s/GPU | "
          f"local tokens min-max | max diff vs {reference or '-'} | simulated fwd / bwd ms | "
          f"simulated / measured fwd, bwd |")
    print("|---|---|---|---|---|---|---|---|---|---|---|---|---|")
    for r in records:
        if "error" in r:
            print(f"| {r['strategy']} | not planned: {r['error']} | | | | | | | | | | | |")
            continue
        print(f"| {r['strategy']} | {r['forward_s'] * 1e3:.3f} | {r['backward_s'] * 1e3:.3f} | "
              f"{r['total_s'] * 1e3:.3f} | {fmt(r.get('forward_vs_static'), '.2f')} | "
              f"{fmt(r.get('backward_vs_static'), '.2f')} | "
              f"{fmt(r.get('total_vs_static'), '.2f')} | "
              f"{fmt(r.get('forward_tflops_per_gpu'), '.4g')} | "
              f"{fmt(r.get('backward_tflops_per_gpu'), '.4g')} | "
              f"{r['local_tokens_min']}-{r['local_tokens_max']} | "
              f"{fmt(r.get('max_difference'), '.2e')} | "
              f"{r['simulated_forward_s'] * 1e3:.3f} / {r['simulated_backward_s'] * 1e3:.3f} | "
              f"{r['simulated_forward_s'] / r['forward_s']:.2f}, "
              f"{r['simulated_backward_s'] / r['backward_s']:.2f} |")


def main(argv=None) -> int:
    args = parse_args(argv)
    rank = int(os.environ.get("RANK", "0"))
    problem = missing_features(args)
    if problem is not None:  # every rank finds the same: all exit before the group forms
        if rank == 0:
            print(f"error: {problem}", file=sys.stderr)
        return 2
    import dcp
    import dcp.torch as dcpt

    local_rank = int(os.environ.get("LOCAL_RANK", "0"))
    if args.device == "cuda":
        if not torch.cuda.is_available():
            if rank == 0:
                print("error: --device cuda needs a GPU; for a smoke test use --device cpu "
                      "--backend gloo --kernels cpu", file=sys.stderr)
            return 2
        device = torch.device("cuda", local_rank)
        torch.cuda.set_device(device)
    else:
        device = torch.device("cpu")
        torch.set_num_threads(args.threads)
    timeout = datetime.timedelta(seconds=args.timeout)
    if args.backend == "nccl":
        dist.init_process_group("nccl", timeout=timeout, device_id=device)
    else:
        dist.init_process_group(args.backend, timeout=timeout)
    try:
        return run(args, device, dcp, dcpt)
    finally:
        dist.destroy_process_group()


def run(args, device: torch.device, dcp, dcpt) -> int:
    rank, world = dist.get_rank(), dist.get_world_size()
    if world % args.nodes:
        if rank == 0:
            print(f"error: {world} ranks do not split into {args.nodes} nodes", file=sys.stderr)
        return 2
    total = sum(args.seqlens)
    executor = dcpt.DCPExecutor(device=device, kernels=args.kernels, threads=args.threads,
                                timeout=args.timeout)
    inputs = global_inputs(args, device, total)
    pairs = dcp.workload(args.seqlens, args.mask, heads=args.heads, kv_heads=args.kv_heads,
                         head_dim=args.head_dim, dtype=args.dtype, block_size=args.block_size,
                         cluster=args.cluster, nodes=args.nodes,
                         devices_per_node=world // args.nodes)["pairs"]
    forward_flops = 4.0 * args.head_dim * args.heads * pairs

    records, reference, reference_name, worst = [], None, None, 0.0
    for strategy in args.strategies:
        record, results = run_strategy(strategy, executor, inputs, args, device, rank, world)
        records.append(record)
        if rank == 0 and "error" not in record:
            record["forward_tflops_per_gpu"] = forward_flops / record["forward_s"] / world / 1e12
            record["backward_tflops_per_gpu"] = (2.5 * forward_flops / record["backward_s"]
                                                 / world / 1e12)
            if results is not None:
                if reference is None:
                    reference, reference_name = results, strategy
                    record["max_difference"] = 0.0
                else:
                    differences = {name: relative_difference(results[name], reference[name])
                                   for name in results}
                    record["differences"] = differences
                    record["max_difference"] = max(differences.values())
                    worst = max(worst, record["max_difference"])
        if rank == 0:
            done = ("not planned: " + record["error"] if "error" in record else
                    f"forward {record['forward_s'] * 1e3:.3f} ms, backward "
                    f"{record['backward_s'] * 1e3:.3f} ms")
            print(f"{strategy}: {done}", flush=True)
    if rank != 0:
        return 0

    timed = [r for r in records if "error" not in r]
    for key in ("forward", "backward", "total"):
        static = [r[f"{key}_s"] for r in timed if r["strategy"] in STATIC]
        for r in timed:
            r[f"{key}_vs_static"] = r[f"{key}_s"] / min(static) if static else None
    print(f"\n{world} ranks ({args.nodes} node(s)), {args.backend}, kernels {args.kernels}; "
          f"{len(args.seqlens)} sequences, {total} tokens, mask {args.mask}; heads "
          f"{args.heads}/{args.kv_heads}, d = {args.head_dim}, {args.dtype}; slowest rank, median "
          f"of {args.repeats} after {args.warmup} warm-up\n")
    print_table(records, reference_name)
    print_kernels(records)
    if args.json:
        config = {k: v for k, v in vars(args).items() if k != "json"}
        config.update(world_size=world, pairs=pairs, torch=torch.__version__,
                      device_name=(torch.cuda.get_device_name(device) if device.type == "cuda"
                                   else "cpu"))
        with open(args.json, "w") as f:
            json.dump({"config": config, "records": records}, f, indent=1)
    tolerance = TOLERANCE[args.dtype]
    if worst > tolerance:
        print(f"error: a strategy's results differ from {reference_name}'s by {worst:.2e} of "
              f"their max |value| (tolerance {tolerance:g})", file=sys.stderr)
        return 1
    if not timed:
        print("error: no strategy could be planned", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
