# SPDX-License-Identifier: Apache-2.0
"""Runs a function on N processes joined by a gloo process group, and collects what each returns.

Processes start from a fork server (one fresh interpreter per test process that imports torch and
dcp.torch once; each rank is a fork of it with the caller's environment and working directory), so
the function must be importable: define it at module level in tests/python. Importing torch costs
seconds of CPU, which a spawned rank would pay again in every world. Every run is bounded in time;
a process that fails or hangs fails the run with its rank and traceback.
run_world_once runs a world whose results several tests read once for all pytest-xdist workers."""
from __future__ import annotations

import datetime
import fcntl
import multiprocessing as mp
import os
import pathlib
import pickle
import queue
import tempfile
import traceback


def _by_value(value):
    """Tensors as numpy arrays (float32 for 16-bit floats, exact): a queue then pickles them by
    value instead of passing shared-memory handles that die with the process."""
    import torch
    if isinstance(value, torch.Tensor):
        value = value.detach()
        if value.dtype in (torch.bfloat16, torch.float16):
            value = value.float()
        return value.numpy().copy()
    if isinstance(value, dict):
        return {k: _by_value(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return type(value)(_by_value(v) for v in value)
    return value


def _as_tensors(value):
    import numpy as np
    import torch
    if isinstance(value, np.ndarray):
        return torch.from_numpy(value)
    if isinstance(value, dict):
        return {k: _as_tensors(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return type(value)(_as_tensors(v) for v in value)
    return value


# Imported once by the fork server (a module that is not installed is left out): torch, dcp and
# the transformers models the tests build, which cost a rank about 4 s of CPU to import. They
# import triton (through torch._dynamo), whose own library functions are then compiled kernels:
# ranks that run Triton's interpreter start fresh instead (run_world's triton_interpreter).
_PRELOAD = ["torch", "torch.distributed", "dcp.torch", "transformers",
            "transformers.models.auto.modeling_auto", "dcp.torch.hf"] + [
    f"transformers.models.{family}.modeling_{family}"
    for family in ("llama", "gemma3", "qwen2", "mistral")]


_turns: str | None = None  # this rank's world's lock file for compile_in_turn


def compile_in_turn() -> None:
    """Makes this rank's torch.compile compilations take turns with its world's other ranks (one
    rank compiles at a time; the compiled graphs run together). Ranks compile the same graphs:
    taking turns, the first writes inductor's caches (FX graphs, C++ kernels) and the others load
    from them, so a world compiles each graph once rather than once per rank on shared cores.
    torch._dynamo.reset() forgets it: call it after."""
    from torch._dynamo.callback import callback_handler
    assert _turns is not None, "compile_in_turn runs in a rank of run_world"
    lock = open(_turns, "w")  # noqa: SIM115 - held for the rank's life
    callback_handler.register_start_callback(lambda _: fcntl.flock(lock, fcntl.LOCK_EX))
    callback_handler.register_end_callback(lambda _: fcntl.flock(lock, fcntl.LOCK_UN))


def _worker(fn, rank, size, init_file, results, timeout_s, args, environment, cwd):
    global _turns
    _turns = init_file + ".compile"
    # The fork server's environment and directory are those of the first run in this process;
    # each rank takes the caller's at this run, as a spawned process would.
    os.environ.clear()
    os.environ.update(environment)
    os.chdir(cwd)
    import torch
    import torch.distributed as dist
    torch.set_num_threads(1)
    try:
        dist.init_process_group("gloo", init_method=f"file://{init_file}", rank=rank,
                                world_size=size, timeout=datetime.timedelta(seconds=timeout_s))
        # gloo's full-mesh connect can return on one rank while a peer is still handshaking; a
        # rank that then raised and exited at once closed the socket under that peer's connect
        # ("Connection closed by peer"). The barrier holds every rank until all have connected.
        dist.barrier()
        value = fn(rank, size, *args)
        results.put((rank, True, _by_value(value)))
    except BaseException:  # noqa: BLE001 - reported to the parent
        results.put((rank, False, traceback.format_exc()))
    finally:
        if dist.is_initialized():
            dist.destroy_process_group()


def run_world(size: int, fn, *args, timeout: float = 240, group_timeout: float = 60,
              allow_failures: bool = False, triton_interpreter: bool = False):
    """[fn(rank, size, *args) for each rank], tensors returned as CPU tensors. Raises AssertionError
    naming the failed ranks, unless allow_failures, where a failed rank's entry is ('error',
    traceback) and a process that did not report is ('missing', exit code). With
    triton_interpreter, the ranks run Triton's interpreter: each starts in a new interpreter
    (spawned, not forked from the fork server) with TRITON_INTERPRET=1, which triton reads as it
    defines a kernel, its own library's included."""
    if triton_interpreter:
        ctx = mp.get_context("spawn")
    else:
        ctx = mp.get_context("forkserver")
        ctx.set_forkserver_preload(_PRELOAD)
    results = ctx.Queue()
    with tempfile.TemporaryDirectory() as tmp:
        init_file = os.path.join(tmp, "rendezvous")
        caller = (dict(os.environ), os.getcwd())
        if triton_interpreter:
            caller[0]["TRITON_INTERPRET"] = "1"
        procs = [ctx.Process(target=_worker, args=(fn, r, size, init_file, results, group_timeout,
                                                   args, *caller), daemon=True)
                 for r in range(size)]
        for p in procs:
            p.start()
        got: dict[int, tuple[bool, object]] = {}
        deadline = datetime.datetime.now() + datetime.timedelta(seconds=timeout)
        while len(got) < size:
            left = (deadline - datetime.datetime.now()).total_seconds()
            if left <= 0:
                break
            try:
                rank, ok, value = results.get(timeout=min(left, 1.0))
                got[rank] = (ok, value)
            except queue.Empty:
                if all(not p.is_alive() for p in procs) and results.empty():
                    break
        for p in procs:
            p.join(timeout=5)
            if p.is_alive():
                p.kill()
                p.join()
    out = []
    failures = []
    for r in range(size):
        if r not in got:
            failures.append(f"rank {r} did not report (exit code {procs[r].exitcode})")
            out.append(("missing", procs[r].exitcode))
        elif not got[r][0]:
            failures.append(f"rank {r} failed:\n{got[r][1]}")
            out.append(("error", got[r][1]))
        else:
            out.append(_as_tensors(got[r][1]))
    if failures and not allow_failures:
        raise AssertionError("\n".join(failures))
    return out


_shared: pathlib.Path | None = None  # where run_world_once keeps results; None: in this process


def share_results_in(directory: os.PathLike) -> None:
    """Makes run_world_once keep its results in `directory`, which every pytest-xdist worker of the
    session sees (conftest.py sets it)."""
    global _shared
    _shared = pathlib.Path(directory)
    _shared.mkdir(exist_ok=True)


def run_world_once(key: str, size: int, fn, *args, **kwargs):
    """run_world(size, fn, *args, **kwargs), run by one pytest-xdist worker for all: the first to
    ask runs it and stores the result under `key`, the others wait for it and read it (the same
    values: tensors are stored as the ranks sent them). A failed run stores nothing, so every
    worker that asks fails with its own run. The callers keep the result for their own process."""
    if _shared is None:
        return run_world(size, fn, *args, **kwargs)
    stored = _shared / f"{key}.pickle"
    with open(_shared / f"{key}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # released when the file closes
        if stored.exists():
            return _as_tensors(pickle.loads(stored.read_bytes()))
        ranks = run_world(size, fn, *args, **kwargs)
        stored.write_bytes(pickle.dumps(_by_value(ranks)))
        return ranks
