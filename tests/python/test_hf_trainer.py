# SPDX-License-Identifier: Apache-2.0
"""DCPTrainer and DCPSFTTrainer (dcp.torch.hf) on 2 gloo ranks against the plain
transformers.Trainer on one process with sdpa over the same packed batches: every logged loss and
grad norm to 1e-4 relative (fp32, gradient accumulation 2, clipping, a linear schedule; a tiny
Llama, a tiny Gemma 3 with sliding-window and full layers under gradient checkpointing, and TRL's
SFTTrainer with completion-only loss), the eval loss on dcp against sdpa, a run resumed from its
step-5 checkpoint continuing with the same batches and losses, and the Trainer arguments and
inputs dcp refuses or overrides."""
from __future__ import annotations

import tempfile
import warnings

import pytest
import torch

pytest.importorskip("transformers")
pytest.importorskip("accelerate")

import trainer_cases  # noqa: E402
from trainer_cases import TRAIN  # noqa: E402
from worlds import run_world_once  # noqa: E402


def _world() -> list[dict]:
    return run_world_once("hf_trainer", 2, trainer_cases.trainer_world, tempfile.mkdtemp(),
                          timeout=600, group_timeout=120)


def _close(got: list[float], want: list[float], what: str) -> None:
    assert len(got) == len(want), (what, got, want)
    for step, (a, b) in enumerate(zip(got, want)):
        assert abs(a - b) <= 1e-4 * abs(b), f"{what} step {step + 1}: dcp {a} vs sdpa {b}"


def _check_run(ranks: list[dict], name: str, family: str, sft: bool = False) -> dict:
    got = ranks[0][name]
    for other in ranks[1:]:
        assert other[name]["losses"] == got["losses"], name
        assert other[name]["batches"] == got["batches"], name
    # Both ranks train every micro-batch of every step: the batches and samples of the dense run.
    assert len(got["batches"]) == TRAIN["steps"] * TRAIN["accumulation"], name
    assert got["ddp"] == "DistributedDataParallel", name  # accelerate's DDP, made to sum
    want = trainer_cases.dense_trainer(family, got["batches"], sft=sft,
                                       output_dir=tempfile.mkdtemp(),
                                       eval_samples=list(range(12)) if "eval_loss" in got
                                       else None)
    _close(got["losses"], want["losses"], f"{name} loss")
    _close(got["grad_norms"], want["grad_norms"], f"{name} grad norm")
    assert want["losses"][-1] < want["losses"][0], name  # it learns
    if "eval_loss" in got:
        assert abs(got["eval_loss"] - want["eval_loss"]) <= 1e-4 * want["eval_loss"], (
            got["eval_loss"], want["eval_loss"])
    return got


@pytest.mark.seconds(30)
def test_dcp_trainer_on_two_ranks_trains_llama_like_one_sdpa_process() -> None:
    _check_run(_world(), "llama", "llama")


@pytest.mark.seconds(25)
def test_dcp_trainer_trains_gemma3_with_checkpointing_and_evaluates_like_sdpa() -> None:
    got = _check_run(_world(), "gemma3", "gemma3")
    assert "eval_loss" in got


@pytest.mark.seconds(25)
def test_dcp_sft_trainer_trains_completion_only_like_one_sdpa_process() -> None:
    pytest.importorskip("trl")
    got = _check_run(_world(), "sft", "llama", sft=True)
    llama = _world()[0]["llama"]
    assert got["losses"] != llama["losses"]  # the prompts' tokens left out of the loss


@pytest.mark.seconds(25)
def test_resume_from_step_5_continues_with_the_next_batches_and_the_same_losses() -> None:
    ranks = _world()
    whole, resumed = ranks[0]["llama"], ranks[0]["llama_resumed"]
    half = TRAIN["steps"] // 2
    assert resumed["batches"] == whole["batches"][half * TRAIN["accumulation"]:]
    assert resumed["losses"][half:] == pytest.approx(whole["losses"][half:], rel=1e-6)
    assert ranks[1]["llama_resumed"]["losses"] == resumed["losses"]


