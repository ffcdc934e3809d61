# SPDX-License-Identifier: Apache-2.0
"""What dcp reads from a transformers config: the model's attention kinds (full, sliding-window
and chunked layers) as dcp masks in transformers' semantics and the kind of every layer
(attention_kinds, layer_kind, model_mask), the rest of a layer's work per token (token_flops),
and the loader's keyword arguments for the model (plan_options). Reads the config's attributes
only: transformers itself is not imported."""
from __future__ import annotations

import numbers
from typing import Any


class ModelMask:
    """mask_fn for DCPDataloader: the same dcp mask spec for every sample."""

    def __init__(self, spec: str):
        self.spec = spec

    def __call__(self, sample: Any) -> str:
        return self.spec

    def __repr__(self) -> str:
        return f"ModelMask({self.spec!r})"


class ModelKinds:
    """mask_fn for DCPDataloader: the same attention kinds, {kind name: dcp mask spec}, for every
    sample."""

    def __init__(self, kinds: dict[str, str]):
        self.kinds = dict(kinds)

    def __call__(self, sample: Any) -> dict[str, str]:
        return dict(self.kinds)

    def __repr__(self) -> str:
        return f"ModelKinds({self.kinds!r})"


def _get(config: Any, name: str, default: Any = None) -> Any:
    value = getattr(config, name, default)
    return default if value is None else value


# transformers' names (layer_types) of the attention kinds dcp plans.
FULL_ATTENTION = "full_attention"
SLIDING_ATTENTION = "sliding_attention"
CHUNKED_ATTENTION = "chunked_attention"
PLANNED_KINDS = (FULL_ATTENTION, SLIDING_ATTENTION, CHUNKED_ATTENTION)


def _positive_int(config: Any, name: str, value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, numbers.Integral) or value < 1:
        raise ValueError(f"{type(config).__name__}.{name}={value!r} is not a positive integer")
    return int(value)


def _declares_layer_types(config: Any) -> bool:
    """Whether the config's class has a layer_types field, which its model then reads. A
    transformers config class without one (Llama, Mistral) keeps a layer_types given to it as an
    extra attribute that its model never reads; a config that is not a dataclass is taken at its
    word."""
    cls = type(config)
    # The class's own field table rather than dataclasses.fields(), which torch.compile cannot
    # trace (the attention function finds each layer's kind inside the compiled model).
    fields = getattr(cls, "__dataclass_fields__", None)
    if fields is None:
        return True
    return "layer_types" in fields or isinstance(getattr(cls, "layer_types", None), property)


def _pattern_layer_types(config: Any, layers: int) -> list[str]:
    """The layer kinds of a config without layer_types, as its class's __post_init__ derives them
    (transformers 5) or, for other models, as a model that reads only sliding_window runs them:
    every layer windowed when the config has a window (Mistral), else every layer full."""
    model_type = getattr(config, "model_type", "")
    window = getattr(config, "sliding_window", None)
    if model_type == "gemma2":
        return [SLIDING_ATTENTION if (i + 1) % 2 else FULL_ATTENTION for i in range(layers)]
    if model_type in ("gemma3", "gemma3_text"):
        pattern = getattr(config, "sliding_window_pattern", None)
        if pattern is None:
            pattern = getattr(config, "_sliding_window_pattern", 6)
        if isinstance(pattern, bool) or not isinstance(pattern, numbers.Integral) or pattern < 1:
            raise ValueError(f"{type(config).__name__} has no layer_types and its sliding window "
                             f"pattern {pattern!r} is not a positive integer")
        return [SLIDING_ATTENTION if (i + 1) % pattern else FULL_ATTENTION for i in range(layers)]
    if model_type in ("qwen2", "qwen3"):
        if not getattr(config, "use_sliding_window", False):
            window = None
        first = int(getattr(config, "max_window_layers", 0))
        return [SLIDING_ATTENTION if window is not None and i >= first else FULL_ATTENTION
                for i in range(layers)]
    if model_type == "llama4_text":
        no_rope = list(getattr(config, "no_rope_layers", None) or [])
        if len(no_rope) != layers:
            raise ValueError(f"{type(config).__name__} has no layer_types and {len(no_rope)} "
                             f"no_rope_layers for num_hidden_layers={layers}")
        chunk = getattr(config, "attention_chunk_size", None)
        return [CHUNKED_ATTENTION if flag and chunk is not None else FULL_ATTENTION
                for flag in no_rope]
    if window is None or getattr(config, "use_sliding_window", True) is False:
        return [FULL_ATTENTION] * layers
    return [SLIDING_ATTENTION] * layers


