# SPDX-License-Identifier: Apache-2.0
"""dcp.calibrate: measures a cluster's cost-model constants between the ranks of a
torch.distributed group and writes the cluster file that dcp.plan(cluster=FILE) and
`dcp plan --cluster FILE` read.

    torchrun --nnodes 2 --nproc-per-node 8 ... -m dcp.calibrate --out my.cluster
    text = dcp.calibrate.calibrate()   # in a job that has initialized torch.distributed
    python -m dcp.calibrate --device-only --base h100-dgx --out my-gpu.cluster   # one GPU, no links

Links are timed through the torch executor's own transport (dcp.torch.transport: gloo on the
CPU, NCCL on CUDA); kernels are the ones the executor runs (the C++ cpu kernels, or the Triton
kernels on CUDA); the fit is the C++ one (dcp/runtime/cluster_calibration.h), as for
`dcp calibrate --comm mpi`. docs/cost_model.md describes every measurement."""
from __future__ import annotations

import argparse
import datetime
import os
import statistics
import sys
import tempfile
import time
from typing import Callable

import torch
import torch.distributed as dist

from dcp import _core
from dcp.torch.group import resolve_group
from dcp.torch.transport import TorchTransport

__all__ = ["calibrate", "calibrate_device", "main"]


class _Sync:
    """barrier() and max_over_ranks(value) over the group, for dcp._core's timing loops."""

    def __init__(self, group, device: torch.device):
        self.group, self.device = group, device

    def barrier(self) -> None:
        if self.device.type == "cuda":
            dist.barrier(group=self.group, device_ids=[self.device.index])
        else:
            dist.barrier(group=self.group)

    def max_over_ranks(self, value: float) -> float:
        t = torch.tensor([value], dtype=torch.float64, device=self.device)
        dist.all_reduce(t, op=dist.ReduceOp.MAX, group=self.group)
        return float(t.item())


def _shape(group, rank: int, size: int, devices_per_node: int | None) -> tuple[int, int]:
    """(nodes, devices per node): from devices_per_node, else from every rank's LOCAL_WORLD_SIZE
    and LOCAL_RANK (torchrun's). Every rank computes the same shape or raises the same error."""
    if devices_per_node is not None:
        if devices_per_node < 1 or size % devices_per_node:
            raise ValueError(f"world size {size} is not a multiple of devices_per_node "
                             f"{devices_per_node}")
        nodes = size // devices_per_node
    else:
        def env(name: str) -> int:
            try:
                return int(os.environ.get(name, "-1"))
            except ValueError:
                return -1
        placements = [None] * size
        dist.all_gather_object(placements, (env("LOCAL_WORLD_SIZE"), env("LOCAL_RANK")),
                               group=group)
        nodes, devices_per_node = _core.shape_from_placements(placements, "LOCAL_WORLD_SIZE")
    _core.check_calibration_world(nodes, devices_per_node, size)
    return nodes, devices_per_node


def _unwritable(out: str | None) -> bool:
    """Whether `out` is given but is not a file this process can write in an existing directory."""
    if out is None:
        return False
    parent = os.path.dirname(os.path.abspath(out))
    return os.path.isdir(out) or not os.path.isdir(parent) or not os.access(parent, os.W_OK)


def _as_device(device: torch.device | str) -> torch.device:
    """`device` as a torch.device, a CUDA device without an index being the current one."""
    device = torch.device(device)
    if device.type == "cuda" and device.index is None:
        device = torch.device("cuda", torch.cuda.current_device())
    return device


def _check_out(out: str | None, group, rank: int, device: torch.device) -> None:
    """Raises ValueError on every rank if rank 0 cannot write `out` (a file in an existing
    directory), before anything is measured."""
    bad = float(rank == 0 and _unwritable(out))
    if _Sync(group, device).max_over_ranks(bad) > 0:
        raise ValueError(f"out {out!r}: rank 0 cannot write it (not a file in an existing, "
                         "writable directory)")


def _write_atomically(path: str, text: str) -> None:
    """Writes a temporary file beside `path`, then renames it: readers see all or nothing."""
    directory = os.path.dirname(os.path.abspath(path))
    fd, temporary = tempfile.mkstemp(prefix=".dcp-calibrate-", dir=directory)
    try:
        with os.fdopen(fd, "w") as f:
            f.write(text)
        os.chmod(temporary, 0o644)
        os.replace(temporary, path)
    except BaseException:
        if os.path.exists(temporary):
            os.unlink(temporary)
        raise


