# SPDX-License-Identifier: Apache-2.0
"""The process group dcp.torch runs on, as the executor and the loader both resolve it."""
from __future__ import annotations

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
