# SPDX-License-Identifier: Apache-2.0
"""dcp in Hugging Face transformers models: one registration call, then attn_implementation="dcp".

    import dcp.torch as dcpt
    import dcp.torch.hf as dcphf
    dcphf.register()
    model = AutoModelForCausalLM.from_config(config, attn_implementation="dcp")
    loader = dcpt.DCPDataloader(dataset, tokens_per_batch=65536, dtype=torch.bfloat16,
                                **dcphf.plan_options(model.config))
    executor = dcpt.DCPExecutor()
    for lb, plan in loader:
        executor.prepare(plan)
        out = model(input_ids=lb.input_ids[None], position_ids=lb.position_ids[None],
                    dcp_executor=executor, use_cache=False)

The plan is the mask: transformers builds none (the registered mask function returns None), and
every attention layer runs dcp attention on the executor passed as `dcp_executor`, which the
model's forward hands to its attention layers with its other keyword arguments.
attention_kinds(config) gives a model's attention kinds (full, sliding-window and chunked layers)
as dcp masks, and the kind of every layer. For a model whose layers differ (Gemma 2/3, Qwen2 with
max_window_layers, Llama 4), plan_options gives the loader one mask per kind and each kind's
layer count, and every layer runs its kind's Programs of the plan. transformers is needed only by
this package (`pip install .[hf]`). docs/python.md describes the layout copies and what is
refused.

The package: attention.py (the attention function, its registration and the model call's
arguments), config.py (what a transformers config says: attention kinds, per-token work, the
loader's options), trainer.py (DCPTrainer and DCPSFTTrainer, imported when first named: they need
accelerate, and DCPSFTTrainer TRL) and _trainer_loader.py (the trainers' samples and batches)."""
from __future__ import annotations

from typing import Any

from dcp.torch.hf.attention import (
    NAME,
    dcp_attention,
    loss_kwargs,
    model_inputs,
    no_mask,
    register,
)
from dcp.torch.hf.config import (
    CHUNKED_ATTENTION,
    FULL_ATTENTION,
    PLANNED_KINDS,
    SLIDING_ATTENTION,
    ModelKinds,
    ModelMask,
    attention_kinds,
    layer_kind,
    model_mask,
    plan_options,
    token_flops,
)

# The trainers (DCPTrainer, DCPSFTTrainer) are left out: named, they import accelerate (and TRL).
__all__ = ["CHUNKED_ATTENTION", "FULL_ATTENTION", "NAME", "PLANNED_KINDS", "SLIDING_ATTENTION",
           "ModelKinds", "ModelMask", "attention_kinds", "dcp_attention", "layer_kind",
           "loss_kwargs", "model_inputs", "model_mask", "no_mask", "plan_options", "register",
           "token_flops"]


def __getattr__(name: str) -> Any:
    """DCPTrainer and DCPSFTTrainer (dcp.torch.hf.trainer), imported when first asked for: they
    need accelerate (and DCPSFTTrainer trl), which the attention function does not."""
    if name in ("DCPTrainer", "DCPSFTTrainer", "DCPTrainerBatches"):
        from dcp.torch.hf import trainer
        return getattr(trainer, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
