# SPDX-License-Identifier: Apache-2.0
"""dcp.torch.hf.attention_kinds: the attention kind of every layer of transformers configs and the
dcp mask of each kind, checked against the masks transformers itself builds, and every refusal."""
from __future__ import annotations

import pytest
import torch

transformers = pytest.importorskip("transformers")
masking_utils = pytest.importorskip("transformers.masking_utils")

import dcp.torch.hf as dcphf  # noqa: E402
import reference  # noqa: E402

FULL, SLIDING, CHUNKED = "full_attention", "sliding_attention", "chunked_attention"
TINY = dict(vocab_size=64, hidden_size=32, intermediate_size=64, num_attention_heads=2,
            num_key_value_heads=1, head_dim=16)


def gemma2(**kw):
    return transformers.Gemma2Config(**{"attn_logit_softcapping": None, **TINY, **kw})


def gemma3(**kw):
    return transformers.Gemma3TextConfig(**{**TINY, **kw})


def qwen2(**kw):
    return transformers.Qwen2Config(**{**TINY, **kw})


def qwen3(**kw):
    return transformers.Qwen3Config(**{**TINY, **kw})


def mistral(**kw):
    return transformers.MistralConfig(**{**TINY, **kw})


def llama4(**kw):
    # Temperature tuning of the no-RoPE layers is refused (test_hf_errors.py); the kinds are not.
    return transformers.Llama4TextConfig(**{"num_local_experts": 2, "intermediate_size_mlp": 64,
                                            "attn_temperature_tuning": False, **TINY, **kw})


S, F, C = SLIDING, FULL, CHUNKED


@pytest.mark.parametrize("config,kinds,layers", [
    (lambda: gemma2(num_hidden_layers=4, sliding_window=64),
     {S: "sliding_window:window=64", F: "causal"}, [S, F, S, F]),
    (lambda: gemma3(num_hidden_layers=7, sliding_window=32),
     {S: "sliding_window:window=32", F: "causal"}, [S, S, S, S, S, F, S]),
    (lambda: gemma3(num_hidden_layers=4, sliding_window=32, sliding_window_pattern=2),
     {S: "sliding_window:window=32", F: "causal"}, [S, F, S, F]),
    (lambda: qwen2(num_hidden_layers=4, use_sliding_window=True, sliding_window=64,
                   max_window_layers=2),
     {F: "causal", S: "sliding_window:window=64"}, [F, F, S, S]),
    (lambda: qwen2(num_hidden_layers=3, use_sliding_window=True, sliding_window=64,
                   max_window_layers=0),
     {S: "sliding_window:window=64"}, [S, S, S]),
    (lambda: qwen2(num_hidden_layers=3, use_sliding_window=True, sliding_window=64,
                   max_window_layers=3),
     {F: "causal"}, [F, F, F]),
    (lambda: qwen2(num_hidden_layers=3, use_sliding_window=False, sliding_window=64,
                   max_window_layers=0),
     {F: "causal"}, [F, F, F]),
    (lambda: qwen3(num_hidden_layers=4, use_sliding_window=True, sliding_window=16,
                   max_window_layers=1),
     {F: "causal", S: "sliding_window:window=16"}, [F, S, S, S]),
    (lambda: qwen3(num_hidden_layers=2), {F: "causal"}, [F, F]),
    (lambda: mistral(num_hidden_layers=3, sliding_window=48),
     {S: "sliding_window:window=48"}, [S, S, S]),
    (lambda: mistral(num_hidden_layers=2, sliding_window=None), {F: "causal"}, [F, F]),
    (lambda: transformers.LlamaConfig(num_hidden_layers=2, **TINY), {F: "causal"}, [F, F]),
    (lambda: llama4(num_hidden_layers=8, attention_chunk_size=16),
     {C: "chunked:chunk=16", F: "causal"}, [C, C, C, F, C, C, C, F]),
    (lambda: llama4(num_hidden_layers=4, attention_chunk_size=None), {F: "causal"}, [F] * 4),
    # layer_types given outright, with all three kinds
    (lambda: qwen3(num_hidden_layers=4, use_sliding_window=True, sliding_window=8,
                   attention_chunk_size=32, layer_types=[F, S, C, S]),
     {F: "causal", S: "sliding_window:window=8", C: "chunked:chunk=32"}, [F, S, C, S]),
    (lambda: qwen3(num_hidden_layers=0), {}, []),
], ids=["gemma2", "gemma3", "gemma3-pattern-2", "qwen2-window-from-2", "qwen2-all-windowed",
        "qwen2-no-window-layer", "qwen2-use-sliding-window-false", "qwen3-window-from-1",
        "qwen3-default", "mistral-window", "mistral-no-window", "llama", "llama4",
        "llama4-no-chunk", "three-kinds-by-layer-types", "no-layers"])