# The device calls' defaults by device: a GPU needs many heads per call to fill its
# multiprocessors (the executor's launches do), and a larger tile; the cpu kernels run one head.
_DEVICE_DEFAULTS = {"cuda": {"tile_tokens": 1024, "heads": 128},
                    "cpu": {"tile_tokens": 512, "heads": 1}}


def _device_options(device: torch.device, tile_tokens: int | None,
                    heads: int | None) -> tuple[int, int]:
    if device.type not in _DEVICE_DEFAULTS:
        raise ValueError(f"device {device}: dcp's kernels run on cuda or cpu")
    defaults = _DEVICE_DEFAULTS[device.type]
    return (int(defaults["tile_tokens"] if tile_tokens is None else tile_tokens),
            int(defaults["heads"] if heads is None else heads))


def _time_device(calls: list[dict], device: torch.device, sync, rank: int, repeats: int,
                 tile_tokens: int, copy_bytes: int, timing_seconds: float, heads: int):
    """This rank's seconds per call of `calls` ([call][repeat]) and the kernels' sub-tiles: the
    Triton kernels on CUDA, the C++ cpu kernels (one thread, all ranks of `sync` at once) else."""
    if device.type == "cuda":
        from dcp.torch.kernels import kernel_timing  # imports triton only on CUDA
        return (kernel_timing.time_calls(calls, device, repeats, timing_seconds),
                kernel_timing.subtiles())
    return (_core.time_cpu_device(sync, rank, repeats, tile_tokens, copy_bytes, timing_seconds,
                                  heads),
            _core.cpu_subtiles())


class _Alone:
    """The rank sync of a process timing its device alone."""

    def barrier(self) -> None:
        pass

    def max_over_ranks(self, value: float) -> float:
        return value


def _device_report(base: str = "h100-dgx", *, repeats: int = 5, tile_tokens: int | None = None,
                   heads: int | None = None,
                   copy_bytes: int = 64 << 20, timing_seconds: float = 0.05,
                   name: str = "calibrated", device: torch.device | str | None = None,
                   out: str | None = None,
                   progress: Callable[[str], None] | None = None) -> dict:
    """calibrate_device()'s work: the fit's dict (text, measurements, notes)."""
    device = _as_device(device if device is not None else
                        "cuda" if torch.cuda.is_available() else "cpu")
    _core.cluster_text(base)  # raises naming a base that is neither a preset nor a file
    tile_tokens, heads = _device_options(device, tile_tokens, heads)  # refuses other devices
    calls = _core.device_calls(int(repeats), tile_tokens, int(copy_bytes), float(timing_seconds),
                               heads)  # checks them
    if _unwritable(out):
        raise ValueError(f"out {out!r}: cannot write it (not a file in an existing, "
                         "writable directory)")
    if progress is not None:
        progress(f"timing {len(calls) - 1} attention calls and a memcpy on {device}")
    timings, subtiles = _time_device(calls, device, _Alone(), 0, repeats, tile_tokens,
                                     copy_bytes, timing_seconds, heads)
    report = _core.fit_device_onto(base, [timings], repeats, tile_tokens, copy_bytes,
                                   timing_seconds, subtiles, name, heads)
    if out is not None:
        _write_atomically(out, report["text"])
    return report


def calibrate_device(base: str = "h100-dgx", **options) -> str:
    """Times this process's device alone (the Triton kernels on CUDA, the cpu kernels on the CPU)
    and returns the cluster file of `base` (a preset name or a cluster file) with the fitted
    device constants; nothing else is measured, so the shape, links and network interfaces stay
    `base`'s. Needs no torch.distributed: for one GPU, or a cluster whose links a preset already
    describes. Options: repeats=5, tile_tokens and heads (of the timed tiles; on CUDA 1024 and
    128, on the CPU 512 and 1), copy_bytes=64 MiB, timing_seconds=0.05,
    name='calibrated', device (default: the current CUDA device, else the CPU), out (written
    atomically), progress. Raises ValueError naming a bad base, option or out."""
    return _device_report(base, **options)["text"]


