# SPDX-License-Identifier: Apache-2.0
"""Stock transformers models (tiny random Llama, Qwen3, Mistral with a window on every layer and
Granite with its own softmax scale) trained on dcp with attn_implementation="dcp" on 2 and 4 gloo
ranks: every step's loss equals the same model with attn_implementation="sdpa" on one process,
fed the packed batch with restarting position ids, to 1e-4 relative (fp32), and every parameter's
gradient after the first step equals the baseline's. Models whose layers attend differently
(Gemma 3's sliding-window and full layers, Qwen2 windowed from max_window_layers on: a plan of
two attention kinds per batch) do the same on 2 ranks."""
from __future__ import annotations

import pytest

pytest.importorskip("transformers")

import hf_cases  # noqa: E402
import hf_models  # noqa: E402
from worlds import run_world  # noqa: E402

KIND_FAMILIES = ["gemma3", "qwen2"]  # layers of two attention kinds
FAMILIES = [family for family in hf_models.FAMILIES if family not in KIND_FAMILIES]


@pytest.mark.seconds(20)
@pytest.mark.parametrize("size,families", [(2, FAMILIES), (4, FAMILIES), (2, KIND_FAMILIES)])
def test_transformers_models_train_on_dcp_like_one_sdpa_process(size: int,
                                                                 families: list[str]) -> None:
    ranks = run_world(size, hf_cases.train_hf_dcp, families, timeout=600, group_timeout=120)
    for family in families:
        got = ranks[0][family]
        assert len(got["losses"]) == hf_cases.HF_TRAIN["steps"], family
        for other in ranks[1:]:
            assert other[family]["losses"] == got["losses"], family
            assert other[family]["batches"] == got["batches"], family
        # The model's own loss with loss_kwargs is dcp's sum over loss tokens / the batch's.
        assert got["gap"] <= 1e-6 * max(abs(x) for x in got["losses"]), (family, got["gap"])
        want = hf_cases.train_hf_dense(family, got["batches"])
        for step, (a, b) in enumerate(zip(got["losses"], want["losses"])):
            assert abs(a - b) <= 1e-4 * abs(b), f"{family} step {step}: dcp {a} vs sdpa {b}"
        assert set(got["grads"]) == set(want["grads"]), family
        for name, grad in want["grads"].items():
            scale = grad.abs().max().item()
            err = (got["grads"][name] - grad).abs().max().item()
            assert err <= 1e-4 * scale + 1e-9, f"{family} {name}: gradient off by {err} of {scale}"
        assert want["losses"][-1] < want["losses"][0], family  # it learns
        assert got["kinds"] == len(set(hf_cases.layer_kinds(family))), family
