# SPDX-License-Identifier: Apache-2.0
"""Small random-initialised transformers models of the families dcp is tested on, byte-level
(vocabulary 256, as text_corpus's samples), for examples/train_hf.py and the tests.

    model = build_model("qwen3", attn_implementation="dcp", seed=0)

A family name builds a tiny config of that family (nothing downloaded); any other name is a local
checkpoint directory, loaded with from_pretrained."""
from __future__ import annotations

import os

import torch

# Each family's distinguishing attention feature is kept: Qwen3's q/k norms, Mistral's sliding
# window on every layer, Granite's softmax scale (attention_multiplier) other than 1/sqrt(d),
# Gemma 3's sliding-window and full layers (and its query_pre_attn_scalar), Qwen2's window on the
# layers from max_window_layers on.
_SHAPE = dict(vocab_size=256, hidden_size=64, intermediate_size=160, num_hidden_layers=2,
              num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=4096,
              tie_word_embeddings=False)
FAMILIES = {
    "llama": ("LlamaConfig", {}),
    "qwen3": ("Qwen3Config", dict(head_dim=16)),
    "mistral": ("MistralConfig", dict(head_dim=16, sliding_window=48)),
    "granite": ("GraniteConfig", dict(attention_multiplier=0.3, embedding_multiplier=2.0,
                                      residual_multiplier=0.5, logits_scaling=2.0)),
    "gemma3": ("Gemma3TextConfig", dict(head_dim=16, sliding_window=32, sliding_window_pattern=2)),
    "qwen2": ("Qwen2Config", dict(use_sliding_window=True, sliding_window=32,
                                  max_window_layers=1)),
}


def tiny_config(family: str):
    """The tiny config of `family` (one of FAMILIES)."""
    import transformers
    if family not in FAMILIES:
        raise ValueError(f"model family {family!r} is not one of {', '.join(FAMILIES)}")
    name, extra = FAMILIES[family]
    return getattr(transformers, name)(**_SHAPE, **extra)


def build_model(name: str, attn_implementation: str, seed: int = 0,
                dtype: torch.dtype = torch.float32) -> torch.nn.Module:
    """A causal LM: a tiny random model of family `name` (weights from `seed`, the same in every
    process), or the checkpoint in directory `name`."""
    import transformers
    if name in FAMILIES:
        torch.manual_seed(seed)
        return transformers.AutoModelForCausalLM.from_config(
            tiny_config(name), attn_implementation=attn_implementation, dtype=dtype)
    if not os.path.isdir(name):
        raise ValueError(f"--model {name!r} is neither a family ({', '.join(FAMILIES)}) nor a "
                         "checkpoint directory")
    return transformers.AutoModelForCausalLM.from_pretrained(
        name, attn_implementation=attn_implementation, dtype=dtype)
