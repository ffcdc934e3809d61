# SPDX-License-Identifier: Apache-2.0
"""dcp.torch: the DCP paper's PyTorch API.

    import dcp.torch as dcpt
    loader = dcpt.DCPDataloader(dataset, mask_fn, group=group, tokens_per_batch=65536,
                                heads=8, kv_heads=2, head_dim=128, dtype=torch.bfloat16)
    executor = dcpt.DCPExecutor(group=group)
    for local_batch, plan in loader:
        executor.prepare(plan)
        loss = model(local_batch, executor)  # attention layers: dcpt.DCPAttn.apply(executor, q, kv)
        loss.backward(); optimizer.step()

docs/python.md describes the design."""
from dcp.torch.attention import DCPAttn, attention
from dcp.torch.data.data_parallel import sum_gradients
from dcp.torch.data.dataloader import IGNORE_INDEX, DCPDataloader, LocalBatch, pack_batches
from dcp.torch.executor import DCPExecutor, NotPreparedError

__all__ = ["DCPAttn", "DCPDataloader", "DCPExecutor", "IGNORE_INDEX", "LocalBatch",
           "NotPreparedError", "attention", "pack_batches", "sum_gradients"]