def test_kinds_and_layer_kinds_of_the_families(config, kinds, layers) -> None:
    got_kinds, got_layers = dcphf.attention_kinds(config())
    assert got_kinds == kinds
    assert list(got_kinds) == list(kinds), "kinds in the order of their first layer"
    assert got_layers == layers


@pytest.mark.parametrize("make,variants", [
    (gemma2, [dict(num_hidden_layers=n) for n in range(6)]),
    (gemma3, [dict(num_hidden_layers=n, sliding_window_pattern=p)
              for n in range(8) for p in (1, 2, 3, 6)]),
    (qwen2, [dict(num_hidden_layers=4, use_sliding_window=u, max_window_layers=m)
             for u in (False, True) for m in range(6)]),
    (qwen3, [dict(num_hidden_layers=3, use_sliding_window=True, max_window_layers=m)
             for m in range(4)]),
    (llama4, [dict(num_hidden_layers=6, no_rope_layer_interval=i, attention_chunk_size=c)
              for i in (1, 2, 4) for c in (None, 8)]),
])
def test_without_layer_types_the_pattern_gives_what_transformers_derives(make, variants) -> None:
    """A config whose layer_types was dropped gets its kinds from the class's pattern attributes,
    exactly as the class's own __post_init__ derives layer_types."""
    for variant in variants:
        config = make(**variant)
        want = list(config.layer_types)
        config.layer_types = None
        assert dcphf.attention_kinds(config)[1] == want, variant


def _transformers_mask(config, kind: str, seqlens: list[int]) -> torch.Tensor:
    """The (tokens x tokens) boolean mask transformers' model builds for a layer of `kind` over
    the packed batch (position ids restarting at every sequence, no cache, no padding)."""
    build = {FULL: masking_utils.create_causal_mask,
             SLIDING: masking_utils.create_sliding_window_causal_mask,
             CHUNKED: masking_utils.create_chunked_causal_mask}[kind]
    config._attn_implementation = "sdpa"
    positions = torch.cat([torch.arange(n) for n in seqlens])[None]
    embeds = torch.zeros(1, sum(seqlens), config.hidden_size)
    mask = build(config=config, inputs_embeds=embeds, attention_mask=None, cache=None,
                 position_ids=positions, allow_is_causal_skip=False)
    return mask[0, 0]


@pytest.mark.parametrize("seqlens", [[23], [13, 1, 20, 8]])
@pytest.mark.parametrize("size", [1, 2, 5, 8, 40])
def test_each_kinds_mask_is_the_one_transformers_builds(seqlens, size) -> None:
    """dcp's mask of every kind equals transformers' own, key for key, for windows and chunks from
    1 token to longer than any sequence: the window W of transformers is dcp's window W."""
    config = qwen3(num_hidden_layers=3, use_sliding_window=True, sliding_window=size,
                   attention_chunk_size=size, layer_types=[F, S, C])
    kinds, _ = dcphf.attention_kinds(config)
    assert kinds[SLIDING] == f"sliding_window:window={size}"
    assert kinds[CHUNKED] == f"chunked:chunk={size}"
    for kind, spec in kinds.items():
        want = _transformers_mask(config, kind, seqlens)
        got = reference.dense_mask(seqlens, [spec] * len(seqlens))
        assert torch.equal(got, want), (kind, spec, seqlens)


def test_layer_kind_picks_the_kind_each_models_attention_layer_runs() -> None:
    """Inside the attention function, layer_kind(module.config, module.layer_idx) is the kind whose
    window the model itself passes as sliding_window (None on full and chunked layers)."""
    seen = []

    def spy(module, query, key, value, attention_mask, **kwargs):
        kind = dcphf.layer_kind(module.config, module.layer_idx)
        seen.append((kind, kwargs.get("sliding_window")))
        out = torch.zeros(query.shape[0], query.shape[2], query.shape[1], query.shape[3])
        return out, None

    transformers.AttentionInterface.register("dcp_test_spy", spy)
    transformers.AttentionMaskInterface.register("dcp_test_spy", dcphf.no_mask)
    for config in (gemma3(num_hidden_layers=3, sliding_window=4, sliding_window_pattern=3),
                   qwen2(num_hidden_layers=3, use_sliding_window=True, sliding_window=4,
                         max_window_layers=1),
                   mistral(num_hidden_layers=2, sliding_window=4),
                   llama4(num_hidden_layers=4, attention_chunk_size=4, no_rope_layer_interval=2)):
        seen.clear()
        model = transformers.AutoModelForCausalLM.from_config(config,
                                                              attn_implementation="dcp_test_spy")
        with torch.no_grad():
            model(input_ids=torch.zeros(1, 6, dtype=torch.long), use_cache=False)
        kinds, layers = dcphf.attention_kinds(config)
        assert [kind for kind, _ in seen] == layers, type(config).__name__
        for kind, window in seen:
            assert window == (config.sliding_window if kind == SLIDING else None), (kind, window)