def _trainer(dataset=None, family: str = "llama", **kwargs):
    import dcp.torch.hf as dcphf
    import hf_models
    dcphf.register()
    options = dict(tokens_per_batch=TRAIN["tokens_per_batch"])
    options.update(kwargs)
    args = options.pop("args", None) or trainer_cases.arguments(tempfile.mkdtemp())
    model = options.pop("model", None) or hf_models.build_model(family, "dcp", seed=0)
    return dcphf.DCPTrainer(model=model, args=args,
                            train_dataset=trainer_cases.Samples() if dataset is None else dataset,
                            **options)


def test_trainer_arguments_dcp_cannot_honour_are_refused_or_overridden() -> None:
    import transformers
    with pytest.raises(ValueError, match="data_collator"):
        _trainer(data_collator=transformers.default_data_collator)
    for field, value in (("train_sampling_strategy", "group_by_length"),
                         ("label_smoothing_factor", 0.1),
                         ("auto_find_batch_size", True)):
        args = trainer_cases.arguments(tempfile.mkdtemp(), **{field: value})
        with pytest.raises(ValueError, match=f"{field}={value!r}"):
            _trainer(args=args)
    with pytest.raises(ValueError, match="compute_metrics"):
        _trainer(compute_metrics=lambda p: {})
    args = trainer_cases.arguments(tempfile.mkdtemp(), per_device_train_batch_size=4)
    with pytest.warns(UserWarning, match="per_device_train_batch_size=4 is ignored"):
        trainer = _trainer(args=args)
    assert trainer.args.per_device_train_batch_size == 1
    with pytest.raises(ValueError, match="predict"):
        trainer.predict(trainer_cases.Samples())
    # A model loaded with another attention is switched to dcp, with a warning.
    import hf_models
    with pytest.warns(UserWarning, match="ran attention 'sdpa'; it now runs 'dcp'"):
        trainer = _trainer(model=hf_models.build_model("llama", "sdpa", seed=0))
    assert trainer.model.config._attn_implementation == "dcp"
    with pytest.raises(ValueError, match="tokens_per_batch 1 "):
        _trainer(tokens_per_batch=1)


def test_bad_input_is_refused_before_the_first_step_naming_the_value() -> None:
    import transformers
    samples = trainer_cases.Samples().samples
    with pytest.raises(TypeError, match="sample 1 is text"):
        _trainer([samples[0], "some text"])
    with pytest.raises(ValueError, match=r"sample 0 is a dict with keys \['text'\], without "
                       "'input_ids'"):
        _trainer([{"text": [1, 2]}])
    with pytest.raises(TypeError, match="sample 0 holds torch.float32"):
        _trainer([torch.ones(5)])
    with pytest.raises(ValueError, match="sample 1 has 300 tokens, more than tokens_per_batch "
                       "256"):
        _trainer([samples[0], list(range(300))])
    with pytest.raises(ValueError, match="label 7 at position 1"):
        _trainer([{"input_ids": [1, 2, 3], "labels": [-100, 7, 3]}])
    class Stream(torch.utils.data.IterableDataset):
        def __iter__(self):
            yield {"input_ids": [1, 2, 3], "completion_mask": [0, 1, 1]}
    with pytest.raises(ValueError, match="map-style datasets only"):
        _trainer(Stream())
    # An attention kind dcp cannot plan: Gemma 2's softcapping.
    config = transformers.Gemma2Config(vocab_size=256, hidden_size=32, intermediate_size=64,
                                       num_hidden_layers=2, num_attention_heads=2,
                                       num_key_value_heads=1, head_dim=16)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        model = transformers.AutoModelForCausalLM.from_config(config,
                                                             attn_implementation="eager")
        with pytest.raises(ValueError, match="attn_logit_softcapping=50.0"):
            _trainer(model=model)
