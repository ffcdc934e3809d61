# SPDX-License-Identifier: Apache-2.0
"""The process group dcp.torch runs on, as the executor and the loader both resolve it."""
from __future__ import annotations

import dataclasses

import torch.distributed as dist


def resolve_group(group, who: str):
    """(group, rank, size): the group given or the default one when torch.distributed is
    initialized; (None, 0, 1), one process on its own, when it is not and no group was given."""
    if dist.is_available() and dist.is_initialized():
        group = group if group is not None else dist.group.WORLD
        rank = dist.get_rank(group)
        if rank < 0:
            raise ValueError(f"this process is not a member of the group passed to {who}")
        return group, rank, dist.get_world_size(group)
    if group is not None:
        raise RuntimeError(f"{who} got a group but torch.distributed is not initialized")
    return None, 0, 1


@dataclasses.dataclass
class Layout:
    """Where a rank stands: the group its plans span (rank of size), and its data-parallel
    replica of `replicas`, each replica planning its own share of every global batch."""
    group: object
    rank: int
    size: int
    replica: int = 0
    replicas: int = 1


def resolve_layout(group, mesh, mesh_dims, dp_group, who: str) -> Layout:
    """The layout of `group` alone, of a (data-parallel, context-parallel) DeviceMesh whose dims
    are named by mesh_dims, or of `group` with a data-parallel group `dp_group` beside it."""
    if mesh is not None:
        if group is not None or dp_group is not None:
            raise ValueError(f"{who} takes a mesh or groups, not both")
        names = tuple(getattr(mesh, "mesh_dim_names", None) or ())
        dims = tuple(mesh_dims)
        if len(dims) != 2 or len(set(dims)) != 2:
            raise ValueError(f"mesh_dims {mesh_dims!r} is not two dim names (data-parallel, "
                             "context-parallel)")
        missing = [d for d in dims if d not in names]
        if missing or len(names) != 2:
            raise ValueError(f"the mesh has dims {names}; {who} needs a 2-D mesh with dims "
                             f"{dims} (data-parallel, context-parallel)"
                             + (f": {missing[0]!r} is missing" if missing else ""))
        dp, cp = dims
        group = mesh.get_group(cp)
        _, rank, size = resolve_group(group, who)
        return Layout(group, rank, size, mesh.get_local_rank(dp), mesh.size(names.index(dp)))
    group, rank, size = resolve_group(group, who)
    if dp_group is None:
        return Layout(group, rank, size)
    if group is None:
        raise ValueError(f"{who} got a dp_group but no group for its context-parallel ranks")
    replica = dist.get_rank(dp_group)
    if replica < 0:
        raise ValueError(f"this process is not a member of the dp_group passed to {who}")
    return Layout(group, rank, size, replica, dist.get_world_size(dp_group))