def _layer_types(config: Any) -> list[str]:
    name = type(config).__name__
    layers = int(config.num_hidden_layers)
    given = getattr(config, "layer_types", None)
    if given is not None and _declares_layer_types(config):
        given = list(given)
        if len(given) != layers:
            raise ValueError(f"{name} has {len(given)} layer_types for num_hidden_layers={layers}: "
                             f"{given}")
        return given
    derived = _pattern_layer_types(config, layers)
    if given is not None and list(given) != derived:
        raise ValueError(f"{name} carries layer_types {list(given)}, which its model does not "
                         f"read ({name} declares no layer_types): its layers run {derived}; drop "
                         "layer_types or use a model class that reads them")
    return derived


def _kind_mask(config: Any, kind: str, layers: list[int]) -> str:
    name = type(config).__name__
    if kind == FULL_ATTENTION:
        return "causal"
    if kind == SLIDING_ATTENTION:
        window = getattr(config, "sliding_window", None)
        if window is None:
            raise ValueError(f"{name}'s layers {layers} are sliding_attention but sliding_window "
                             "is None")
        return f"sliding_window:window={_positive_int(config, 'sliding_window', window)}"
    if kind == CHUNKED_ATTENTION:
        chunk = getattr(config, "attention_chunk_size", None)
        if chunk is None:
            raise ValueError(f"{name}'s layers {layers} are chunked_attention but "
                             "attention_chunk_size is None")
        return f"chunked:chunk={_positive_int(config, 'attention_chunk_size', chunk)}"
    raise ValueError(f"{name}'s layers {layers} use {kind!r}, which dcp does not plan (it plans "
                     f"{', '.join(PLANNED_KINDS)})")


def attention_kinds(config: Any) -> tuple[dict[str, str], list[str]]:
    """The attention kinds of a transformers config, in transformers' own semantics: (kinds, the
    dcp mask spec of each kind present, in the order of its first layer; layer_kinds, the kind of
    each layer 0 .. num_hidden_layers - 1). Kinds are named as transformers' layer_types name
    them: full_attention is 'causal'; sliding_attention with the config's sliding_window W is
    'sliding_window:window=W' (transformers lets query i see key j when i - W < j <= i: W keys,
    the query's own included, as dcp's window); chunked_attention with attention_chunk_size C is
    'chunked:chunk=C' (key j visible from query i when j <= i and both lie in the same chunk of C
    positions, floor(j/C) == floor(i/C)). Positions are the sequence's own: with packed
    sequences, transformers remaps both indices to the position ids.

    The layer kinds are the config's layer_types when its class declares them (Gemma 2/3,
    Qwen2/3, Llama 4 and every model with alternating attention); without them, what the class's
    __post_init__ derives (Gemma 2: every other layer windowed, from the first; Gemma 3: every
    layer but each sliding_window_pattern-th; Qwen2/3: layers from max_window_layers on when
    use_sliding_window; Llama 4: the no-RoPE layers chunked when attention_chunk_size is set), or
    every layer windowed when the config has a sliding_window (Mistral, whose model applies it to
    every layer), else every layer full.

    Raises ValueError naming the value for what dcp cannot run: bidirectional attention
    (is_causal=False, use_bidirectional_attention), attention softcapping, attention
    temperature tuning on no-RoPE layers (Llama 4's attn_temperature_tuning), a layer type other
    than the three, a sliding kind without a positive sliding_window, a chunked kind without a
    positive attention_chunk_size, layer_types whose length is not num_hidden_layers, and
    layer_types on a class whose model does not read them but runs other kinds."""
    name = type(config).__name__
    if not getattr(config, "is_causal", True):
        raise ValueError(f"{name} has is_causal=False (bidirectional attention); "
                         "dcp.torch.hf plans causal language models")
    if getattr(config, "use_bidirectional_attention", False):
        raise ValueError(f"{name} has use_bidirectional_attention=True; dcp.torch.hf plans causal "
                         "language models")
    softcap = getattr(config, "attn_logit_softcapping", None)
    if softcap is not None:
        raise ValueError(f"{name} uses attention softcapping "
                         f"(attn_logit_softcapping={softcap}), which dcp's kernels do not apply")
    if getattr(config, "attn_temperature_tuning", False) and 0 in list(
            getattr(config, "no_rope_layers", None) or []):
        raise ValueError(f"{name} has attn_temperature_tuning={config.attn_temperature_tuning!r}: "
                         "its no-RoPE layers scale the queries by the index of each token among "
                         "the tokens of the call, which on a rank of dcp is not the token's place "
                         "in the batch; set attn_temperature_tuning=False")
    layer_kinds = _layer_types(config)
    kinds: dict[str, str] = {}
    for kind in layer_kinds:
        if kind not in kinds:
            layers = [i for i, k in enumerate(layer_kinds) if k == kind]
            kinds[kind] = _kind_mask(config, kind, layers)
    return kinds, layer_kinds