def test_layer_kind_takes_a_config_or_the_layer_kinds() -> None:
    config = qwen2(num_hidden_layers=3, use_sliding_window=True, sliding_window=8,
                   max_window_layers=1)
    assert [dcphf.layer_kind(config, i) for i in range(3)] == [F, S, S]
    _, layers = dcphf.attention_kinds(config)
    assert dcphf.layer_kind(layers, 2) == S
    assert dcphf.layer_kind(tuple(layers), 0) == F
    for bad in (3, -1, True, "0"):
        with pytest.raises(ValueError, match=f"layer_idx {bad!r} is not a layer of a model with "
                                             "3 layers"):
            dcphf.layer_kind(layers, bad)


def test_model_mask_takes_one_kind_and_names_each_kinds_layers_otherwise() -> None:
    assert dcphf.model_mask(llama4(num_hidden_layers=2, attention_chunk_size=64,
                                   layer_types=[C, C])) == "chunked:chunk=64"
    assert dcphf.model_mask(qwen3(num_hidden_layers=0)) == "causal"
    with pytest.raises(ValueError, match=r"layers differ in attention \(chunked_attention: layers "
                                         r"\[0, 1, 2\]; full_attention: layers \[3\]\)"):
        dcphf.model_mask(llama4(num_hidden_layers=4, attention_chunk_size=64))
    opts = dcphf.plan_options(llama4(num_hidden_layers=2, attention_chunk_size=64,
                                     layer_types=[C, C]))
    assert opts["mask_fn"](None) == "chunked:chunk=64"


def _set(config, **attributes):
    for name, value in attributes.items():
        object.__setattr__(config, name, value)
    return config


@pytest.mark.parametrize("config,words", [
    (lambda: qwen3(num_hidden_layers=2, layer_types=[F, "linear_attention"]),
     "layers [1] use 'linear_attention', which dcp does not plan"),
    (lambda: transformers.Gemma2Config(num_hidden_layers=2, **TINY),
     "attn_logit_softcapping=50.0"),
    (lambda: gemma3(num_hidden_layers=2, use_bidirectional_attention=True),
     "use_bidirectional_attention=True"),
    (lambda: _set(transformers.LlamaConfig(num_hidden_layers=2, **TINY), is_causal=False),
     "is_causal=False"),
    (lambda: _set(mistral(num_hidden_layers=2), sliding_window=0),
     "MistralConfig.sliding_window=0 is not a positive integer"),
    (lambda: _set(mistral(num_hidden_layers=2), sliding_window=-4),
     "sliding_window=-4 is not a positive integer"),
    (lambda: _set(mistral(num_hidden_layers=2), sliding_window=4.5),
     "sliding_window=4.5 is not a positive integer"),
    (lambda: qwen2(num_hidden_layers=2, use_sliding_window=False, layer_types=[S, F]),
     "layers [0] are sliding_attention but sliding_window is None"),
    (lambda: llama4(num_hidden_layers=2, attention_chunk_size=None, layer_types=[C, F]),
     "layers [0] are chunked_attention but attention_chunk_size is None"),
    (lambda: llama4(num_hidden_layers=2, attention_chunk_size=0),
     "attention_chunk_size=0 is not a positive integer"),
    (lambda: transformers.LlamaConfig(num_hidden_layers=2, layer_types=[C, C], **TINY),
     "carries layer_types ['chunked_attention', 'chunked_attention'], which its model does not "
     "read (LlamaConfig declares no layer_types): its layers run ['full_attention', "
     "'full_attention']"),
    (lambda: mistral(num_hidden_layers=2, sliding_window=16, layer_types=[F, F]),
     "its layers run ['sliding_attention', 'sliding_attention']"),
    (lambda: _set(qwen3(num_hidden_layers=3), layer_types=[F, F]),
     "Qwen3Config has 2 layer_types for num_hidden_layers=3"),
    (lambda: _set(gemma3(num_hidden_layers=3), layer_types=None, _sliding_window_pattern=0),
     "sliding window pattern 0 is not a positive integer"),
    (lambda: _set(llama4(num_hidden_layers=3), layer_types=None, no_rope_layers=[1, 0]),
     "2 no_rope_layers for num_hidden_layers=3"),
])
def test_refusals_name_the_value(config, words) -> None:
    with pytest.raises(ValueError) as info:
        dcphf.attention_kinds(config())
    assert words in str(info.value)


def test_undeclared_layer_types_that_agree_with_the_model_are_taken() -> None:
    config = mistral(num_hidden_layers=2, sliding_window=16, layer_types=[S, S])
    assert dcphf.attention_kinds(config) == ({S: "sliding_window:window=16"}, [S, S])
