# SPDX-License-Identifier: Apache-2.0
"""dcp.torch.hf: what plan_options derives from transformers configs, and every refusal, each an
error naming the offending value (one process, no group)."""
from __future__ import annotations

import pytest
import torch

transformers = pytest.importorskip("transformers")

import dcp  # noqa: E402
import dcp.torch as dcpt  # noqa: E402
import dcp.torch.hf as dcphf  # noqa: E402
import hf_models  # noqa: E402

SEQLENS = [40, 24]


@pytest.fixture(scope="module", autouse=True)
def registered():
    dcphf.register()


def prepared(config, **options) -> dcpt.DCPExecutor:
    opts = dcphf.plan_options(config)
    opts.update(options)
    plan = dcp.plan(SEQLENS, opts["mask_fn"](None), heads=opts["heads"],
                    kv_heads=opts["kv_heads"], head_dim=opts["head_dim"], dtype="fp32",
                    nodes=1, devices_per_node=1, block_size=16, cluster="cpu-local")
    executor = dcpt.DCPExecutor(threads=1)
    executor.prepare(plan)
    return executor


def call(model, executor, tokens: int = sum(SEQLENS), batch: int = 1, **kwargs):
    ids = torch.randint(0, 256, (batch, tokens))
    positions = torch.cat([torch.arange(n) for n in SEQLENS])[None].expand(batch, -1)
    kwargs.setdefault("use_cache", False)
    kwargs.setdefault("dcp_executor", executor)
    return model(input_ids=ids, position_ids=positions[:, :tokens], **kwargs)


def test_register_makes_the_name_known() -> None:
    model = hf_models.build_model("llama", "dcp")
    assert model.config._attn_implementation == "dcp"
    assert transformers.AttentionInterface()["dcp"] is dcphf.dcp_attention
    dcphf.register()  # again: harmless


@pytest.mark.parametrize("family,mask,shape", [
    ("llama", "causal", (4, 2, 16)),
    ("qwen3", "causal", (4, 2, 16)),
    ("mistral", "sliding_window:window=48", (4, 2, 16)),
    ("granite", "causal", (4, 2, 16)),
])
def test_plan_options_of_the_families(family, mask, shape) -> None:
    opts = dcphf.plan_options(hf_models.tiny_config(family))
    assert (opts["heads"], opts["kv_heads"], opts["head_dim"]) == shape
    assert opts["mask_fn"](torch.arange(3)) == mask


def test_token_flops_counts_the_projections_the_mlp_and_the_output_layer() -> None:
    config = transformers.LlamaConfig(hidden_size=64, num_attention_heads=4, num_key_value_heads=2,
                                      head_dim=16, intermediate_size=128, vocab_size=100,
                                      num_hidden_layers=2)
    # q and o: 64 x 64 each, k and v: 64 x 32 each; gate, up, down: 64 x 128 each; the output
    # layer's 100 x 64 over 2 layers; 6 FLOPs per weight (forward 2, backward 4).
    weights = 2 * 64 * 64 + 2 * 64 * 32 + 3 * 64 * 128 + 100 * 64 / 2
    assert dcphf.token_flops(config) == 6 * weights
    assert dcphf.plan_options(config)["token_flops"] == 6 * weights
    gpt2_like = transformers.GPT2Config(n_embd=64, n_head=4, n_layer=2)
    # No intermediate_size: an MLP of two 64 x 256 matrices.
    assert dcphf.token_flops(gpt2_like) == 6 * (4 * 64 * 64 + 2 * 64 * 256 + 50257 * 64 / 2)


def test_plan_options_reads_head_dim_and_kv_heads_defaults() -> None:
    config = transformers.LlamaConfig(hidden_size=96, num_attention_heads=6,
                                      num_key_value_heads=None, head_dim=None)
    opts = dcphf.plan_options(config)
    assert (opts["heads"], opts["kv_heads"], opts["head_dim"]) == (6, 6, 16)
    mistral = transformers.MistralConfig(sliding_window=None)
    assert dcphf.model_mask(mistral) == "causal"
    qwen_all_window = transformers.Qwen2Config(num_hidden_layers=3, use_sliding_window=True,
                                               sliding_window=64, max_window_layers=0)
    assert dcphf.model_mask(qwen_all_window) == "sliding_window:window=64"