def _link_operations(transport: TorchTransport, rank: int, nodes: int, per_node: int,
                     sizes: list[int], peers: int, issue: list[list[float]],
                     cuda: bool) -> list:
    """The timed operations of the links, in the order of dcp::runtime::measure_links: messages
    between devices 0 and 1, then 0 and the first device of node 1 (each a ping-pong of one-peer
    groups), device 0's groups with devices 1..k, every device of node 0 with its counterpart on
    node 1 at once. None where this rank takes no part."""
    small = _core.SMALL_MESSAGE_BYTES
    finish = torch.cuda.synchronize if cuda else (lambda: None)

    def ping_pong(first: int, second: int, nbytes: int):
        if rank not in (first, second):
            return None
        peer = second if rank == first else first
        send, recv = [(True, peer, 0, 0, nbytes)], [(False, peer, 1, 0, nbytes)]
        order = (send, recv) if rank == first else (recv, send)

        def op():
            for ops in order:
                transport.wait(transport.start(ops))
            finish()
        return op

    def group(k: int):
        if rank == 0:
            ops = [op for p in range(1, k + 1)
                   for op in ((True, p, 2, small * p, small), (False, p, 3, small * p, small))]
            times = issue[k - 1]

            def hub():
                start = time.perf_counter()
                g = transport.start(ops)
                times.append(time.perf_counter() - start)
                transport.wait(g)
                finish()
            return hub
        if rank > k:
            return None
        ops = [(False, 0, 3, 0, small), (True, 0, 2, 0, small)]

        def peer():
            transport.wait(transport.start(ops))
            finish()
        return peer

    operations = []
    messages = [small] + [s for s in sizes if s > small]
    if per_node > 1:
        operations += [ping_pong(0, 1, s) for s in messages]
    if nodes > 1:
        operations += [ping_pong(0, per_node, s) for s in messages]
    operations += [group(k) for k in range(1, peers + 1)]
    if nodes > 1:
        local = rank % per_node
        operations.append(ping_pong(local, per_node + local, sizes[-1])
                          if rank < 2 * per_node else None)
    return operations


def _link_measurements(all_ranks: list, nodes: int, per_node: int, sizes: list[int], peers: int,
                       issue: list[list[float]]) -> dict:
    """fit_cluster's link arguments from every rank's [operation][repeat] seconds: one way is half
    a round trip; each figure is the fastest repeat (noise on a shared machine only adds time)."""
    small = _core.SMALL_MESSAGE_BYTES
    messages = [small] + [s for s in sizes if s > small]
    mine = iter(all_ranks[0])
    m = {"intra_node": [], "inter_node": [], "groups": [], "aggregate": (0, 0.0)}
    if per_node > 1:
        m["intra_node"] = [(s, min(next(mine)) / 2) for s in messages]
    if nodes > 1:
        m["inter_node"] = [(s, min(next(mine)) / 2) for s in messages]
    m["groups"] = [(k, statistics.median(issue[k - 1]), min(next(mine)))
                   for k in range(1, peers + 1)]
    if nodes > 1:
        index = len(all_ranks[0]) - 1
        slowest = [max(all_ranks[r][index][i] for r in range(per_node))
                   for i in range(len(all_ranks[0][index]))]
        m["aggregate"] = (sizes[-1], min(slowest) / 2)
    return m


