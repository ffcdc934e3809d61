# SPDX-License-Identifier: Apache-2.0
"""FSDP2 and DDP around a model trained on dcp: gradients summed, not averaged.

dcp's loss on a rank is that rank's token losses over the loss tokens of the whole global batch
(LocalBatch.loss_tokens, every replica's), so the ranks' losses add up to the global mean and the
right gradient is the sum of the ranks' gradients. FSDP2 and DDP divide the reduced gradients by
their group's size; sum_gradients undoes that once, where they are set up."""
from __future__ import annotations

import torch
import torch.distributed as dist


def _sum_hook(group, bucket):
    """DDP communication hook: the bucket summed over `group`, not averaged."""
    work = dist.all_reduce(bucket.buffer(), group=group, async_op=True)
    return work.get_future().then(lambda done: done.value()[0])


def _pool_size(pool) -> int:
    if pool is None:
        if not (dist.is_available() and dist.is_initialized()):
            raise RuntimeError("sum_gradients needs torch.distributed initialized")
        return dist.get_world_size()
    if isinstance(pool, int):
        return pool
    size = getattr(pool, "world_size", None)
    replicas = getattr(pool, "replicas", None)
    if size is not None and replicas is not None:  # a DCPDataloader
        return int(size) * int(replicas)
    if hasattr(pool, "size") and callable(pool.size):  # a DeviceMesh or a ProcessGroup
        return int(pool.size())
    raise TypeError(f"pool is a {type(pool).__name__}: give a DCPDataloader, a DeviceMesh, a "
                    "process group or a rank count")


def sum_gradients(model: torch.nn.Module, pool=None) -> torch.nn.Module:
    """Makes the FSDP2 modules (fully_shard) and the DDP wrapper in `model` sum gradients over
    their group instead of averaging them, and checks that their group is the pool of ranks the
    global batch is spread over: `pool` (the DCPDataloader, whose pool is its replicas times its
    plan's ranks; a DeviceMesh; a process group; a rank count; default every rank). Returns
    `model`. Call it once, after wrapping and before the first backward pass.

    Raises ValueError naming the module when a wrapper reduces over another number of ranks than
    the pool (a gradient left partial on some ranks, e.g. FSDP2 over the data-parallel dim of a
    mesh whose context-parallel dim dcp plans), and when `model` holds neither FSDP2 modules nor
    DDP (sum the gradients over the pool yourself then)."""
    from torch.distributed.fsdp import FSDPModule
    from torch.distributed.tensor import DTensor
    from torch.nn.parallel import DistributedDataParallel

    want = _pool_size(pool)
    wrapped = 0
    if isinstance(model, DistributedDataParallel):
        size = dist.get_world_size(model.process_group)
        if size != want:
            raise ValueError(f"DistributedDataParallel reduces over {size} ranks, but the global "
                             f"batch is spread over a pool of {want}")
        model.register_comm_hook(model.process_group, _sum_hook)
        wrapped += 1
    for name, module in model.named_modules():
        if not isinstance(module, FSDPModule):
            continue
        for pname, param in module.named_parameters():
            if isinstance(param, DTensor) and param.device_mesh.size() != want:
                raise ValueError(f"fully_shard module {name or type(module).__name__!r} shards "
                                 f"{pname} over a mesh of {param.device_mesh.size()} ranks, but "
                                 f"the global batch is spread over a pool of {want}: shard over "
                                 "the whole pool (the mesh flattened) so that every rank's "
                                 "gradient is summed")
        module.set_gradient_divide_factor(1.0)
        # Plain sums: no averaging op, no pre- or post-multiplication (gloo has no PREMUL_SUM).
        module.set_force_sum_reduction_for_comms(True)
        wrapped += 1
    if wrapped == 0:
        raise ValueError(f"{type(model).__name__} holds no FSDP2 module (fully_shard) and is not "
                         "DistributedDataParallel: sum its gradients over the pool yourself "
                         "(all_reduce with SUM)")
    return model