@pytest.mark.parametrize("config,words", [
    (lambda: transformers.Gemma3TextConfig(num_hidden_layers=6),
     "full_attention: layers [5]; sliding_attention: layers [0, 1, 2, 3, 4]"),
    (lambda: transformers.Qwen2Config(num_hidden_layers=4, use_sliding_window=True,
                                      sliding_window=64, max_window_layers=2),
     "full_attention: layers [0, 1]; sliding_attention: layers [2, 3]"),
    (lambda: transformers.Gemma2Config(num_hidden_layers=2), "attn_logit_softcapping=50.0"),
    (lambda: transformers.LlamaConfig(num_hidden_layers=2,
                                      layer_types=["chunked_attention"] * 2), "chunked_attention"),
])
def test_model_mask_refuses_what_one_mask_cannot_express(config, words) -> None:
    with pytest.raises(ValueError) as info:
        dcphf.model_mask(config())
    assert words in str(info.value)


@pytest.mark.parametrize("config,words", [
    (lambda: transformers.Gemma2Config(num_hidden_layers=2), "attn_logit_softcapping=50.0"),
    (lambda: transformers.LlamaConfig(num_hidden_layers=2,
                                      layer_types=["chunked_attention"] * 2), "chunked_attention"),
])
def test_plan_options_refuses_what_dcp_cannot_plan(config, words) -> None:
    with pytest.raises(ValueError) as info:
        dcphf.plan_options(config())
    assert words in str(info.value)


@pytest.mark.parametrize("config,kinds,layers", [
    (lambda: transformers.Gemma3TextConfig(num_hidden_layers=6),
     {"sliding_attention": "sliding_window:window=4096", "full_attention": "causal"},
     {"sliding_attention": 5, "full_attention": 1}),
    (lambda: transformers.Qwen2Config(num_hidden_layers=4, use_sliding_window=True,
                                      sliding_window=64, max_window_layers=2),
     {"full_attention": "causal", "sliding_attention": "sliding_window:window=64"},
     {"full_attention": 2, "sliding_attention": 2}),
])
def test_plan_options_of_models_whose_layers_differ(config, kinds, layers) -> None:
    opts = dcphf.plan_options(config())
    assert opts["mask_fn"](torch.arange(3)) == kinds
    assert list(opts["mask_fn"](torch.arange(3))) == list(kinds)  # in the order of first layers
    assert opts["layers"] == layers


def test_refused_calls() -> None:
    model = hf_models.build_model("llama", "dcp")
    executor = prepared(model.config)
    call(model, executor)  # the good call runs
    cases = [
        (dict(dcp_executor=None), ValueError, "dcp_executor"),
        (dict(dcp_executor="executor"), TypeError, "dcp_executor is a str"),
        (dict(use_cache=True), ValueError, "use_cache=True"),
        (dict(output_attentions=True), ValueError, "output_attentions"),
        (dict(batch=2), ValueError, "batch size 1"),
        (dict(attention_mask=torch.ones(1, sum(SEQLENS), dtype=torch.long)), ValueError,
         "attention_mask of shape (1, 64)"),
    ]
    for kwargs, error, words in cases:
        with pytest.raises(error) as info:
            call(model, **{"executor": executor, **kwargs})
        assert words in str(info.value), (kwargs, str(info.value))


def test_the_default_use_cache_is_refused() -> None:
    model = hf_models.build_model("llama", "dcp")
    ids = torch.randint(0, 256, (1, sum(SEQLENS)))
    with pytest.raises(ValueError, match="use_cache=True"):
        model(input_ids=ids, dcp_executor=prepared(model.config))


def test_an_executor_without_a_plan_is_refused() -> None:
    model = hf_models.build_model("llama", "dcp")
    with pytest.raises(ValueError, match="layer 0: the DCPExecutor .* has no plan"):
        call(model, dcpt.DCPExecutor(threads=1))


def test_heads_or_head_dim_other_than_the_plans() -> None:
    model = hf_models.build_model("llama", "dcp")
    with pytest.raises(ValueError, match=r"layer 0: \(heads, kv heads, head dim\) = \(4, 2, 16\), "
                       r"but the plan is for \(4, 4, 16\)"):
        call(model, prepared(model.config, kv_heads=4))
    with pytest.raises(ValueError, match=r"but the plan is for \(4, 2, 8\)"):
        call(model, prepared(model.config, head_dim=8))


def test_local_tokens_other_than_the_plans() -> None:
    model = hf_models.build_model("llama", "dcp")
    with pytest.raises(ValueError, match=r"q has shape \(63, 4, 16\)"):
        call(model, prepared(model.config), tokens=sum(SEQLENS) - 1)


