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
model's forward hands to its attention layers with its other keyword arguments. transformers is
needed only by this module (`pip install .[hf]`). docs/python.md describes the layout copies and
what is refused."""
from __future__ import annotations

from typing import Any

import torch

from dcp.torch.attention import attention
from dcp.torch.executor import DCPExecutor, NotPreparedError

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
    `scaling` (the layer's softmax scale) is honoured."""
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
    # transformers' layout is head-major (q and k are written so by RoPE); dcp's is token-major.
    # q and k: one copy each; v, a transposed view of its projection, and o need none.
    q = query[0].transpose(0, 1).contiguous()
    k = key[0].transpose(0, 1).contiguous()
    v = value[0].transpose(0, 1).contiguous()
    o = attention(executor, q, k, v, softmax_scale=scaling)
    return o[None], None


class ModelMask:
    """mask_fn for DCPDataloader: the same dcp mask spec for every sample."""

    def __init__(self, spec: str):
        self.spec = spec

    def __call__(self, sample: Any) -> str:
        return self.spec

    def __repr__(self) -> str:
        return f"ModelMask({self.spec!r})"


def _get(config: Any, name: str, default: Any = None) -> Any:
    value = getattr(config, name, default)
    return default if value is None else value


def model_mask(config: Any) -> str:
    """The dcp mask spec of a transformers config's attention, in transformers' own semantics:
    'causal', or 'sliding_window:window=W' when every layer has the same window W (key j visible
    from query i when i - W < j <= i: W keys, the query's own included, as dcp's window). Raises
    ValueError for what dcp's one-mask plans cannot express, naming the layers."""
    if not getattr(config, "is_causal", True):
        raise ValueError(f"{type(config).__name__} has is_causal=False (bidirectional attention); "
                         "dcp.torch.hf plans causal language models")
    softcap = getattr(config, "attn_logit_softcapping", None)
    if softcap is not None:
        raise ValueError(f"{type(config).__name__} uses attention softcapping "
                         f"(attn_logit_softcapping={softcap}), which dcp's kernels do not apply")
    window = getattr(config, "sliding_window", None)
    layer_types = getattr(config, "layer_types", None)
    if layer_types is not None:
        kinds = sorted(set(layer_types))
        if len(kinds) > 1:
            by_kind = {kind: [i for i, t in enumerate(layer_types) if t == kind] for kind in kinds}
            listed = "; ".join(f"{kind}: layers {layers}" for kind, layers in by_kind.items())
            raise ValueError(f"{type(config).__name__}'s layers differ in attention ({listed}); a "
                             "dcp plan has one mask for every layer")
        kind = kinds[0] if kinds else "full_attention"
        if kind == "full_attention":
            return "causal"
        if kind != "sliding_attention":
            raise ValueError(f"{type(config).__name__}'s layers use {kind!r}, which dcp does not "
                             "plan (it plans full_attention and sliding_attention)")
        if window is None:
            raise ValueError(f"{type(config).__name__}'s layers are sliding_attention but "
                             "sliding_window is None")
    elif window is None or getattr(config, "use_sliding_window", True) is False:
        return "causal"
    window = int(window)
    if window < 1:
        raise ValueError(f"sliding_window {window} is not positive")
    return f"sliding_window:window={window}"


def plan_options(config: Any) -> dict:
    """The DCPDataloader keyword arguments a transformers model's attention needs: heads,
    kv_heads, head_dim and mask_fn (model_mask(config) for every sample). Raises ValueError for a
    model dcp cannot plan, naming what stands in the way."""
    heads = int(config.num_attention_heads)
    kv_heads = int(_get(config, "num_key_value_heads", heads))
    head_dim = _get(config, "head_dim", None)
    if head_dim is None:
        head_dim = int(config.hidden_size) // heads
    return dict(heads=heads, kv_heads=kv_heads, head_dim=int(head_dim),
                mask_fn=ModelMask(model_mask(config)))


def loss_kwargs(local_batch: Any) -> dict:
    """Arguments for the model's own loss (model(..., **loss_kwargs(lb))) that give dcp's loss:
    the local labels are already shifted (shift_labels), and the sum of token losses is divided by
    the whole batch's loss tokens (num_items_in_batch), so that the ranks' losses and gradients
    sum to one process's."""
    labels = local_batch.labels[None]
    return dict(labels=labels, shift_labels=labels, num_items_in_batch=local_batch.loss_tokens)
