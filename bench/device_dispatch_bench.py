# SPDX-License-Identifier: Apache-2.0
"""The host-side cost of the GPU path's dispatch: one pass of a real plan through the C++
executor and the Python device seam, with kernels and transfers that do nothing.

    python3 bench/device_dispatch_bench.py [--nodes 4] [--devices-per-node 8] [--mask causal]
        [--seqlens 65536,16384,...] [--cluster a100-p4de] [--strategy dcp-pure]

On CUDA every run of copies and every other Program instruction becomes one Python call of the
Triton device (a kernel launch)
and every Launch and Wait one call of the transport. This measures what that costs the host when
the calls themselves are free: the floor of a pass's host time, which the GPU must hide behind its
kernels (or a CUDA graph would remove). Every rank's Programs of one 131072-token batch are run in
turn in this process; prints a Markdown row per pass for docs/benchmarks.md."""
from __future__ import annotations

import argparse
import statistics
import time

import torch

import dcp
from dcp import _core

# A LongDataCollections-like mix: one long document and many short ones, 131072 tokens.
SEQLENS = [65536, 16384, 14013, 9009, 8314, 6000, 4096, 3000, 2048, 468, 1024, 1024, 100, 56]


class NullTransport:
    """Starts and waits for nothing; counts the calls."""

    def __init__(self):
        self.calls = 0

    def start(self, ops):
        self.calls += 1
        return 0

    def wait(self, group):
        self.calls += 1

    def barrier(self):
        pass

    def abort(self, reason):
        pass


class NullDevice:
    """The Triton device's interface with no kernels; counts the calls."""

    def __init__(self):
        self.calls = 0

    def prepare(self, forward, backward):
        pass

    def begin(self, pass_index, scale):
        pass

    def end(self):
        pass

    def _count(self, *args):
        self.calls += 1

    copy_run = attention = memory_run = convert_partials = _count


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", type=int, default=4)
    parser.add_argument("--devices-per-node", type=int, default=8)
    parser.add_argument("--mask", default="causal")
    parser.add_argument("--strategy", default="dcp-pure")
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--seqlens", default=",".join(map(str, SEQLENS)),
                        help="sequence lengths of the batch [an ldc-like 131072-token mix]")
    parser.add_argument("--cluster", default="a100-p4de", help="the planner's cluster model")
    args = parser.parse_args()
    seqlens = [int(n) for n in args.seqlens.split(",") if n]

    plan = dcp.plan(seqlens, args.mask, heads=8, kv_heads=2, head_dim=128, dtype="bf16",
                    cluster=args.cluster, nodes=args.nodes,
                    devices_per_node=args.devices_per_node, strategy=args.strategy)
    world = plan.world_size
    rows = {0: [], 1: []}  # per pass: (seconds, device calls, transport calls) per rank
    for rank in range(world):
        transport, device = NullTransport(), NullDevice()
        executor = _core.Executor(transport, rank, world, 1, device)
        executor.prepare(plan)
        n = executor.local_tokens
        q = torch.empty(n, 8, 128, dtype=torch.bfloat16)
        kv = torch.empty(n, 2, 128, dtype=torch.bfloat16)
        lse = torch.empty(8, n, dtype=torch.float32)
        dq, dk, dv = torch.empty_like(q), torch.empty_like(kv), torch.empty_like(kv)
        kept = torch.empty(executor.kept_bytes, dtype=torch.uint8)
        for pass_index in (0, 1):
            times = []
            for _ in range(args.repeats):
                device.calls = transport.calls = 0
                start = time.perf_counter()
                if pass_index == 0:
                    executor.forward(q, kv, kv, q, lse, kept, 0.0)
                else:
                    executor.backward(q, kv, kv, q, lse, q, dq, dk, dv, kept, 0.0)
                times.append(time.perf_counter() - start)
            rows[pass_index].append((statistics.median(times), device.calls, transport.calls))

    print(f"{len(seqlens)} sequences, {sum(seqlens)} tokens, {args.mask}, {args.strategy}, "
          f"{args.nodes} x {args.devices_per_node}; median of {args.repeats} per rank\n")
    print("| pass | device calls per rank (median, max) | transport calls (median, max) "
          "| host ms per pass (median, max) | µs per call |")
    print("|---|---|---|---|---|")
    for pass_index, name in ((0, "forward"), (1, "backward")):
        seconds = [r[0] for r in rows[pass_index]]
        device_calls = [r[1] for r in rows[pass_index]]
        transport_calls = [r[2] for r in rows[pass_index]]
        per_call = statistics.median(s / max(1, d + t) for s, d, t in rows[pass_index]) * 1e6
        print(f"| {name} | {statistics.median(device_calls):.0f}, {max(device_calls)} "
              f"| {statistics.median(transport_calls):.0f}, {max(transport_calls)} "
              f"| {statistics.median(seconds) * 1e3:.2f}, {max(seconds) * 1e3:.2f} "
              f"| {per_call:.1f} |")


if __name__ == "__main__":
    main()