def _report(group=None, *, devices_per_node: int | None = None, repeats: int = 5,
            min_bytes: int = 4096, max_bytes: int = 64 << 20, group_peers: int = 8,
            tile_tokens: int | None = None, heads: int | None = None,
            copy_bytes: int = 64 << 20, timing_seconds: float = 0.05,
            name: str = "calibrated", device: torch.device | str | None = None,
            out: str | None = None, progress: Callable[[str], None] | None = None) -> dict:
    """calibrate()'s work: the fit's dict (text, measurements, notes) on every rank."""
    group, rank, size = resolve_group(group, "dcp.calibrate")
    if group is None:
        raise RuntimeError("dcp.calibrate needs torch.distributed initialized (torchrun) with at "
                           "least 2 ranks")
    device = _as_device(device if device is not None else
                        "cuda" if dist.get_backend(group) == "nccl" else "cpu")
    nodes, per_node = _shape(group, rank, size, devices_per_node)
    sizes = _core.sweep_sizes(int(min_bytes), int(max_bytes))
    tile_tokens, heads = _device_options(device, tile_tokens, heads)
    calls = _core.device_calls(int(repeats), tile_tokens, int(copy_bytes), float(timing_seconds),
                               heads)  # checks them
    if not 1 <= group_peers <= 1024:
        raise ValueError(f"group_peers {group_peers} is not in [1, 1024]")
    _check_out(out, group, rank, device)
    say = progress if (progress is not None and rank == 0) else (lambda line: None)
    sync = _Sync(group, device)
    where = f" on {size} ranks ({nodes} x {per_node})"

    say(f"timing {len(calls) - 1} attention calls and a memcpy{where} at once")
    device_timings, subtiles = _time_device(calls, device, sync, rank, repeats, tile_tokens,
                                            copy_bytes, timing_seconds, heads)

    say(f"timing messages of {_core.SMALL_MESSAGE_BYTES} B and {sizes[0]} .. {sizes[-1]} B and "
        f"groups of transfers{where}")
    peers = min(group_peers, size - 1)
    transport = TorchTransport(group, rank, size, datetime.timedelta(minutes=10))
    small = _core.SMALL_MESSAGE_BYTES
    transport.prepare(device)
    transport.set_buffers([torch.ones(sizes[-1], dtype=torch.uint8, device=device),
                           torch.zeros(sizes[-1], dtype=torch.uint8, device=device),
                           torch.ones(small * size, dtype=torch.uint8, device=device),
                           torch.zeros(small * size, dtype=torch.uint8, device=device)])
    issue: list[list[float]] = [[] for _ in range(peers)]
    operations = _link_operations(transport, rank, nodes, per_node, sizes, peers, issue,
                                  device.type == "cuda")
    links = _core.time_operations(sync, operations, repeats, timing_seconds)
    everything = [None] * size
    dist.all_gather_object(everything, (links, device_timings), group=group)
    transport.set_buffers([])
    # Rank 0 fits and writes; every rank then gets the report, or raises what rank 0 raised.
    outcome = [None]
    if rank == 0:
        try:
            measured = _link_measurements([e[0] for e in everything], nodes, per_node, sizes,
                                          peers, issue)
            report = _core.fit_cluster(
                nodes, per_node, measured["intra_node"], measured["inter_node"],
                measured["groups"], measured["aggregate"], [e[1] for e in everything], repeats,
                tile_tokens, copy_bytes, timing_seconds, subtiles, name, heads)
            if out is not None:
                _write_atomically(out, report["text"])
            outcome = [("ok", report)]
        except (ValueError, OSError, RuntimeError) as error:
            outcome = [("error", type(error).__name__, str(error))]
    dist.broadcast_object_list(outcome, src=dist.get_global_rank(group, 0), group=group)
    if outcome[0][0] == "error":
        _, kind, message = outcome[0]
        raise {"ValueError": ValueError, "OSError": OSError}.get(kind, RuntimeError)(
            f"rank 0: {message}" if rank else message)
    return outcome[0][1]


def calibrate(group=None, **options) -> str:
    """Calibrates the cluster the ranks of `group` (default: the default group) form and returns
    its cluster file's text on every rank; rank 0 writes it to `out` if given (atomically).
    Every rank must call it. Options (defaults as `dcp calibrate --comm mpi`):
    devices_per_node (default: from torchrun's LOCAL_WORLD_SIZE), repeats=5, min_bytes=4096,
    max_bytes=64 MiB (the size sweep, x4 steps), group_peers=8, tile_tokens and heads (on CUDA
    1024 and 128, on the CPU 512 and 1),
    copy_bytes=64 MiB, timing_seconds=0.05 (each timing's loop per repeat), name='calibrated',
    device (default: CUDA with NCCL, else the CPU), out, progress (called on rank 0 with a line
    before each measurement). Raises ValueError naming the value, on every rank alike, for a
    world size that is not a multiple of devices_per_node, an `out` rank 0 cannot write or an
    option out of range."""
    return _report(group, **options)["text"]


