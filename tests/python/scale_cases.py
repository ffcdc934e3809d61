# SPDX-License-Identifier: Apache-2.0
"""Data parallelism around dcp, run on every rank of a gloo world: FSDP2 over the pool, DDP, a
DP x CP mesh, ranks without tokens, resume from a checkpoint (importable by the forked ranks)."""
from __future__ import annotations

import torch
import torch.distributed as dist

import dcp.torch as dcpt
from hf_cases import HF_TRAIN, text_dataset

# A batch of 30, 20 and 10 tokens on 4 ranks at block size 32: the plans of one mask and of
# Gemma 3's and Qwen2's attention kinds give rank 1 no tokens.
EMPTY_RANK = dict(lengths=[30, 20, 10, 30, 20, 10], tokens_per_batch=60, block_size=32, steps=2)


class SlicedText(torch.utils.data.Dataset):
    """Samples of the given lengths cut from the byte corpus, in order."""

    def __init__(self, lengths: list[int]):
        import text_corpus
        corpus = text_corpus.load_corpus()
        self.samples, at = [], 0
        for n in lengths:
            self.samples.append(torch.tensor(list(corpus[at:at + n]), dtype=torch.long))
            at += n

    def __len__(self) -> int:
        return len(self.samples)

    def __getitem__(self, i: int) -> torch.Tensor:
        return self.samples[i]


def _shard(model: torch.nn.Module, ranks: int) -> None:
    """FSDP2 over a 1-D mesh of every rank: each decoder layer, then the model."""
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import fully_shard
    mesh = init_device_mesh("cpu", (ranks,))
    for layer in model.model.layers:
        fully_shard(layer, mesh=mesh)
    fully_shard(model, mesh=mesh)


def _full_grads(model: torch.nn.Module) -> dict:
    from torch.distributed.tensor import DTensor
    out = {}
    for name, p in model.named_parameters():
        g = p.grad
        g = g.full_tensor() if isinstance(g, DTensor) else g
        out[name.removeprefix("module.")] = g.detach().clone()
    return out


def _global_indices(lb) -> list[int]:
    """The global batch's samples: every replica's, in replica order."""
    shares = [None] * dist.get_world_size()
    dist.all_gather_object(shares, (lb.replica, lb.batch_indices))
    return [i for r in range(lb.replicas) for i in dict(shares)[r]]


def build(family: str, mode: str, size: int):
    """The tiny model of `family` on dcp, wrapped for `mode`: 'fsdp' (FSDP2 over the pool), 'ddp'
    or 'mesh' (FSDP2 over the pool; the loader on a 2 x 2 (dp, cp) mesh)."""
    import hf_models
    model = hf_models.build_model(family, "dcp", seed=HF_TRAIN["seed"])
    model.train()
    if mode == "ddp":
        model = torch.nn.parallel.DistributedDataParallel(model)
    else:
        _shard(model, size)
    return model


