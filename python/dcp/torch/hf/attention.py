# SPDX-License-Identifier: Apache-2.0
"""transformers' attention function for attn_implementation="dcp", its registration, and the
model call's arguments on a rank's local batch (model_inputs, loss_kwargs).

Every attention layer runs dcp attention on the executor passed to the model call as
`dcp_executor`, which the model's forward hands to its attention layers with its other keyword
arguments; with a plan of several attention kinds, each layer runs its kind's Programs
(dcp.torch.hf.config.layer_kind). The registered mask function builds no mask: the plan is the
mask. docs/python.md describes the layout copies and what is refused."""
from __future__ import annotations

from typing import Any

import torch

from dcp.torch.attention import attention
from dcp.torch.data.dataloader import IGNORE_INDEX
from dcp.torch.executor import DCPExecutor, NotPreparedError
from dcp.torch.hf.config import layer_kind

NAME = "dcp"


def _transformers():
    try:
        import transformers
    except ImportError as error:
        raise ImportError("dcp.torch.hf needs transformers: pip install 'dcp[hf]' (or pip install "
                          f"transformers) ({error})") from error
    return transformers


def register() -> None:
    """Makes attn_implementation="dcp" known to transformers (from_pretrained, from_config,
    set_attn_implementation): dcp's attention function and a mask function that builds no mask.
    Calling it again is harmless."""
    transformers = _transformers()
    transformers.AttentionInterface.register(NAME, dcp_attention)
    transformers.AttentionMaskInterface.register(NAME, no_mask)


def no_mask(*args: Any, attention_mask: torch.Tensor | None = None, **kwargs: Any) -> None:
    """transformers' mask function for "dcp": no (tokens x tokens) mask, since the plan holds the
    mask. A padding mask would be ignored, so it is refused: dcp batches are packed, not padded."""
    if attention_mask is not None:
        raise ValueError(f"attention_mask of shape {tuple(attention_mask.shape)} was passed to a "
                         "model with attn_implementation='dcp': the plan is the mask (sequences "
                         "are packed and told apart by the plan); pass no attention_mask")
    return None


def _layer(module: torch.nn.Module) -> str:
    index = getattr(module, "layer_idx", None)
    return f"layer {index}" if index is not None else type(module).__name__


def dcp_attention(module: torch.nn.Module, query: torch.Tensor, key: torch.Tensor,
                  value: torch.Tensor, attention_mask: torch.Tensor | None,
                  scaling: float | None = None, dropout: float = 0.0,
                  softcap: float | None = None, **kwargs: Any
                  ) -> tuple[torch.Tensor, None]:
    """transformers' attention function for "dcp". query (1, heads, local tokens, head dim), key
    and value (1, kv heads, local tokens, head dim), this rank's tokens in the plan's local layout;
    returns ((1, local tokens, heads, head dim), None). GQA runs without repeating kv heads;
    `scaling` (the layer's softmax scale) is honoured. With a plan of several attention kinds,
    the layer runs its kind's Programs: layer_kind(module.config, module.layer_idx)."""
    layer = _layer(module)
    executor = kwargs.get("dcp_executor")
    if executor is None:
        raise ValueError(f"{layer}: attn_implementation='dcp' runs attention on a DCPExecutor "
                         "passed to the model call as dcp_executor=...; none was passed")
    if not isinstance(executor, DCPExecutor):
        raise TypeError(f"{layer}: dcp_executor is a {type(executor).__name__}, not a "
                        "dcp.torch.DCPExecutor")
    if attention_mask is not None:
        raise ValueError(f"{layer}: got an attention_mask of shape "
                         f"{tuple(attention_mask.shape)}; with dcp the plan is the mask (call "
                         "dcp.torch.hf.register() and pass no attention_mask)")
    if softcap is not None:
        raise ValueError(f"{layer}: attention softcapping (softcap={softcap}) is not supported by "
                         "dcp's kernels")
    if dropout:
        raise ValueError(f"{layer}: attention dropout {dropout} is not supported by dcp; set the "
                         "config's attention_dropout to 0")
    if getattr(module, "attn_temperature_tuning", False) and not getattr(module, "use_rope", True):
        raise ValueError(f"{layer}: attention temperature tuning on a no-RoPE layer scales the "
                         "queries by the index of each token among this call's tokens, which on "
                         "a rank of dcp is not the token's place in the batch; set the config's "
                         "attn_temperature_tuning to False")
    if kwargs.get("s_aux") is not None:
        raise ValueError(f"{layer}: learned attention sinks (s_aux) are not supported by dcp's "
                         "kernels")
    if kwargs.get("is_causal") is False or getattr(module, "is_causal", True) is False:
        raise ValueError(f"{layer}: bidirectional attention (is_causal=False); dcp.torch.hf runs "
                         "causal language models")
    if kwargs.get("output_attentions") or getattr(getattr(module, "config", None),
                                                   "output_attentions", False):
        raise ValueError(f"{layer}: output_attentions=True asks for attention weights, which dcp "
                         "never forms (it runs blockwise over the plan)")
    if kwargs.get("use_cache"):
        raise ValueError(f"{layer}: use_cache=True: dcp is for training and keeps no cache; call "
                         "the model with use_cache=False (generation is not supported)")
    if query.dim() != 4 or query.shape[0] != 1:
        raise ValueError(f"{layer}: query has shape {tuple(query.shape)}; dcp takes batch size 1 "
                         "(one packed batch: input_ids[None] of the rank's local tokens)")
    if key.shape[2] != query.shape[2]:
        raise ValueError(f"{layer}: {key.shape[2]} keys for {query.shape[2]} queries: a cache or "
                         "generation call, which dcp does not run (it is for training)")
    # A plan of one mask runs every layer; with several kinds, each layer runs its own. A compiled
    # graph reads the kinds once (the executor's attributes are guarded, as its key is): the
    # same kinds every batch, so no recompilation.
    kind = _attention_kind(module, layer) if len(executor.kinds) > 1 else None
    if not torch.compiler.is_compiling():
        # Eager only: these read the per-batch plan, which a compiled graph must not specialise on
        # (the ops check the same at run time, without naming the layer).
        if executor.plan is None:
            raise NotPreparedError(f"{layer}: the DCPExecutor passed as dcp_executor has no plan; "
                                   "call executor.prepare(plan) first")
        plan = executor.plan
        got = (query.shape[1], key.shape[1], query.shape[3])
        want = (plan.q_heads, plan.kv_heads, plan.head_dim)
        if got != want:
            raise ValueError(f"{layer}: (heads, kv heads, head dim) = {got}, but the plan is for "
                             f"{want}; plan with dcp.torch.hf.plan_options(model.config)")
        if kind is not None and kind not in executor.kinds:
            raise ValueError(f"{layer} is a {kind} layer, which is not an attention kind of the "
                             f"plan (it has {', '.join(executor.kinds)}); plan with "
                             "dcp.torch.hf.plan_options(model.config)")
    if torch.is_autocast_enabled(query.device.type):
        # Under autocast, RoPE's float32 cos and sin promote q and k to float32 while v keeps the
        # autocast dtype: attention runs in the autocast dtype (the plan's), as sdpa does.
        dtype = torch.get_autocast_dtype(query.device.type)
        query, key, value = query.to(dtype), key.to(dtype), value.to(dtype)
    # transformers' layout is head-major (q and k are written so by RoPE); dcp's is token-major.
    # q and k: one copy each; v, a transposed view of its projection, and o need none.
    q = query[0].transpose(0, 1).contiguous()
    k = key[0].transpose(0, 1).contiguous()
    v = value[0].transpose(0, 1).contiguous()
    # On a rank without tokens, q, k and v hold model_inputs's stand-in token, which the
    # executor takes as a row that attends to nothing.
    o = attention(executor, q, k, v, softmax_scale=scaling, kind=kind)
    return o[None], None