def _table(report: dict, out: str | None) -> str:
    lines = [f"{'measurement':<52} {'seconds':>12}  {'constant':<24} {'value':>12}"]
    for name, seconds, key, value, unit in report["measurements"]:
        lines.append(f"{name:<52} {seconds:12.4e}  {key:<24} {value:12.4g} {unit}".rstrip())
    lines += [f"note: {note}" for note in report["notes"]]
    lines.append("")
    lines.append("# cluster file" + (f" (written to {out})" if out else ""))
    return "\n".join(lines) + "\n" + report["text"]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m dcp.calibrate",
        description="Measures the cost model's constants between the ranks of this torchrun job "
                    "(links by size and class, launch set-up, NICs per node, the executor's "
                    "kernels) and prints the cluster file (rank 0; --out also writes it).")
    parser.add_argument("--out", "-o", help="write the cluster file here (rank 0, atomically)")
    parser.add_argument("--devices-per-node", type=int,
                        help="ranks per node [LOCAL_WORLD_SIZE]")
    parser.add_argument("--backend", choices=["gloo", "nccl"],
                        help="torch.distributed backend [nccl with CUDA, else gloo]")
    parser.add_argument("--repeats", type=int, default=5,
                        help="repeats of each timing: links keep the fastest, kernels the median "
                             "[5]")
    parser.add_argument("--timing-seconds", type=float, default=0.05,
                        help="each timing loops at least this long per repeat [0.05]")
    parser.add_argument("--min-bytes", type=int, default=4096,
                        help="smallest message of the size sweep [4096]")
    parser.add_argument("--max-bytes", type=int, default=64 << 20,
                        help="largest message of the size sweep (x4 steps) [67108864]")
    parser.add_argument("--group-peers", type=int, default=8,
                        help="groups of 1..K peers for the launch set-up [8]")
    parser.add_argument("--tile-tokens", type=int,
                        help="q tokens of the big attention tiles [1024 on CUDA, 512 on the CPU]")
    parser.add_argument("--heads", type=int,
                        help="heads every timed attention call computes at once, enough to fill "
                             "a GPU [128 on CUDA, 1 on the CPU, which takes only 1]")
    parser.add_argument("--copy-bytes", type=int, default=64 << 20,
                        help="bytes each rank copies for the memory bandwidth [67108864]")
    parser.add_argument("--name", default="calibrated", help="the cluster's name [calibrated]")
    parser.add_argument("--device-only", action="store_true",
                        help="time this process's device alone, without torchrun, and keep the "
                             "shape and links of --base")
    parser.add_argument("--base", default="h100-dgx",
                        help="--device-only: the preset or cluster file whose links the file "
                             "keeps [h100-dgx]")
    parser.add_argument("--timeout", type=float, default=120,
                        help="seconds a rank waits for the others [120]")
    args = parser.parse_args(argv)
    if args.device_only:
        try:
            report = _device_report(args.base, repeats=args.repeats, tile_tokens=args.tile_tokens,
                                    heads=args.heads,
                                    copy_bytes=args.copy_bytes,
                                    timing_seconds=args.timing_seconds, name=args.name,
                                    out=args.out, progress=lambda line: print(
                                        f"dcp.calibrate: {line}", file=sys.stderr))
        except (ValueError, OSError) as error:
            print(f"dcp.calibrate: error: {error}", file=sys.stderr)
            return 2
        sys.stdout.write(_table(report, args.out))
        return 0
    if not dist.is_initialized() and "RANK" not in os.environ:
        print("dcp.calibrate: error: run it under torchrun (RANK, WORLD_SIZE and the rendezvous "
              "are not set), e.g. torchrun --nproc-per-node 8 -m dcp.calibrate", file=sys.stderr)
        return 2
    backend = args.backend or ("nccl" if torch.cuda.is_available() else "gloo")
    if backend == "nccl":
        torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", "0")))
    initialized_here = not dist.is_initialized()
    if initialized_here:
        dist.init_process_group(backend, timeout=datetime.timedelta(seconds=args.timeout))
        # Every rank connected before any may refuse its input and exit: gloo's connect can return
        # on one rank while a peer still handshakes with it.
        device = torch.device("cuda", torch.cuda.current_device()) if backend == "nccl" \
            else torch.device("cpu")
        _Sync(None, device).barrier()
    rank = dist.get_rank()
    try:
        report = _report(devices_per_node=args.devices_per_node, repeats=args.repeats,
                         min_bytes=args.min_bytes, max_bytes=args.max_bytes,
                         group_peers=args.group_peers, tile_tokens=args.tile_tokens,
                         heads=args.heads,
                         copy_bytes=args.copy_bytes, timing_seconds=args.timing_seconds,
                         name=args.name, out=args.out,
                         progress=lambda line: print(f"dcp.calibrate: {line}", file=sys.stderr))
    except (ValueError, OSError) as error:
        print(f"dcp.calibrate: error: {error}", file=sys.stderr)
        return 2
    finally:
        if initialized_here:
            dist.destroy_process_group()
    if rank == 0:
        sys.stdout.write(_table(report, args.out))
    return 0


if __name__ == "__main__":
    sys.exit(main())