def make_loader(model_config, mode: str, dataset, **overrides):
    import dcp.torch.hf as dcphf
    options = dict(tokens_per_batch=HF_TRAIN["tokens_per_batch"], dtype=torch.float32,
                   block_size=HF_TRAIN["block_size"], cluster="cpu-local", seed=HF_TRAIN["seed"],
                   **dcphf.plan_options(model_config))
    options.update(overrides)
    if mode == "mesh":
        from torch.distributed.device_mesh import init_device_mesh
        mesh = init_device_mesh("cpu", (2, dist.get_world_size() // 2), mesh_dim_names=("dp", "cp"))
        return dcpt.DCPDataloader(dataset, mesh=mesh, **options)
    return dcpt.DCPDataloader(dataset, **options)


def train_families(rank: int, size: int, families: list[str], mode: str, empty: bool) -> dict:
    """train_data_parallel of each family in one world: {family: its result}."""
    return {family: train_data_parallel(rank, size, family, mode, None, empty)
            for family in families}


def train_data_parallel(rank: int, size: int, family: str, mode: str, steps: int | None = None,
                        empty: bool = False) -> dict:
    """`steps` AdamW steps of the family's tiny model on dcp inside FSDP2 or DDP (mode, as
    build), gradients summed by dcp.torch.sum_gradients. With `empty`, on EMPTY_RANK's batches.
    Returns the global losses, each step's global batch, the first step's full gradients (rank
    0), each step's (replica, samples) of this rank and its local token counts."""
    import dcp.torch.hf as dcphf
    dcphf.register()
    steps = steps or (EMPTY_RANK["steps"] if empty else HF_TRAIN["steps"])
    model = build(family, mode, size)
    config = (model.module if mode == "ddp" else model).config
    if empty:
        # Attention alone (token_flops 0): priced with the rest of each layer, a static strategy
        # that spreads these few tokens over every rank is faster, and no rank is left empty.
        loader = make_loader(config, mode, SlicedText(EMPTY_RANK["lengths"]), shuffle=False,
                             tokens_per_batch=EMPTY_RANK["tokens_per_batch"],
                             block_size=EMPTY_RANK["block_size"], token_flops=0.0)
    else:
        loader = make_loader(config, mode, text_dataset(), epochs=2)
    dcpt.sum_gradients(model, loader)
    executor = dcpt.DCPExecutor(group=loader.group, threads=1)
    optimizer = torch.optim.AdamW(model.parameters(), lr=HF_TRAIN["lr"])
    out = dict(losses=[], batches=[], shares=[], local_tokens=[], grads={})
    for step, (lb, plan) in enumerate(loader):
        if step == steps:
            break
        executor.prepare(plan)
        result = model(**dcphf.model_inputs(lb, executor))
        optimizer.zero_grad()
        result.loss.backward()
        if step == 0:
            grads = _full_grads(model)
            out["grads"] = grads if rank == 0 else {}
        optimizer.step()
        total = result.loss.detach().clone()
        dist.all_reduce(total)
        out["losses"].append(total.item())
        out["batches"].append(_global_indices(lb))
        out["shares"].append((lb.replica, lb.batch_indices))
        out["local_tokens"].append(lb.input_ids.numel())
    return out


def epoch_shares(rank: int, size: int, dataset_lengths: list[int], tokens_per_batch: int) -> dict:
    """One epoch of a loader on a 2 x (size / 2) mesh: this rank's (replica, step, samples, plan
    bytes, simulated steps of the replicas) of every global batch, and the samples left out."""
    from torch.distributed.device_mesh import init_device_mesh

    from dist_cases import TokenDataset
    mesh = init_device_mesh("cpu", (2, size // 2), mesh_dim_names=("dp", "cp"))
    loader = dcpt.DCPDataloader(TokenDataset(dataset_lengths), mesh=mesh,
                                tokens_per_batch=tokens_per_batch, heads=4, kv_heads=2,
                                head_dim=16, dtype=torch.float32, block_size=16,
                                cluster="cpu-local")
    out = []
    for lb, plan in loader:
        out.append(dict(replica=lb.replica, step=lb.step, indices=lb.batch_indices,
                        plan=plan.to_bytes(), replica_steps=lb.replica_steps,
                        tokens=sum(lb.seqlens), loss_tokens=lb.loss_tokens))
    return dict(batches=out, left_out=loader.left_out)


def resume_run(rank: int, size: int, directory: str, phase: str) -> list[float]:
    """A tiny Llama under FSDP2 with its loader on a 2 x 2 mesh, as train_data_parallel's 'mesh'
    mode. phase 'first': 3 steps, then model, optimizer and loader saved with
    torch.distributed.checkpoint to `directory`; 'rest': all three loaded from there, then 3
    steps. Returns the global losses."""
    import torch.distributed.checkpoint as dcp_checkpoint
    from torch.distributed.checkpoint.state_dict import get_state_dict, set_state_dict

    import dcp.torch.hf as dcphf
    dcphf.register()
    model = build("llama", "mesh", size)
    loader = make_loader(model.config, "mesh", text_dataset(), epochs=2)
    dcpt.sum_gradients(model, loader)
    optimizer = torch.optim.AdamW(model.parameters(), lr=HF_TRAIN["lr"])
    if phase == "rest":
        model_state, optim_state = get_state_dict(model, optimizer)
        state = {"model": model_state, "optim": optim_state, "loader": loader}
        dcp_checkpoint.load(state, checkpoint_id=directory)
        set_state_dict(model, optimizer, model_state_dict=state["model"],
                       optim_state_dict=state["optim"])
    executor = dcpt.DCPExecutor(group=loader.group, threads=1)
    losses = []
    steps = 3
    iterator = iter(loader)
    for _ in range(steps):
        lb, plan = next(iterator)
        executor.prepare(plan)
        result = model(**dcphf.model_inputs(lb, executor))
        optimizer.zero_grad()
        result.loss.backward()
        optimizer.step()
        total = result.loss.detach().clone()
        dist.all_reduce(total)
        losses.append(total.item())
    iterator.close()
    if phase == "first":
        model_state, optim_state = get_state_dict(model, optimizer)
        dcp_checkpoint.save({"model": model_state, "optim": optim_state, "loader": loader},
                            checkpoint_id=directory)
    return losses


def shard_over_dp_only(rank: int, size: int) -> str:
    """FSDP2 over the dp dim of a 2 x 2 mesh while the loader spreads the global batch over all
    four ranks: sum_gradients must refuse it. Returns the error's message."""
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import fully_shard

    import dcp.torch.hf as dcphf
    import hf_models
    dcphf.register()
    mesh = init_device_mesh("cpu", (2, 2), mesh_dim_names=("dp", "cp"))
    model = hf_models.build_model("llama", "dcp", seed=0)
    fully_shard(model, mesh=mesh["dp"])
    loader = make_loader(model.config, "mesh", text_dataset())
    try:
        dcpt.sum_gradients(model, loader)
    except ValueError as error:
        return str(error)
    return "sum_gradients took FSDP2 over the dp dim"


# Zigzag rings pass kv through every rank, so the survivors have transfers with the rank that dies
# (dcp's own plan may pack sequences whole, with nothing to exchange).
DYING_PLANS = dict(strategy="zigzag")


def dying_rank(rank: int, size: int, directory: str) -> float:
    """FSDP2 over the pool: one step, a checkpoint, then rank 1 dies (os._exit) in the middle of
    the next step's forward pass, inside its second attention call. Returns on no rank: the others
    raise; their message carries the seconds they took."""
    import os
    import time

    import torch.distributed.checkpoint as dcp_checkpoint
    from torch.distributed.checkpoint.state_dict import get_state_dict

    import dcp.torch.hf as dcphf
    dcphf.register()
    model = build("llama", "fsdp", size)
    loader = make_loader(model.config, "fsdp", text_dataset(), **DYING_PLANS)
    dcpt.sum_gradients(model, loader)
    optimizer = torch.optim.AdamW(model.parameters(), lr=HF_TRAIN["lr"])
    executor = dcpt.DCPExecutor(threads=1)
    iterator = iter(loader)
    for step in range(2):
        lb, plan = next(iterator)
        executor.prepare(plan)
        if step == 1 and rank == 1:
            forward, calls = executor.forward, []

            def dying_forward(*args, **kwargs):
                calls.append(1)
                if len(calls) == 2:
                    os._exit(3)
                return forward(*args, **kwargs)
            executor.forward = dying_forward
        start = time.monotonic()
        try:
            result = model(**dcphf.model_inputs(lb, executor))
            result.loss.backward()
        except RuntimeError as error:
            raise RuntimeError(f"after {time.monotonic() - start:.2f} s: {error}") from None
        optimizer.step()
        optimizer.zero_grad()
        if step == 0:
            model_state, optim_state = get_state_dict(model, optimizer)
            dcp_checkpoint.save({"model": model_state, "optim": optim_state, "loader": loader},
                                checkpoint_id=directory)
    return 0.0


def load_after_a_death(rank: int, size: int, directory: str) -> dict:
    """A new process group loads the checkpoint dying_rank wrote before rank 1 died: the loader's
    position and the model are whole."""
    import torch.distributed.checkpoint as dcp_checkpoint
    from torch.distributed.checkpoint.state_dict import get_state_dict

    import dcp.torch.hf as dcphf
    dcphf.register()
    model = build("llama", "fsdp", size)
    loader = make_loader(model.config, "fsdp", text_dataset(), **DYING_PLANS)
    optimizer = torch.optim.AdamW(model.parameters(), lr=HF_TRAIN["lr"])
    model_state, optim_state = get_state_dict(model, optimizer)
    state = {"model": model_state, "optim": optim_state, "loader": loader}
    dcp_checkpoint.load(state, checkpoint_id=directory)
    return loader.state_dict()