def test_attention_dropout_in_training_is_refused() -> None:
    config = hf_models.tiny_config("llama")
    config.attention_dropout = 0.1
    model = transformers.AutoModelForCausalLM.from_config(config, attn_implementation="dcp")
    executor = prepared(config)
    model.eval()
    call(model, executor)  # no dropout in eval
    model.train()
    with pytest.raises(ValueError, match="attention dropout 0.1"):
        call(model, executor)


def test_softcapping_is_refused_at_the_call() -> None:
    config = transformers.Gemma2Config(vocab_size=256, hidden_size=64, intermediate_size=128,
                                       num_hidden_layers=2, num_attention_heads=4,
                                       num_key_value_heads=2, head_dim=16,
                                       layer_types=["full_attention"] * 2)
    model = transformers.AutoModelForCausalLM.from_config(config, attn_implementation="dcp")
    plan = dcp.plan(SEQLENS, "causal", heads=4, kv_heads=2, head_dim=16, dtype="fp32", nodes=1,
                    devices_per_node=1, block_size=16, cluster="cpu-local")
    executor = dcpt.DCPExecutor(threads=1)
    executor.prepare(plan)
    with pytest.raises(ValueError, match="softcap=50.0"):
        call(model, executor)


def test_temperature_tuning_on_no_rope_layers_is_refused_when_planned_and_at_the_call() -> None:
    """Llama 4 scales a no-RoPE layer's queries by each token's index among the call's tokens,
    which on a rank of dcp is not its place in the batch: refused, not run differently."""
    config = transformers.Llama4TextConfig(
        vocab_size=256, hidden_size=64, intermediate_size=128, intermediate_size_mlp=128,
        num_local_experts=2, num_hidden_layers=4, num_attention_heads=4, num_key_value_heads=2,
        head_dim=16, attention_chunk_size=None, floor_scale=1)
    assert config.attn_temperature_tuning and 0 in config.no_rope_layers
    with pytest.raises(ValueError, match="attn_temperature_tuning=True"):
        dcphf.plan_options(config)
    model = transformers.AutoModelForCausalLM.from_config(config, attn_implementation="dcp")
    config.attn_temperature_tuning = False
    executor = prepared(config)
    with pytest.raises(ValueError,
                       match="layer 3: attention temperature tuning on a no-RoPE layer"):
        call(model, executor)
    for layer in model.model.layers:
        layer.self_attn.attn_temperature_tuning = False
    call(model, executor)


def test_attention_sinks_and_bidirectional_layers_are_refused() -> None:
    model = hf_models.build_model("llama", "dcp")
    executor = prepared(model.config)
    q = torch.randn(1, 4, sum(SEQLENS), 16)
    kv = torch.randn(1, 2, sum(SEQLENS), 16)
    layer = model.model.layers[0].self_attn
    with pytest.raises(ValueError, match="layer 0: learned attention sinks"):
        dcphf.dcp_attention(layer, q, kv, kv, None, dcp_executor=executor, s_aux=torch.zeros(4))
    with pytest.raises(ValueError, match="layer 0: bidirectional attention"):
        dcphf.dcp_attention(layer, q, kv, kv, None, dcp_executor=executor, is_causal=False)


def test_the_models_own_loss_with_loss_kwargs() -> None:
    """model(..., **loss_kwargs(lb)) is the sum of the local token losses over the batch's loss
    tokens, labels taken as already shifted."""
    model = hf_models.build_model("llama", "dcp")
    executor = prepared(model.config)
    plan = executor.plan
    positions = torch.from_numpy(plan.local_token_positions(0))
    ids = torch.randint(0, 256, (sum(SEQLENS),))
    labels = ids.roll(-1)
    labels[[SEQLENS[0] - 1, sum(SEQLENS) - 1]] = -100
    lb = dcpt.LocalBatch(input_ids=ids[positions], labels=labels[positions],
                         position_ids=torch.cat([torch.arange(n) for n in SEQLENS])[positions],
                         loss_mask=labels[positions] != -100, loss_tokens=123, seqlens=SEQLENS,
                         batch_indices=[0, 1], global_positions=positions)
    out = model(input_ids=lb.input_ids[None], position_ids=lb.position_ids[None],
                dcp_executor=executor, use_cache=False, **dcphf.loss_kwargs(lb))
    want = torch.nn.functional.cross_entropy(out.logits[0], lb.labels, ignore_index=-100,
                                             reduction="sum") / 123
    torch.testing.assert_close(out.loss, want, rtol=1e-6, atol=0)
