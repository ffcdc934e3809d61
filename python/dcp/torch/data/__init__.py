# SPDX-License-Identifier: Apache-2.0
"""dcp.torch's data side: dataloader.py (DCPDataloader: packing, planning ahead, each rank's
local batch), shares.py (a global batch's samples dealt to data-parallel replicas by attention
work) and data_parallel.py (sum_gradients: FSDP2 and DDP summing over the pool). dcp.torch
exports the public names."""