def _attention_kind(module: torch.nn.Module, layer: str) -> str:
    """The attention kind of the layer `module` attends for: layer_kind(module.config,
    module.layer_idx)."""
    config = getattr(module, "config", None)
    index = getattr(module, "layer_idx", None)
    if config is None or index is None:
        raise ValueError(f"{layer}: the plan has several attention kinds, but the attention "
                         f"module ({type(module).__name__}) has no config and layer_idx to tell "
                         "which kind its layer is")
    return layer_kind(config, index)


def model_inputs(local_batch: Any, executor: DCPExecutor, loss: bool = True) -> dict:
    """The keyword arguments of a transformers model's call on a rank's local batch:
    model(**model_inputs(lb, executor)): input_ids and position_ids as (1, local tokens), the
    executor, use_cache=False and, with `loss`, loss_kwargs(lb).

    A rank the plan gives no tokens still runs every layer (it takes part in the plan's
    transfers, and in FSDP2's and DDP's collectives), but transformers' layers cannot run on no
    tokens (they reshape with an inferred dimension). Such a rank runs one stand-in token: id 0
    at position 0, no label; the executor runs the rank's Programs on no tokens and takes the
    stand-in as a row that attends to nothing (output 0, gradients 0), so nothing it computes
    reaches the loss or the gradients."""
    ids, positions, labels = local_batch.input_ids, local_batch.position_ids, local_batch.labels
    if ids.numel() == 0:
        ids = torch.zeros(1, dtype=ids.dtype, device=ids.device)
        positions = torch.zeros(1, dtype=positions.dtype, device=positions.device)
        labels = torch.full((1,), IGNORE_INDEX, dtype=labels.dtype, device=labels.device)
    inputs = dict(input_ids=ids[None], position_ids=positions[None], dcp_executor=executor,
                  use_cache=False)
    if loss:
        inputs.update(_loss_arguments(labels, local_batch.loss_tokens))
    return inputs


def loss_kwargs(local_batch: Any) -> dict:
    """Arguments for the model's own loss (model(..., **loss_kwargs(lb))) that give dcp's loss:
    the local labels are already shifted (shift_labels), and the sum of token losses is divided by
    the whole batch's loss tokens (num_items_in_batch), so that the ranks' losses and gradients
    sum to one process's."""
    return _loss_arguments(local_batch.labels, local_batch.loss_tokens)


def _loss_arguments(labels: torch.Tensor, loss_tokens: int) -> dict:
    return dict(labels=labels[None], shift_labels=labels[None], num_items_in_batch=loss_tokens)