def layer_kind(config_or_layer_kinds: Any, layer_idx: int) -> str:
    """The attention kind of one layer: layer_kinds[layer_idx] of attention_kinds(config), or of
    a layer_kinds list given instead of the config. In the attention function, every model passes
    its attention module, which holds config and layer_idx: layer_kind(module.config,
    module.layer_idx)."""
    if isinstance(config_or_layer_kinds, (list, tuple)):
        layer_kinds = list(config_or_layer_kinds)
    else:
        layer_kinds = attention_kinds(config_or_layer_kinds)[1]
    if isinstance(layer_idx, bool) or not isinstance(layer_idx, int) \
            or not 0 <= layer_idx < len(layer_kinds):
        raise ValueError(f"layer_idx {layer_idx!r} is not a layer of a model with "
                         f"{len(layer_kinds)} layers")
    return layer_kinds[layer_idx]


def model_mask(config: Any) -> str:
    """The one dcp mask spec of a transformers config whose layers all have the same attention
    kind (attention_kinds(config), which gives the semantics): 'causal', 'sliding_window:window=W'
    or 'chunked:chunk=C'. Raises ValueError for what attention_kinds refuses, and when the layers
    differ, naming each kind's layers (their plan has a mask per kind: plan_options)."""
    kinds, layer_kinds = attention_kinds(config)
    if len(kinds) > 1:
        by_kind = {kind: [i for i, k in enumerate(layer_kinds) if k == kind]
                   for kind in sorted(kinds)}
        listed = "; ".join(f"{kind}: layers {layers}" for kind, layers in by_kind.items())
        raise ValueError(f"{type(config).__name__}'s layers differ in attention ({listed}); one "
                         "mask cannot serve them: plan their kinds (plan_options, "
                         "attention_kinds)")
    return next(iter(kinds.values()), "causal")


def token_flops(config: Any) -> float:
    """The FLOPs a transformers decoder runs per token and attention layer outside attention's
    score and value products, forward and backward (3 x 2 FLOPs per weight): the q, k, v and output
    projections, the MLP (gate, up and down where the config has intermediate_size, else two
    matrices of 4 x hidden) and the output projection's share per layer. dcp's search prices every
    rank's tokens by it beside the rank's attention (dcp.plan's token_flops). Mixture-of-experts
    layers are counted as one dense MLP of intermediate_size."""
    hidden = int(config.hidden_size)
    heads = int(config.num_attention_heads)
    kv_heads = int(_get(config, "num_key_value_heads", heads))
    head_dim = int(_get(config, "head_dim", None) or hidden // heads)
    layers = int(_get(config, "num_hidden_layers", 1) or 1)
    intermediate = _get(config, "intermediate_size", None)
    mlp = 3 * hidden * int(intermediate) if intermediate else 2 * hidden * 4 * hidden
    projections = hidden * head_dim * (2 * heads + 2 * kv_heads)
    output = int(_get(config, "vocab_size", 0) or 0) * hidden / layers
    return 6.0 * (projections + mlp + output)


def plan_options(config: Any) -> dict:
    """The DCPDataloader keyword arguments a transformers model's attention needs: heads,
    kv_heads, head_dim, token_flops (the rest of each layer, token_flops(config)) and mask_fn. When
    every layer has one attention kind, mask_fn gives its mask (model_mask(config)) for every
    sample; when the layers differ (attention_kinds), it gives every kind's mask ({kind name: mask
    spec}, ModelKinds) and `layers` counts each kind's layers, so that every batch's plan holds each
    kind's Programs. Raises ValueError for a model dcp cannot plan, naming what stands in the
    way."""
    heads = int(config.num_attention_heads)
    kv_heads = int(_get(config, "num_key_value_heads", heads))
    head_dim = _get(config, "head_dim", None)
    if head_dim is None:
        head_dim = int(config.hidden_size) // heads
    options = dict(heads=heads, kv_heads=kv_heads, head_dim=int(head_dim),
                   token_flops=token_flops(config))
    kinds, layer_kinds = attention_kinds(config)
    if len(kinds) <= 1:
        return dict(options, mask_fn=ModelMask(next(iter(kinds.values()), "causal")))
    layers = {kind: layer_kinds.count(kind) for kind in kinds}
    return dict(options, mask_fn=ModelKinds(kinds), layers=layers)
